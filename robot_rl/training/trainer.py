"""The in-process trainer (:class:`Trainer`, what `robot-rl train` runs): training in the sim mirror with demos, the
SAC learner with RLPD mixing, the simulated human, evaluations and the report.

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

import itertools
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.core import interrupts
from robot_rl.core.config_io import config_to_json
from robot_rl.core.files import atomic_write_text
from robot_rl.learner.learner import Learner
from robot_rl.learner.server import LearnerServer
from robot_rl.sim.evaluate import EVAL_SEED_OFFSET, Evaluation, StopRequested, evaluate
from robot_rl.training.config import policy_kind
from robot_rl.training.demos import record_demos
from robot_rl.training.pacing import StopSignals, TrainingInterrupted, UpdateRate
from robot_rl.training.run_folder import CHECKPOINT_DIR, CONFIG_FILE, VIDEO_FILE, RunError, RunStart
from robot_rl.wire.outbox import Outbox

IN_PROCESS_ACTOR = "train"
"""The actor id of in-process training's `ActorSession` (each run of the process is a new incarnation of it)."""
RECENT_EPISODES = 20
"""Training episodes the progress bar's success and intervention rates are over."""


def randomized_env(env, suite: str):
    """`env` under the conditions of validation suite `suite` (name or file), one drawn per episode; ValueError (one
    line) for a suite that cannot be read or names what the task's model lacks."""
    from robot_rl.sim.perturb import RandomizedEnv
    from robot_rl.sim.validation import load_suite

    loaded = load_suite(suite)
    return RandomizedEnv(env, loaded.conditions, loaded.seed)


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


class Trainer:
    """One in-process training run (see the module doc): `run()` prepares the envs and the learner, restores the
    checkpoint or records the demos, builds the server and the actor, runs the step loop and finishes."""

    def __init__(self, start: RunStart, stop: StopSignals, *, demo_progress=None):
        """`demo_progress(wanted)`: a context manager giving the `on_episode(kept, wanted)` of demo recording (a
        display), or None."""
        self.cfg, self.run_dir = start.cfg, start.run_dir
        self.resuming, self.config_changed = start.resuming, start.config_changed
        self.stop = stop
        self.demo_progress = demo_progress
        # the run's progress, as its checkpoints keep it
        self.state: dict[str, Any] = {"env_step": 0, "episode": 0, "wall_seconds": 0.0, "evals": [],
                                      "episodes_log": [], "metrics": [], "safety": {}, "finished": False}
        self.env_step = self.episode = 0
        self.unclosed = 0  # env steps executed whose transition the session has not closed yet (the last command's)
        self.next_checkpoint = 0
        self.update_info: dict[str, float] = {}
        self.recent_success: list[bool] = []
        self.recent_interventions: list[float] = []

    def run(self) -> Path:
        """Train to `cfg.steps` env steps; returns the run folder (TrainingInterrupted when a stop request ends it)."""
        self.prepare()
        if self.resuming:
            self.restore()
        else:
            self.start_new_run()
        self.build_server()
        self.build_actor()
        self.step_loop()
        return self.finish()

    # ----- before the first step ---------------------------------------------------------------------------------
    def prepare(self) -> None:
        """The training and evaluation envs, the run's policy plan and its learner."""
        from robot_rl.sim.loop import make_env
        from robot_rl.sim.robot_adapter import SimRobotAdapter

        cfg = self.cfg
        env = make_env(cfg.task, **cfg.env_settings())
        try:
            self.kind = policy_kind(cfg, env.observation_space, env.action_space.shape[0])
            if cfg.randomize:
                env = randomized_env(env, cfg.randomize)
        except BaseException:
            env.close()
            raise
        self.env = env
        self.robot = SimRobotAdapter(env)
        self.eval_env = make_env(cfg.task, **cfg.env_settings())
        self.make_policy = self.kind.make_policy
        self.learner = Learner(self.kind.observation_spec, self.kind.action_dim, self.kind.sac, cfg.learner,
                               chunk_decisions=self.kind.chunk_decisions, robot_action_dim=self.kind.robot_action_dim)

    def restore(self) -> None:
        """A resumed run: the learner and the run's progress from its checkpoint (and its changed config)."""
        progress = self.learner.restore(self.run_dir / CHECKPOINT_DIR)
        progress.pop("server", None)  # the server's own part
        self.state.update(progress)
        if self.config_changed:
            atomic_write_text(self.run_dir / CONFIG_FILE, json.dumps(config_to_json(self.cfg), indent=2))
        self.state["finished"] = False
        print(f"resumed {self.run_dir} from env step {self.state['env_step']} ({self.learner.updates} updates); "
              f"training to {self.cfg.steps} env steps")

    def start_new_run(self) -> None:
        """A new run: its folder with its config and demos (given or recorded), or nothing at all if that fails or a
        stop request comes meanwhile."""
        from robot_rl.data.episodes import EpisodeDataset

        cfg, run_dir, learner, stop = self.cfg, self.run_dir, self.learner, self.stop
        demos = EpisodeDataset(cfg.demo_path) if cfg.demo_path is not None else None
        if demos is not None and demos.task != cfg.task:
            raise RunError(f"--demo-path {cfg.demo_path} holds demos of task {demos.task!r}, this run is --task "
                           f"{cfg.task}")
        labeller = self.kind.demo_labeller(learner.agent)  # a head on a base: demos get base actions
        if not cfg.learns_from_demos and (demos is not None or cfg.demos):
            print("--policy noise learns from its own chunks only (the noise behind a demo is unknown; "
                  "--noise-aliasing learns from demos): no demos")
            demos = None
        if demos is not None:
            learner.add_demos(demos, labeller)  # checks the dataset against this run's spaces before the folder exists
        if stop():  # stopped while starting: nothing made yet
            self.close_envs()
            raise stop.interrupt()
        created = interrupts.first_missing(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        try:
            atomic_write_text(run_dir / CONFIG_FILE, json.dumps(config_to_json(cfg), indent=2))
            if demos is None and cfg.demos and cfg.learns_from_demos:
                demos = self.record_demos()
                if demos is not None:
                    learner.add_demos(demos, labeller)
            if stop():
                raise StopRequested
        except BaseException as error:
            if created is not None:  # no half-made run folder (nor the folders made for it)
                shutil.rmtree(created, ignore_errors=True)
            else:
                (run_dir / CONFIG_FILE).unlink(missing_ok=True)
            self.close_envs()
            if isinstance(error, StopRequested):
                raise stop.interrupt() from None
            raise
        if demos is not None:
            print(f"{learner.demo_transitions} demo transitions from {demos.num_episodes} episodes ({demos.path})")

    def record_demos(self):
        """The run's scripted demos, recorded into its folder (under the demo progress display, if any)."""
        if self.demo_progress is None:
            return record_demos(self.cfg, self.run_dir, should_stop=self.stop)
        with self.demo_progress(self.cfg.demos) as on_episode:
            return record_demos(self.cfg, self.run_dir, should_stop=self.stop, on_episode=on_episode)

    def build_server(self) -> None:
        """The in-memory learner server (the ROS learner node's ingest), attached to the learner."""
        from robot_rl.learner.server import checkpoint_server_state

        learner = self.learner
        server = LearnerServer(learner, self.run_dir, weights_every=self.cfg.weights_every)  # one step per transition
        server.make_policy = self.make_policy
        if self.resuming:  # this process restarts the actor from the checkpoint too: it collects those again
            server.log.discard_after(int(checkpoint_server_state(self.run_dir).get("logged_through", -1)))
        server.open()
        # a checkpoint's partial episode is closed by this actor's first transitions
        server.attach(learner, extra=self.state)
        self.server = server
        if learner.warming_up:  # say why the first updates are late (or never come, in a short run)
            acting = "uniformly random actions" if self.kind.uniform_warmup else "the base policy acts"
            why = "no demos; " if not learner.demo_transitions else ""
            print(f"warm-up: {acting} and no updates for the next "
                  f"{learner.warmup_transitions - learner.transitions} env steps ({why}--learner.warmup-transitions "
                  "sets it)")

    def build_actor(self) -> None:
        """The actor, the evaluation actor, the episode loop over the sim robot (with the simulated human), the
        counters from the run's progress, and the logs and progress bar."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        from tensorboard.summary import Writer

        from robot_rl.actor.session import Actor
        from robot_rl.sim.human import SimulatedHuman
        from robot_rl.sim.robot_adapter import SimLink, sim_runner
        from robot_rl.wire.protocol import make_source

        cfg, state, learner = self.cfg, self.state, self.learner
        # Seeded by the episode it starts at, like the actor: a resumed run does not replay the human's noise.
        human = SimulatedHuman(self.env, cfg.human, seed=cfg.seed + state["episode"]) if cfg.intervene else None
        if human is not None:
            human.total_steps = learner.interventions
        self.human = human
        self.actor = Actor(self.make_policy(learner.agent, seed=cfg.seed + state["episode"]),
                           seed=cfg.seed + state["episode"])
        uniform_warmup = self.kind.uniform_warmup  # a run on a base acts with it (zero head output) from the start
        self.source = make_source(IN_PROCESS_ACTOR)
        self.eval_actor = Actor(self.make_policy(learner.agent), deterministic=True)
        self.history = EvalHistory(state["evals"])
        self.tb = Writer(str(self.run_dir / "tensorboard"))
        self.recent_success = [bool(e["success"]) for e in state["episodes_log"][-RECENT_EPISODES:]]
        self.recent_interventions = [e["intervention_rate"] for e in state["episodes_log"][-RECENT_EPISODES:]]
        self.start_time = time.perf_counter() - state["wall_seconds"]
        self.update_rate = UpdateRate(learner.updates, time.perf_counter())
        self.env_step, self.episode = state["env_step"], state["episode"]
        self.next_checkpoint = self.env_step + cfg.checkpoint_every
        self.progress = Progress(TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("{task.fields[status]}"), refresh_per_second=4)
        self.bar = self.progress.add_task("train", total=cfg.steps, completed=self.env_step, status="")
        self.link = SimLink(self.robot, itertools.count(cfg.seed + self.episode), on_executed=self._executed,
                            human=human)
        self.runner = sim_runner(self.link, self.actor, source=self.source, outbox=Outbox(),
                                 on_command=self._commanded, on_episode_end=self._episode_ended,
                                 uniform=lambda: uniform_warmup and learner.warming_up)
        self.runner.session.safety.counters.update(state["safety"])

    # ----- the step loop -----------------------------------------------------------------------------------------
    def step_loop(self) -> None:
        """Episodes until `cfg.steps` env steps (an evaluation first if one is due); on a stop request: checkpoint,
        the report so far, TrainingInterrupted. The envs are closed either way."""
        from robot_rl.actor.runner import run_episodes

        cfg = self.cfg
        try:
            with self.progress:
                if self.eval_due():  # the first evaluation, or one a stop interrupted
                    self.evaluate()
                    if self.env_step < cfg.steps:
                        self.checkpoint()
                while self.env_step < cfg.steps:
                    if not run_episodes(self.runner, 1, should_stop=self.stop):
                        raise StopRequested
        except StopRequested:
            self.checkpoint()
            self.report(f"Interrupted at env step {self.env_step} of {cfg.steps}: resume with "
                        f"`robot-rl train --resume {self.run_dir}`.")
            raise TrainingInterrupted(self.stop.signum, self.env_step, cfg.steps, self.run_dir) from None
        finally:
            self.tb.close()
            self.close_envs()

    def _executed(self, _executed) -> None:
        self.unclosed += 1
        if self.env_step + self.unclosed >= self.cfg.steps:  # the run's last env step: the episode ends there
            self.link.inputs.key("reset")

    def _commanded(self, _step) -> None:
        if self.unclosed > 1:  # the session closed the previous command's step before choosing this one
            self._step_closed()

    def _step_closed(self) -> None:
        """An env step's transition is closed (none after a held command): into the learner, which trains on what
        it owes; then an evaluation or a checkpoint when due."""
        server, cfg = self.server, self.cfg
        self.env_step += 1
        self.unclosed -= 1
        feed_server(server, self.source, self.runner.session.outbox)
        for rejection in server.rejections:
            self.print_line(f"warning: dropped {rejection}")
        server.rejections.clear()
        while server.pending_steps > 0:
            self.update_info, weights_due = server.train_step()
            if weights_due:
                self.publish_weights()
        if self.eval_due():
            self.evaluate()
            if self.env_step < cfg.steps:  # the final checkpoint follows the final evaluation
                self.checkpoint()
        elif self.env_step >= self.next_checkpoint and self.env_step < cfg.steps:
            self.checkpoint()

    def _episode_ended(self, end) -> None:
        self._step_closed()
        self.episode += 1
        link, state, tb, learner, env_step = self.link, self.state, self.tb, self.learner, self.env_step
        success, length = link.episode_success, link.episode_steps
        intervention_rate = self.runner.session.episode_interventions / length
        self.recent_success = (self.recent_success + [success])[-RECENT_EPISODES:]
        self.recent_interventions = (self.recent_interventions + [intervention_rate])[-RECENT_EPISODES:]
        state["episodes_log"].append({"env_step": env_step, "success": success, "return": link.episode_reward,
                                      "length": length, "intervention_rate": intervention_rate,
                                      **({"takeovers": dict(self.human.rule.episode_takeovers)} if self.human else {}),
                                      **({"condition": self.env.active.condition.name} if self.cfg.randomize else {})})
        updates_per_s = self.update_rate.read(learner.updates, time.perf_counter())
        state["metrics"].append(
            {"env_step": env_step, "updates": learner.updates, "updates_per_s": updates_per_s, **self.update_info})
        tb.add_scalar("train/success", float(success), step=env_step)
        tb.add_scalar("train/intervention_rate", intervention_rate, step=env_step)
        tb.add_scalar("train/updates_per_s", updates_per_s, step=env_step)
        for key, value in self.update_info.items():
            tb.add_scalar(f"learner/{key}", value, step=env_step)
        self.progress.update(self.bar, completed=env_step,
                             status=f"success {np.mean(self.recent_success):.0%}  "
                                    f"intervention {np.mean(self.recent_interventions):.0%}  "
                                    f"{updates_per_s:.0f} updates/s")

    def print_line(self, line: str) -> None:
        self.progress.console.print(line, soft_wrap=True)

    def publish_weights(self) -> None:
        weights = self.server.weights()
        self.actor.update_weights(weights.policy, weights.version)
        self.eval_actor.update_weights(weights.policy, weights.version)

    # ----- evaluations, checkpoints, report ----------------------------------------------------------------------
    def eval_due(self) -> bool:
        rows, env_step, cfg = self.history.rows, self.env_step, self.cfg
        last = rows[-1]["env_step"] if rows else -1
        return last < 0 or env_step // cfg.eval_every > last // cfg.eval_every or (
            env_step >= cfg.steps and last != env_step)

    def evaluate(self) -> None:
        """Evaluate the current policy (the final evaluation at the end: its episodes, its video) and log it."""
        from robot_rl.core.report import failure_modes_text, success_text

        cfg, env_step, tb, learner = self.cfg, self.env_step, self.tb, self.learner
        final = env_step >= cfg.steps
        episodes = (cfg.final_eval_episodes or cfg.eval_episodes) if final else cfg.eval_episodes
        self.publish_weights()
        started = time.perf_counter()
        evaluation = evaluate(self.eval_env, self.eval_actor, episodes, cfg.seed + EVAL_SEED_OFFSET,
                              video_path=self.run_dir / VIDEO_FILE if final and cfg.video else None,
                              should_stop=self.stop)
        row = self.history.add(env_step, evaluation)
        for key in ("success_rate", "mean_return", "mean_length"):
            tb.add_scalar(f"eval/{key}", row[key], step=env_step)
        latest = ""
        if cfg.eval_latest_weights and learner.agent.policy_average is not None:
            from robot_rl.actor.session import Actor

            latest_actor = Actor(self.make_policy(learner.agent.replace(policy_average=None)), deterministic=True)
            latest_eval = evaluate(self.eval_env, latest_actor, episodes, cfg.seed + EVAL_SEED_OFFSET,
                                   should_stop=self.stop)
            row["latest_success_rate"] = latest_eval.success_rate
            tb.add_scalar("eval/latest_success_rate", latest_eval.success_rate, step=env_step)
            latest = f"; the latest weights {success_text(latest_eval.successes, len(latest_eval.episodes))}"
        self.update_rate.exclude(time.perf_counter() - started)
        failures = f"; failure modes: {failure_modes_text(row['failure_modes'])}" if row["failure_modes"] else ""
        self.print_line(f"env step {env_step}: eval success {success_text(row['successes'], row['episodes'])}, "
                        f"return {row['mean_return']:.2f}, length {row['mean_length']:.1f}{latest}{failures}")

    def checkpoint(self) -> None:
        started = time.perf_counter()
        self.state.update(env_step=self.env_step, episode=self.episode, evals=self.history.rows,
                          wall_seconds=time.perf_counter() - self.start_time,
                          safety=dict(self.runner.session.safety.counters))
        self.server.checkpoint(extra=self.state)
        self.next_checkpoint = self.env_step + self.cfg.checkpoint_every
        self.update_rate.exclude(time.perf_counter() - started)

    def report(self, status: str | None = None) -> Path:
        from robot_rl.core.report import learner_counters, write_report

        cfg, state = self.cfg, self.state
        video = self.run_dir / VIDEO_FILE
        return write_report(
            self.run_dir, title=f"{cfg.task}, obs {cfg.obs_mode}", config=config_to_json(cfg),
            evals=self.history.rows, episodes=state["episodes_log"], metrics=state["metrics"],
            counters=learner_counters(self.learner), wall_seconds=state["wall_seconds"],
            video=video if video.exists() else None, status=status)

    def finish(self) -> Path:
        """The run is done: its last checkpoint and the report; returns the run folder."""
        from robot_rl.core.report import failure_modes_text, success_text

        self.state["finished"] = True
        self.checkpoint()
        path = self.report()
        final = self.history.rows[-1]
        failures = (f" (failure modes: {failure_modes_text(final['failure_modes'])})"
                    if final.get("failure_modes") else "")
        print(f"final eval success {success_text(final['successes'], final['episodes'])} after {self.env_step} "
              f"env steps{failures}; report: {path}")
        return self.run_dir

    def close_envs(self) -> None:
        self.env.close()
        self.eval_env.close()
