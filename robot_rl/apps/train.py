"""In-process training in the sim mirror: demos, SAC learner with RLPD mixing, simulated human, eval, report.

A run is a folder: ``config.json``, ``demos.zarr``, ``checkpoint/`` (learner and the run's progress),
``checkpoint.replay/`` (the replay buffers, appended to as episodes end: robot_rl.data.replay_store),
``transition_log/`` (the transitions received since the checkpoint, as the ROS learner keeps them), ``policy.msgpack`` (the policy file `robot-rl eval` and the ROS actor node load), ``tensorboard/``, ``report.md``
with ``learning_curve.png`` and ``training_curves.png``, and ``eval.mp4``.

Each control step runs as on the robot: the same `ActorSession` the ROS actor node uses turns the actor's decision
(policy, uniform warm-up or the simulated human) into a safe absolute command through the safety layer, the sim env
executes it (robot_rl.sim.robot_adapter), all in the one episode loop (robot_rl.actor.runner.EpisodeRunner) the actor
node runs; the session's transitions go from its outbox into an in-memory `robot_rl.learner.server.LearnerServer`,
the ingest the ROS learner node uses (transition log, episodes inserted into replay when they end, learner steps
owed to the data received). A command the safety layer holds (a non-finite action) still takes an env step but makes
no transition, as on the robot; the checkpoint's ``learner.json`` counts commands, holds and clips under
``extra.safety``. Evaluations run the deterministic policy through the same loop and safety layer
(robot_rl.sim.evaluate, shared with `robot-rl eval`). The last env step of the run ends its episode there (its last
step bootstraps, as at a time limit).

Checkpoints are taken every `checkpoint_every` env steps, after every evaluation, at the end, and when SIGINT or
SIGTERM stop the run; so a checkpoint can fall in the middle of an episode. It then holds that episode's
transitions so far, and a resumed run ends the episode there (its last step bootstraps, as at a time limit) and
starts the same episode (same seed) again from its reset: env steps and the learner's transitions stay equal (less
the held steps), and nothing is trained on twice (what the transition log holds from after the checkpoint is
dropped: the resumed run collects it again).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core import interrupts
from robot_rl.agents.sac import ImageEncoderConfig, SACConfig
from robot_rl.core.config_io import config_from_json, config_to_json
from robot_rl.core.files import atomic_write_text
from robot_rl.learner.learner import Learner, LearnerConfig
from robot_rl.learner.server import LearnerServer
from robot_rl.policies.registry import LearnerPlan, kind_of, learner_plan
from robot_rl.sim.evaluate import EVAL_SEED_OFFSET, Evaluation, StopRequested, evaluate
from robot_rl.sim.human import SimulatedHumanConfig
from robot_rl.apps.train_rules import ObsMode, PolicyName, setting_problems
from robot_rl.wire.transport import Outbox

DEMO_SEED_OFFSET = 2_000_000
IN_PROCESS_ACTOR = "train"
"""The actor id of in-process training's `ActorSession` (each run of the process is a new incarnation of it)."""
CONFIG_FILE = "config.json"
CHECKPOINT_DIR = "checkpoint"
VIDEO_FILE = "eval.mp4"
# Options a resumed run may change: its schedule and outputs, nothing the learning depends on.
RESUME_OPTIONS = ("steps", "eval_every", "eval_episodes", "final_eval_episodes", "eval_latest_weights",
                  "checkpoint_every", "video")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A sim training run: task, demos, schedule, learner and agent settings."""

    task: str = "PickCube-v0"
    """Task name (PickCube-v0, PegInsert-v0)."""
    obs_mode: ObsMode = "state"
    """Observations the agent sees: `pixels` is what a real robot has (proprio + cameras)."""
    image_size: int = 64
    """Camera image height and width in pixels for pixel modes."""
    wrench: bool = False
    """Add the wrist force/torque reading to what the agent sees (obs key `wrench`: force [N] and torque [N m] about
    the TCP that the surroundings exert on the hand, base frame, zeroed at reset; sim only for now)."""
    demos: int = 20
    """Scripted demos to record into the run (ignored with --demo-path)."""
    demo_path: Path | None = None
    """Use an existing demo dataset instead of recording."""
    steps: int = 5000
    """Environment steps to train for (with --resume: extend the run to this many)."""
    weights_every: int = 5
    """Env steps between weight updates sent to the actor."""
    eval_every: int = 1000
    """Env steps between evaluations (each is followed by a checkpoint)."""
    eval_episodes: int = 20
    """Episodes per evaluation (deterministic policy, no human)."""
    final_eval_episodes: int | None = None
    """Episodes of the final evaluation (None: as many as --eval-episodes)."""
    eval_latest_weights: bool = False
    """With --sac.policy-average-rate: each evaluation also runs the last gradient step's weights on the same
    episodes (eval row `latest_success_rate`), to see what the average buys."""
    checkpoint_every: int = 2000
    """Env steps between checkpoints; there is also one after every evaluation, at the end and on Ctrl-C/SIGTERM."""
    policy: PolicyName = "plain"
    """What the SAC action means: `plain` = the robot action; `residual` = a scaled correction of a frozen base
    policy's action (--base), per control step: executed = clip(base + residual_scale * SAC action, -1, 1);
    `noise` = the initial noise of a frozen diffusion policy (--base), one decision per action chunk (DSRL)."""
    base: Path | None = None
    """Frozen base policy (a policy folder from `robot-rl train-bc` or `distill`; residual: also any policy file)
    for --policy residual / noise. The run's --obs-mode must give the entries it reads."""
    noise_bound: float = 1.5
    """With --policy noise: the SAC action w in [-1, 1] is the noise bound * w (DSRL's action magnitude)."""
    noise_repeat: bool = False
    """With --policy noise: the head picks one control step's noise, action_dim numbers repeated over the chunk (a
    low-dimensional noise space, as DSRL's pi0 variant uses), instead of the whole prediction_horizon x action_dim
    noise."""
    noise_aliasing: bool = False
    """With --policy noise: DSRL-NA. An action critic learns by TD on executed chunks (so demos and human
    interventions, whose noise is unknown, train it), a noise critic regresses it on (noise, chunk) pairs the actor
    denoises (--sac.aliasing-samples per decision), and the head maximises the noise critic."""
    residual_scale: float = 0.1
    """Scale of the residual correction in action units ([-1, 1] per dim) with --policy residual."""
    base_execute: int | None = None
    """Actions of each base chunk executed before the base plans again (None: its whole chunk)."""
    randomize: str | None = None
    """Domain randomisation: each training episode runs under one condition of this validation suite (a shipped
    suite's name such as `default`, or a YAML file: camera pose, lighting and colours, object physics, latency,
    sensor delay and drops, rate jitter, proprioceptive noise), drawn with its values from the episode's seed; the
    demos the run records and its evaluations stay nominal (a demo recorded under latency pairs each observation with
    a command that acts a step later: not what behaviour cloning should imitate).
    Train with the suite a robot validates with, and the gate tests what the policy has seen."""
    intervene: bool = False
    """Let the simulated human (the scripted expert) take over when the policy is stuck or leaving the workspace."""
    human: SimulatedHumanConfig = SimulatedHumanConfig()
    """The simulated human (with --intervene): when and how long it takes over, and how noisy its actions are."""
    seed: int = 0
    """Seed of the run: training episode k uses seed + k; demos and evaluations use their own held-out seeds."""
    run_dir: Path | None = None
    """Where to write logs, checkpoints and the report (None: runs/<task>-<obs_mode>-<time>)."""
    video: bool = True
    """Film the first episodes of the final evaluation (front and wrist cameras) to eval.mp4."""
    learner: LearnerConfig = LearnerConfig(utd=2, n_step=3)
    """Replay and updates of the learner; CPU preset: 2 gradient steps per env step (UTD 2), 3-step returns."""
    sac: SACConfig = SACConfig(
        critic_ensemble_size=2, discount=0.97, init_temperature=0.01, backup_entropy=False, bc_weight=2.5,
        target_bounds=(0.0, 1.0), image_encoder=ImageEncoderConfig(channels=(16, 16, 16)),
    )
    """SAC agent; CPU preset: 2 LayerNorm critics (as HIL-SERL), no entropy backup with sparse rewards, a BC term on
    demo rows, TD targets clipped to [0, 1] (the sim tasks pay 1 on success and end the episode: change
    target_bounds with the reward), and a 16-channel pixel encoder (about 1.6x faster than 32 channels on a CPU).
    On a GPU learner raise critic_ensemble_size (RLPD uses 10), utd and the encoder channels."""

    @property
    def learns_from_demos(self) -> bool:
        """Whether the run's learner can use demos (DSRL-SAC cannot: the noise behind a demo is unknown)."""
        return kind_of(self.policy).learns_from_demos(self)

    def __post_init__(self) -> None:
        # the rules on its own settings live apart (robot_rl.apps.train_rules): the ROS learner node checks its parameters
        # with them before it imports JAX
        problems = setting_problems({field.name: getattr(self, field.name) for field in dataclasses.fields(self)})
        if self.sac.residual_scale is not None:
            problems.append("sac.residual_scale is set by the run: use --policy residual --residual-scale "
                            f"{self.sac.residual_scale:g}")
        if self.sac.aliased_chunk_dim is not None:
            problems.append("sac.aliased_chunk_dim is set by the run: use --policy noise --noise-aliasing")
        if problems:
            raise ValueError(f"invalid {type(self).__name__}: {'; '.join(problems)}")

    def env_settings(self) -> dict[str, Any]:
        """make_env's settings for this run's sim env (the observations the agent sees)."""
        return {"obs_mode": self.obs_mode, "image_size": self.image_size, "wrench": self.wrench}


def randomized_env(env, suite: str):
    """`env` under the conditions of validation suite `suite` (name or file), one drawn per episode; ValueError (one
    line) for a suite that cannot be read or names what the task's model lacks."""
    from robot_rl.sim.perturb import RandomizedEnv
    from robot_rl.apps.validate import load_suite

    loaded = load_suite(suite)
    return RandomizedEnv(env, loaded.conditions, loaded.seed)


class RunError(ValueError):
    """A run folder cannot be used as asked: not a run, nothing to resume, or an option --resume cannot change."""


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM stopped `train` after it checkpointed and wrote the report so far."""

    def __init__(self, signum: int, env_step: int, steps: int, run_dir: Path, message: str | None = None):
        self.signum = signum
        self.exit_status = 128 + signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM
        self.env_step = env_step
        self.run_dir = run_dir
        super().__init__(message or f"interrupted at env step {env_step}/{steps}; resume with: robot-rl train "
                                    f"--resume {run_dir}")


class StopSignals:
    """While active, SIGINT and SIGTERM only set a flag that the training loop checks between env steps (a
    KeyboardInterrupt raised inside JAX, zarr or rich could leave state half-written). Calling it says whether a
    signal came; the first signal's number is kept. Under the `robot-rl` command's handling (robot_rl.core.interrupts)
    it defers that handling, and a stop request that came before is seen too; otherwise it installs its own
    handlers, and the previous ones come back on exit. Only the main thread can install handlers; elsewhere it never
    fires."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._flag = interrupts.StopFlag()
        self._restore: Callable[[], None] | None = None
        self._deferred = None

    @property
    def signum(self) -> int | None:
        return interrupts.requested() if self._deferred is not None else self._flag.signal_number

    def __enter__(self) -> StopSignals:
        if interrupts.active():
            self._deferred = interrupts.deferred()
            self._deferred.__enter__()
        elif threading.current_thread() is threading.main_thread():
            self._restore = interrupts.install_stop_signals(self._flag, self.SIGNALS)
        return self

    def __exit__(self, *exc) -> None:
        if self._deferred is not None:
            self._deferred.__exit__(None, None, None)
        if self._restore is not None:
            self._restore()
            self._restore = None

    def __call__(self) -> bool:
        return self.signum is not None

    def interrupt(self) -> KeyboardInterrupt:
        """The interrupt to raise for the stop request (KeyboardInterrupt, or Terminated for SIGTERM)."""
        return interrupts.interrupt_for(self.signum or signal.SIGINT)


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def option_name(field_path: str) -> str:
    """`sac.init_temperature` -> `--sac.init-temperature` (how the command line spells a config field)."""
    return "--" + field_path.replace("_", "-")


class EvalHistory:
    """Success rate, return and episode length at each evaluation."""

    def __init__(self, rows: list[dict[str, float]] | None = None):
        self.rows = list(rows or [])

    def add(self, env_step: int, evaluation: Evaluation) -> dict[str, float]:
        row = evaluation.report_row(env_step)
        self.rows.append(row)
        return row


def feed_server(server: LearnerServer, source: str, outbox: Outbox) -> int:
    """Ingest an in-process actor's outbox into `server` (what the ROS learner does with an actor node's
    transitions message) and acknowledge it there from the server's acks; returns how many transitions went."""
    items = outbox.due(0.0, max_items=len(outbox))  # never marked sent: every item is due
    if items:
        outbox.acknowledge(server.accept(source, items)[source])
    return len(items)


class UpdateRate:
    """Gradient updates per second since the previous reading, without the time the loop spent elsewhere
    (evaluations, checkpoints): the learner's speed now, as the ROS learner node reports it per episode."""

    def __init__(self, updates: int, now: float):
        self._updates, self._time, self._excluded = updates, now, 0.0

    def exclude(self, seconds: float) -> None:
        self._excluded += seconds

    def read(self, updates: int, now: float) -> float:
        rate = (updates - self._updates) / max(now - self._time - self._excluded, 1e-9)
        self._updates, self._time, self._excluded = updates, now, 0.0
        return rate


def default_run_dir(cfg: TrainConfig) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{cfg.task}-{cfg.obs_mode.replace('+', '_')}-{stamp}"


def record_demos(cfg: TrainConfig, run_dir: Path, *, should_stop=None, on_episode=None):
    """Scripted, successful demos in the run folder (or the given dataset); returns the dataset.

    `on_episode(kept, wanted)` after every recorded episode; `should_stop()` is checked after every env step: when
    it returns True nothing is kept (the partial dataset is removed) and StopRequested is raised."""
    from robot_rl.data.episodes import EpisodeDataset
    from robot_rl.sim.loop import make_env, record_episodes, writer_for_env
    from robot_rl.sim.expert import make_expert

    if cfg.demo_path is not None:
        return EpisodeDataset(cfg.demo_path)
    path = run_dir / "demos.zarr"
    if cfg.demos and not (path / "zarr.json").exists():
        # Recorded aside and moved into place when complete: a run killed while recording (even by kill -9) records
        # its demos again rather than training on a partial set.
        partial = run_dir / "demos.partial.zarr"
        shutil.rmtree(partial, ignore_errors=True)
        kept = 0

        def episode_done(result, keep: bool) -> None:
            nonlocal kept
            kept += keep
            if on_episode is not None:
                on_episode(kept, cfg.demos)

        try:
            env = make_env(cfg.task, **cfg.env_settings())
            try:
                with writer_for_env(env, partial, cfg.task, attrs={"policy": "scripted"}) as writer:
                    record_episodes(
                        env, make_expert(env, seed=cfg.seed), writer, cfg.demos, seed=cfg.seed + DEMO_SEED_OFFSET,
                        only_successes=True, on_episode=episode_done, should_stop=should_stop,
                    )
            finally:
                env.close()
            if should_stop is not None and should_stop():
                raise StopRequested
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        if (partial / "zarr.json").exists():
            shutil.rmtree(path, ignore_errors=True)
            partial.rename(path)
    return EpisodeDataset(path) if (path / "zarr.json").exists() else None


class DemoProgress:
    """The demo-recording phase's progress: a rich bar on a terminal (like the training bar), otherwise a line
    every few seconds (robot_rl.apps.progress). Use as a context manager; call it with (kept, wanted) after every
    episode."""

    def __init__(self, wanted: int):
        from rich.console import Console

        from robot_rl.apps.progress import ProgressLines

        self.wanted = wanted
        self.console = Console()
        self._progress = None
        self._lines = ProgressLines("recording demos", wanted, enabled=not self.console.is_terminal, unit="demo")

    def __enter__(self) -> DemoProgress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        if self.console.is_terminal:
            self._progress = Progress(TextColumn("[bold]recording demos"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=self.console, transient=True)
            self._bar = self._progress.add_task("demos", total=self.wanted)
            self._progress.start()
        return self

    def __call__(self, kept: int, wanted: int) -> None:
        if self._progress is not None:
            self._progress.update(self._bar, completed=kept)
        self._lines.update(kept)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()


def load_run(run_dir: Path) -> tuple[TrainConfig, dict[str, Any]]:
    """The saved config and progress (checkpoint state) of a run folder; RunError if there is nothing to resume."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunError(f"--resume {run_dir}: no such folder")
    config_file = run_dir / CONFIG_FILE
    if not config_file.is_file():
        raise RunError(f"--resume {run_dir}: not a training run (no {CONFIG_FILE})")
    try:
        saved = config_from_json(TrainConfig, json.loads(config_file.read_text()))
    except (ValueError, TypeError, KeyError) as error:
        raise RunError(f"{config_file} is not a valid run config: {error}") from None
    checkpoint = Learner.checkpoint_path(run_dir / CHECKPOINT_DIR)
    if checkpoint is None:
        raise RunError(f"nothing to resume: {run_dir} has no checkpoint (it stopped before its first one); "
                       "delete it or start a new run with another --run-dir")
    try:
        progress = json.loads((checkpoint / "learner.json").read_text())["extra"]
    except (OSError, ValueError, KeyError) as error:
        raise RunError(f"{checkpoint / 'learner.json'} is unreadable: {error}") from None
    return saved, progress


def resumed_config(run_dir: Path, saved: TrainConfig, progress: dict[str, Any],
                   requested: TrainConfig | None) -> TrainConfig:
    """The config a resumed run continues with: the saved one, with the changes `requested` may make
    (RESUME_OPTIONS); RunError for any other change, or a --steps the run cannot continue to."""
    requested = saved if requested is None else requested
    old, new = _flat(config_to_json(saved)), _flat(config_to_json(requested))
    changed = [k for k in new if new[k] != old.get(k) and k not in RESUME_OPTIONS
               and not (k == "run_dir" and new[k] == str(run_dir))]
    if changed:
        changes = ", ".join(f"{option_name(k)} ({old.get(k)} -> {new[k]})" for k in changed)
        allowed = ", ".join(option_name(k) for k in RESUME_OPTIONS)
        raise RunError(f"--resume {run_dir} keeps the run's saved config; cannot change {changes} "
                       f"(a resumed run may change {allowed})")
    cfg = dataclasses.replace(requested, run_dir=saved.run_dir)
    done = int(progress.get("env_step", 0))
    if cfg.steps < done:
        raise RunError(f"--steps {cfg.steps} is below the {done} env steps {run_dir} has done")
    if cfg.steps == done and progress.get("finished"):
        raise RunError(f"nothing to resume: {run_dir} finished its {done} env steps; extend it with "
                       f"--resume {run_dir} --steps N (N > {done})")
    return cfg


def train(cfg: TrainConfig | None = None, resume: Path | None = None) -> Path:
    """Run, or resume, a training run; returns the run folder.

    `resume`: a run folder to continue from its last checkpoint with its saved config; `cfg` may then change
    RESUME_OPTIONS (e.g. a larger `steps` extends a finished run). Bad input raises a ValueError (RunError for the
    run folder) before anything is written. SIGINT/SIGTERM checkpoint, write the report so far and raise
    TrainingInterrupted.
    """
    config_changed = False
    if resume is not None:
        run_dir = Path(resume)
        saved, progress = load_run(run_dir)
        cfg = resumed_config(run_dir, saved, progress, cfg)
        config_changed = cfg != saved
    else:
        cfg = cfg if cfg is not None else TrainConfig()
        run_dir = Path(cfg.run_dir) if cfg.run_dir is not None else default_run_dir(cfg)
        if (run_dir / CONFIG_FILE).exists():
            hint = (f"resume it with --resume {run_dir}" if Learner.checkpoint_path(run_dir / CHECKPOINT_DIR)
                    else "it has no checkpoint: delete it")
            raise RunError(f"{run_dir} already holds a run; {hint} or choose another --run-dir")
    with StopSignals() as stop:
        return _train(cfg, run_dir, resume is not None, config_changed, stop)


def _train(cfg: TrainConfig, run_dir: Path, resuming: bool, config_changed: bool, stop: StopSignals) -> Path:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from tensorboard.summary import Writer

    from robot_rl.actor.session import Actor
    from robot_rl.data.episodes import EpisodeDataset
    from robot_rl.actor.runner import run_episodes
    from robot_rl.learner.server import checkpoint_server_state
    from robot_rl.sim.loop import make_env
    from robot_rl.core.report import failure_modes_text, learner_counters, success_text, write_report
    from robot_rl.sim.human import SimulatedHuman
    from robot_rl.sim.robot_adapter import SimLink, SimRobotAdapter, sim_runner
    from robot_rl.wire.transport import make_source

    state: dict[str, Any] = {"env_step": 0, "episode": 0, "wall_seconds": 0.0, "evals": [], "episodes_log": [],
                             "metrics": [], "safety": {}, "finished": False}
    env = make_env(cfg.task, **cfg.env_settings())
    try:
        kind = policy_kind(cfg, env.observation_space, env.action_space.shape[0])
        if cfg.randomize:
            env = randomized_env(env, cfg.randomize)
    except BaseException:
        env.close()
        raise
    robot = SimRobotAdapter(env)
    eval_env = make_env(cfg.task, **cfg.env_settings())
    make_policy = kind.make_policy
    learner = Learner(kind.observation_spec, kind.action_dim, kind.sac, cfg.learner,
                      chunk_decisions=kind.chunk_decisions, robot_action_dim=kind.robot_action_dim)

    if resuming:
        progress = learner.restore(run_dir / CHECKPOINT_DIR)
        progress.pop("server", None)  # the server's own part
        state.update(progress)
        if config_changed:
            atomic_write_text(run_dir / CONFIG_FILE, json.dumps(config_to_json(cfg), indent=2))
        state["finished"] = False
        print(f"resumed {run_dir} from env step {state['env_step']} ({learner.updates} updates); "
              f"training to {cfg.steps} env steps")
    else:
        demos = EpisodeDataset(cfg.demo_path) if cfg.demo_path is not None else None
        if demos is not None and demos.task != cfg.task:
            raise RunError(f"--demo-path {cfg.demo_path} holds demos of task {demos.task!r}, this run is --task "
                           f"{cfg.task}")
        labeller = kind.demo_labeller(learner.agent)  # a head on a base: demos get base actions
        if not cfg.learns_from_demos and (demos is not None or cfg.demos):
            print("--policy noise learns from its own chunks only (the noise behind a demo is unknown; "
                  "--noise-aliasing learns from demos): no demos")
            demos = None
        if demos is not None:
            learner.add_demos(demos, labeller)  # checks the dataset against this run's spaces before the folder exists
        if stop():  # stopped while starting: nothing made yet
            env.close()
            eval_env.close()
            raise stop.interrupt()
        created = interrupts.first_missing(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            atomic_write_text(run_dir / CONFIG_FILE, json.dumps(config_to_json(cfg), indent=2))
            if demos is None and cfg.demos and cfg.learns_from_demos:
                with DemoProgress(cfg.demos) as on_episode:
                    demos = record_demos(cfg, run_dir, should_stop=stop, on_episode=on_episode)
                if demos is not None:
                    learner.add_demos(demos, labeller)
            if stop():
                raise StopRequested
        except BaseException as error:
            if created is not None:  # no half-made run folder (nor the folders made for it)
                shutil.rmtree(created, ignore_errors=True)
            else:
                (run_dir / CONFIG_FILE).unlink(missing_ok=True)
            env.close()
            eval_env.close()
            if isinstance(error, StopRequested):
                raise stop.interrupt() from None
            raise
        if demos is not None:
            print(f"{learner.demo_transitions} demo transitions from {demos.num_episodes} episodes ({demos.path})")
    server = LearnerServer(learner, run_dir, weights_every=cfg.weights_every)  # one learner step per transition
    server.make_policy = make_policy
    if resuming:  # this process restarts the actor from the checkpoint too: it collects those transitions again
        server.log.discard_after(int(checkpoint_server_state(run_dir).get("logged_through", -1)))
    server.open()
    server.attach(learner, extra=state)  # a checkpoint's partial episode is closed by this actor's first transitions
    if learner.warming_up:  # say why the first updates are late (or never come, in a short run)
        acting = "uniformly random actions" if kind.uniform_warmup else "the base policy acts"
        why = "no demos; " if not learner.demo_transitions else ""
        print(f"warm-up: {acting} and no updates for the next "
              f"{learner.warmup_transitions - learner.transitions} env steps ({why}--learner.warmup-transitions "
              "sets it)")
    # Seeded by the episode it starts at, like the actor: a resumed run does not replay the human's noise.
    human = SimulatedHuman(env, cfg.human, seed=cfg.seed + state["episode"]) if cfg.intervene else None
    if human is not None:
        human.total_steps = learner.interventions

    actor = Actor(make_policy(learner.agent, seed=cfg.seed + state["episode"]), seed=cfg.seed + state["episode"],
                  human=human)
    uniform_warmup = kind.uniform_warmup  # a run on a base acts with it (zero head output) from the start
    source = make_source(IN_PROCESS_ACTOR)
    eval_actor = Actor(make_policy(learner.agent), deterministic=True)
    history = EvalHistory(state["evals"])
    tb = Writer(str(run_dir / "tensorboard"))
    recent_success: list[bool] = [bool(e["success"]) for e in state["episodes_log"][-20:]]
    recent_interventions: list[float] = [e["intervention_rate"] for e in state["episodes_log"][-20:]]
    update_info: dict[str, float] = {}
    start_time = time.perf_counter() - state["wall_seconds"]
    update_rate = UpdateRate(learner.updates, time.perf_counter())
    env_step, episode = state["env_step"], state["episode"]
    unclosed = 0  # env steps executed whose transition the session has not closed yet (the last command's)
    next_checkpoint = env_step + cfg.checkpoint_every
    progress = Progress(TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[status]}"), refresh_per_second=4)
    bar = progress.add_task("train", total=cfg.steps, completed=env_step, status="")

    def print_line(line: str) -> None:
        progress.console.print(line, soft_wrap=True)

    def publish_weights():
        weights = server.weights()
        actor.update_weights(weights.policy, weights.version)
        eval_actor.update_weights(weights.policy, weights.version)

    def eval_due() -> bool:
        last = history.rows[-1]["env_step"] if history.rows else -1
        return last < 0 or env_step // cfg.eval_every > last // cfg.eval_every or (
            env_step >= cfg.steps and last != env_step)

    def run_eval() -> None:
        final = env_step >= cfg.steps
        episodes = (cfg.final_eval_episodes or cfg.eval_episodes) if final else cfg.eval_episodes
        publish_weights()
        started = time.perf_counter()
        evaluation = evaluate(eval_env, eval_actor, episodes, cfg.seed + EVAL_SEED_OFFSET,
                              video_path=run_dir / VIDEO_FILE if final and cfg.video else None, should_stop=stop)
        row = history.add(env_step, evaluation)
        for key in ("success_rate", "mean_return", "mean_length"):
            tb.add_scalar(f"eval/{key}", row[key], step=env_step)
        latest = ""
        if cfg.eval_latest_weights and learner.agent.policy_average is not None:
            latest_actor = Actor(make_policy(learner.agent.replace(policy_average=None)), deterministic=True)
            latest_eval = evaluate(eval_env, latest_actor, episodes, cfg.seed + EVAL_SEED_OFFSET, should_stop=stop)
            row["latest_success_rate"] = latest_eval.success_rate
            tb.add_scalar("eval/latest_success_rate", latest_eval.success_rate, step=env_step)
            latest = f"; the latest weights {success_text(latest_eval.successes, len(latest_eval.episodes))}"
        update_rate.exclude(time.perf_counter() - started)
        failures = f"; failure modes: {failure_modes_text(row['failure_modes'])}" if row["failure_modes"] else ""
        print_line(f"env step {env_step}: eval success {success_text(row['successes'], row['episodes'])}, "
                   f"return {row['mean_return']:.2f}, length {row['mean_length']:.1f}{latest}{failures}")

    def checkpoint() -> None:
        nonlocal next_checkpoint
        started = time.perf_counter()
        state.update(env_step=env_step, episode=episode, evals=history.rows,
                     wall_seconds=time.perf_counter() - start_time, safety=dict(runner.session.safety.counters))
        server.checkpoint(extra=state)
        next_checkpoint = env_step + cfg.checkpoint_every
        update_rate.exclude(time.perf_counter() - started)

    def report(status: str | None = None) -> Path:
        video = run_dir / VIDEO_FILE
        return write_report(
            run_dir, title=f"{cfg.task}, obs {cfg.obs_mode}", config=config_to_json(cfg), evals=history.rows,
            episodes=state["episodes_log"], metrics=state["metrics"], counters=learner_counters(learner),
            wall_seconds=state["wall_seconds"], video=video if video.exists() else None, status=status)

    def executed(_executed) -> None:
        nonlocal unclosed
        unclosed += 1
        if env_step + unclosed >= cfg.steps:  # the run's last env step: the episode ends there
            link.inputs.key("reset")

    def step_closed() -> None:
        """An env step's transition is closed (none after a held command): into the learner, which trains on what
        it owes; then an evaluation or a checkpoint when due."""
        nonlocal env_step, unclosed, update_info
        env_step += 1
        unclosed -= 1
        feed_server(server, source, runner.session.outbox)
        for rejection in server.rejections:
            print_line(f"warning: dropped {rejection}")
        server.rejections.clear()
        while server.pending_steps > 0:
            update_info, weights_due = server.train_step()
            if weights_due:
                publish_weights()
        if eval_due():
            run_eval()
            if env_step < cfg.steps:  # the final checkpoint follows the final evaluation
                checkpoint()
        elif env_step >= next_checkpoint and env_step < cfg.steps:
            checkpoint()

    def commanded(_step) -> None:
        if unclosed > 1:  # the session closed the previous command's step before choosing this one
            step_closed()

    def episode_ended(end) -> None:
        nonlocal episode, recent_success, recent_interventions
        step_closed()
        episode += 1
        success, length = link.episode_success, link.episode_steps
        intervention_rate = runner.session.episode_interventions / length
        recent_success = (recent_success + [success])[-20:]
        recent_interventions = (recent_interventions + [intervention_rate])[-20:]
        state["episodes_log"].append({"env_step": env_step, "success": success, "return": link.episode_reward,
                                      "length": length, "intervention_rate": intervention_rate,
                                      **({"takeovers": dict(human.rule.episode_takeovers)} if human else {}),
                                      **({"condition": env.active.condition.name} if cfg.randomize else {})})
        updates_per_s = update_rate.read(learner.updates, time.perf_counter())
        state["metrics"].append(
            {"env_step": env_step, "updates": learner.updates, "updates_per_s": updates_per_s, **update_info})
        tb.add_scalar("train/success", float(success), step=env_step)
        tb.add_scalar("train/intervention_rate", intervention_rate, step=env_step)
        tb.add_scalar("train/updates_per_s", updates_per_s, step=env_step)
        for key, value in update_info.items():
            tb.add_scalar(f"learner/{key}", value, step=env_step)
        progress.update(bar, completed=env_step,
                        status=f"success {np.mean(recent_success):.0%}  "
                               f"intervention {np.mean(recent_interventions):.0%}  {updates_per_s:.0f} updates/s")

    link = SimLink(robot, itertools.count(cfg.seed + episode), on_executed=executed)
    runner = sim_runner(link, actor, source=source, outbox=Outbox(), on_command=commanded,
                        on_episode_end=episode_ended, uniform=lambda: uniform_warmup and learner.warming_up)
    runner.session.safety.counters.update(state["safety"])
    try:
        with progress:
            if eval_due():  # the first evaluation, or one a stop interrupted
                run_eval()
                if env_step < cfg.steps:
                    checkpoint()
            while env_step < cfg.steps:
                if not run_episodes(runner, 1, should_stop=stop):
                    raise StopRequested
    except StopRequested:
        checkpoint()
        report(f"Interrupted at env step {env_step} of {cfg.steps}: resume with "
               f"`robot-rl train --resume {run_dir}`.")
        raise TrainingInterrupted(stop.signum, env_step, cfg.steps, run_dir) from None
    finally:
        tb.close()
        env.close()
        eval_env.close()
    state["finished"] = True
    checkpoint()
    path = report()
    final = history.rows[-1]
    failures = f" (failure modes: {failure_modes_text(final['failure_modes'])})" if final.get("failure_modes") else ""
    print(f"final eval success {success_text(final['successes'], final['episodes'])} after {env_step} env steps"
          f"{failures}; report: {path}")
    return run_dir


def policy_kind(cfg: TrainConfig, observation_spec, action_dim: int) -> LearnerPlan:
    """The run's --policy over the robot's (or sim task's) observations and actions (robot_rl.policies.registry);
    RunError for a --base the run cannot use."""
    from robot_rl.policies.base import PolicyError

    try:
        return learner_plan(cfg, observation_spec, action_dim)
    except PolicyError as error:
        raise RunError(str(error)) from None
