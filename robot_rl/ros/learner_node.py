"""The learner node: transitions from any number of actors in, SAC training, versioned weights out, checkpoints.

Run::

    python -m robot_rl.ros.learner_node --ros-args -p run_dir:=runs/ros -p task:=PickCube-v0 -p obs_mode:=state

Topics (absolute, shared by every actor): ``/actor/transitions`` in (msgpack batches with actor id + sequence
numbers), ``/learner/ack`` out (cumulative per actor run, sent once the transitions are in the fsynced transition
log), ``/learner/weights`` out (transient-local, versioned, every ``weights_every`` learner steps).

Restarting the node with the same ``run_dir`` resumes: checkpoint (agent, optimiser, replay, counters) plus every
logged transition after it, so a crash (even ``kill -9``) loses nothing that was acknowledged. A respawned node
logs and acknowledges transitions from about 0.4 s after its start (2-core machine; after a ``kill -9``, Fast DDS
itself takes 1.5-3 s to deliver the first message to a new participant): it listens before it imports JAX, while a
background thread builds the agent (observation spec from the checkpoint, no sim env), restores the checkpoint and
compiles the gradient step (JAX's persistent compilation cache in ``<run_dir>/jax_cache`` makes that fast after the
first run); meanwhile it broadcasts the policy of its last checkpoint. Training starts once the agent is ready.

The node does one learner step (``utd`` gradient steps) per received transition, like the in-process loop; with
``steps`` > 0 it stops after that many transitions, checkpoints, optionally evaluates the final policy in the sim
(``final_eval_episodes``) and exits 0. An episode whose actor went silent (killed, or no step for
``abandon_after_s``) is closed as truncated and trained on (robot_rl.learner_server). Status:
``<run_dir>/learner_status.json`` (every second), with ``startup``: the wall-clock time each start-up stage ended.

A start-up that fails on what it was given (a parameter, the demo dataset, a corrupt checkpoint or transition log) is
one error line and exit status 2, which a restart would only repeat: the launcher does not respawn it then. SIGINT /
SIGTERM before the agent is built ends the node at once (there is nothing to checkpoint yet).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
from pathlib import Path

from robot_rl.ros import qos
from robot_rl.ros.node_util import NodeStartupError, declare_parameters

NODE_NAME = "learner"
STATUS_FILE = "learner_status.json"
CONFIG_FILE = "config.json"
JAX_CACHE_DIR = "jax_cache"
BUILDER_THREAD = "learner-build"
VIDEO_FILE = "eval.mp4"
# Settings that shape the observation spec and the task: a run folder cannot be resumed with others.
RUN_SETTINGS = ("task", "obs_mode", "image_size", "policy")
_started_at = time.time()  # module import: the node's start-up stages are measured from the earliest point we see

PARAMETERS: tuple[tuple[str, object, str], ...] = (
    ("run_dir", "runs/ros-learner", "checkpoints, transition log, policy file, status (resumed if present)"),
    ("task", "PickCube-v0", "task: a sim task (its spaces, demos, final evaluation) or a real robot's task name"),
    ("robot", "sim_panda", "robot file whose cameras make the pixel observation of a task that is not a sim task"),
    ("obs_mode", "pixels", "state | pixels | state+pixels: what the policy sees"),
    ("image_size", 64, "camera image side [px] for pixel modes"),
    ("demos", 20, "scripted demos to record in the sim for a new run (0: none)"),
    ("demo_path", "", "demo dataset (zarr) to use instead of recording"),
    ("steps", 0, "stop after this many received transitions (0: run until stopped)"),
    ("utd", 2, "gradient steps per learner step"),
    ("batch_size", 256, "batch size"),
    ("critics", 2, "critic ensemble size"),
    ("updates_per_transition", 1.0, "learner steps per received transition"),
    ("weights_every", 5, "learner steps between weight broadcasts"),
    ("checkpoint_every", 500, "received transitions between checkpoints"),
    ("abandon_after_s", 120.0, "close an actor's open episode (as truncated) after this long without a step of it"),
    ("final_eval_episodes", 0, "after `steps`: evaluate the final policy in-process in the sim"),
    ("validate_suite", "default", "after the final evaluation of a sim run: validate the final policy with this suite "
                                  "(final_eval_episodes episodes per condition) and write its validation record next "
                                  "to the policy file for the robot file ('': no validation)"),
    ("jax_cache_dir", "", "JAX persistent compilation cache (empty: <run_dir>/jax_cache), for a fast respawn"),
    ("seed", 0, "seed"),
    ("policy", "plain", "what the SAC action means: plain (the robot action) | residual | noise (on `base`)"),
    ("base", "", "frozen base policy (folder or file) of a residual / noise head; the actors load it by this path"),
    ("residual_scale", 0.1, "residual head: executed = base + residual_scale * SAC action"),
    ("noise_bound", 1.5, "noise head: initial noise = noise_bound * SAC action"),
    ("noise_repeat", False, "noise head: one control step's noise, repeated over the chunk (low-dimensional)"),
    ("noise_aliasing", False, "noise head: DSRL-NA (an action critic on executed chunks; learns from demos and "
     "interventions too)"),
)
"""The node's ROS parameters (name, default, description)."""


def robot_task_spaces(robot_name: str, obs_mode: str, image_size: int, action_dim: int = 4):
    """(observation spec, action dim) of a real robot's task: the proprioceptive state and, for pixels, every camera
    of the robot file at `image_size` (the actor builds the same keys from the same file)."""
    from robot_rl.robot_config import RobotConfigError, load_robot_config
    from robot_rl.sensors import STATE_SIZE
    from robot_rl.types import ObservationSpec

    if obs_mode != "pixels":
        raise NodeStartupError(f"obs_mode={obs_mode} needs a sim task's object_state; a real robot's task uses "
                               "obs_mode pixels")
    try:
        robot = load_robot_config(robot_name)
    except RobotConfigError as error:
        raise NodeStartupError(f"robot: {error}") from None
    if not robot.cameras:
        raise NodeStartupError(f"robot {robot.path} has no cameras for obs_mode pixels")
    shapes = {"state": ((STATE_SIZE,), "float32")}
    shapes.update({f"images/{name}": ((image_size, image_size, 3), "uint8") for name in robot.camera_names})
    return ObservationSpec.from_shapes(shapes), action_dim


def check_demo_images(demo_path, robot_name: str, image_size: int) -> None:
    """NodeStartupError if the demos' cameras were cropped / resized another way than the robot file's live frames
    (recorded by the actor in the dataset's `image_transforms`; datasets without it are not checked)."""
    import zarr

    from robot_rl.robot_config import load_robot_config
    from robot_rl.vision import transform_mismatches

    try:
        recorded = dict(zarr.open_group(str(demo_path), mode="r").attrs).get("image_transforms")
    except Exception:  # noqa: BLE001 - the demo loader reports an unreadable dataset in its own words
        return
    if not recorded:
        return
    problems = transform_mismatches(recorded, load_robot_config(robot_name), image_size)
    if problems:
        raise NodeStartupError(f"demo_path {demo_path}: images differ from what the robot's cameras give now: "
                               f"{problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))


def _train_config(settings):
    """TrainConfig (the CPU preset) with the node's parameters (`settings`: name -> value) applied."""
    from robot_rl.train import TrainConfig

    base = TrainConfig()
    learner = dataclasses.replace(base.learner, utd=int(settings["utd"]), batch_size=int(settings["batch_size"]),
                                  seed=int(settings["seed"]))
    sac = dataclasses.replace(base.sac, critic_ensemble_size=int(settings["critics"]))
    demo_path = str(settings["demo_path"])
    final_eval = int(settings["final_eval_episodes"])
    base_path = str(settings["base"])
    return TrainConfig(
        policy=str(settings["policy"]), base=Path(base_path).resolve() if base_path else None,
        residual_scale=float(settings["residual_scale"]), noise_bound=float(settings["noise_bound"]),
        noise_aliasing=bool(settings["noise_aliasing"]), noise_repeat=bool(settings["noise_repeat"]),
        task=str(settings["task"]), obs_mode=str(settings["obs_mode"]), image_size=int(settings["image_size"]),
        demos=int(settings["demos"]), demo_path=Path(demo_path) if demo_path else None,
        steps=max(int(settings["steps"]), 1), weights_every=int(settings["weights_every"]),
        checkpoint_every=int(settings["checkpoint_every"]), final_eval_episodes=final_eval if final_eval else None,
        seed=int(settings["seed"]), learner=learner, sac=sac)


def _checked_train_config(settings):
    """`_train_config`, with an invalid setting as a NodeStartupError (TrainConfig names it and its range)."""
    try:
        return _train_config(settings)
    except ValueError as error:
        raise NodeStartupError(str(error)) from None


def check_run_settings(run_dir: Path, settings) -> None:
    """NodeStartupError if `run_dir` was started with another task / observation mode / image size."""
    try:
        recorded = json.loads((run_dir / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return  # a new run (or one from before config.json): nothing to compare
    names = [n for n in RUN_SETTINGS if n != "image_size" or "pixels" in str(settings["obs_mode"])]
    different = [f"{n}={recorded.get(n)!r} (this node: {settings[n]!r})" for n in names
                 if n in recorded and recorded[n] != settings[n]]
    if different:
        raise NodeStartupError(f"run_dir {run_dir} was started with {', '.join(different)}: use the same settings "
                               "to resume it, or another run_dir")


class LearnerNode:
    """rclpy node around a `LearnerServer` (see the module doc)."""

    def __init__(self, *, node_name: str = NODE_NAME, context=None, cli_args: list[str] | None = None):
        import rclpy
        from rclpy.event_handler import PublisherEventCallbacks
        from std_msgs.msg import UInt8MultiArray

        from robot_rl.learner_server import LearnerServer, checkpoint_dir
        from robot_rl.ros.convert import bytes_to_msg  # also what the callbacks use: loaded before the builder starts

        self.startup: dict[str, float | int] = {"pid": os.getpid(), "interpreter_imports": _started_at}
        self.node = rclpy.create_node(node_name, context=context, cli_args=cli_args)
        node = self.node
        self._log = node.get_logger()
        param = declare_parameters(node, PARAMETERS)
        self.settings = {name: param(name) for name, _, _ in PARAMETERS}
        self.run_dir = Path(self.settings["run_dir"])
        check_run_settings(self.run_dir, self.settings)
        # A new run checks its settings before it writes anything (a resumed one had them checked when it began, and
        # its respawn does not wait for the import this takes).
        self.cfg = None if checkpoint_dir(self.run_dir) else _checked_train_config(self.settings)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.budget = int(self.settings["steps"])
        self.checkpoint_every = int(self.settings["checkpoint_every"])
        self.final_eval_episodes = int(self.settings["final_eval_episodes"])
        self._mark("node")

        try:  # a bad robot file is one line before anything is written (the file is small YAML: fast)
            from robot_rl.robot_config import RobotConfigError, load_robot_config

            self.robot = load_robot_config(str(self.settings["robot"]))
        except RobotConfigError as error:
            raise NodeStartupError(f"robot: {error}") from None
        if self.settings["validate_suite"]:
            from robot_rl.validate import load_suite

            try:
                load_suite(str(self.settings["validate_suite"]))
            except ValueError as error:
                raise NodeStartupError(f"validate_suite: {error}") from None
        self.server = LearnerServer(None, self.run_dir,
                                    updates_per_transition=float(self.settings["updates_per_transition"]),
                                    weights_every=int(self.settings["weights_every"]), budget=self.budget,
                                    abandon_after_s=float(self.settings["abandon_after_s"]))
        try:
            self._log.info(self.server.open())
        except (ValueError, OSError) as error:  # a corrupt checkpoint state or transition log entry
            raise NodeStartupError(f"cannot resume run_dir {self.run_dir}: {error}") from None
        self._weights_pub = node.create_publisher(UInt8MultiArray, qos.LEARNER_WEIGHTS,
                                                  qos.topic_qos(qos.LEARNER_WEIGHTS))
        # Acks are volatile: those sent before an actor's subscription matched are lost, so a new match (an actor, or
        # every actor after this node respawned) gets the current acks at once rather than at the next timer tick.
        self._ack_pub = node.create_publisher(
            UInt8MultiArray, qos.LEARNER_ACK, qos.topic_qos(qos.LEARNER_ACK),
            event_callbacks=PublisherEventCallbacks(matched=self._counted(self._on_ack_matched)))
        stored = self.server.stored_weights()  # the last checkpoint's policy, for actors that start without one
        if stored is not None:
            self._weights_pub.publish(bytes_to_msg(stored))
        # Counted, so the node loop runs every ready callback between gradient steps (node_util.spin_callbacks).
        self.callbacks_run = 0
        node.create_subscription(UInt8MultiArray, qos.ACTOR_TRANSITIONS, self._counted(self._on_transitions),
                                 qos.topic_qos(qos.ACTOR_TRANSITIONS))
        node.create_timer(0.5, self._counted(self._publish_acks))
        node.create_timer(1.0, self._counted(self._write_status))
        node.create_timer(1.0, self._counted(self._close_abandoned))
        self._mark("listening")
        self._last_info: dict[str, float] = {}
        self._started = time.monotonic()
        self._next_checkpoint = 0
        self.done = False
        self.exit_status = 0
        self._built = None
        self._build_error: BaseException | None = None
        self._builder = threading.Thread(target=self._build_learner, name=BUILDER_THREAD, daemon=True)
        self._builder.start()
        self._log.info(f"learner listening: run_dir={self.run_dir} task={self.settings['task']} "
                       f"obs_mode={self.settings['obs_mode']} budget={self.budget or 'none'} transitions "
                       f"({self.startup['listening'] - _started_at:.2f}s after start; building the agent)")

    def _mark(self, stage: str) -> None:
        self.startup[stage] = time.time()

    def _counted(self, callback):
        def run(*args) -> None:
            self.callbacks_run += 1
            callback(*args)

        return run

    # ----- start-up (builder thread) -----------------------------------------------------------------------------
    def _build_learner(self) -> None:
        """Build, restore and compile the learner off the node loop, which meanwhile logs and acknowledges."""
        try:
            import jax

            cache = str(self.settings["jax_cache_dir"]) or str(self.run_dir / JAX_CACHE_DIR)
            jax.config.update("jax_compilation_cache_dir", cache)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            from robot_rl.learner import Learner
            from robot_rl.learner_server import compile_learner_step
            from robot_rl.train import config_to_json, record_demos

            cfg = self.cfg or _checked_train_config(self.settings)
            spec, action_dim = self._spaces(cfg)
            self._mark("spaces")
            from robot_rl.ros.actor_node import _sim_task_episode_steps

            if cfg.demos and cfg.demo_path is None and not _sim_task_episode_steps(cfg.task):
                raise NodeStartupError(f"demos={cfg.demos}: scripted demos are recorded in a sim task, and task "
                                       f"{cfg.task!r} is not one: give demo_path (teleoperated demos) or demos:=0")
            from robot_rl.train import RunError, policy_kind

            try:
                kind = policy_kind(cfg, spec, action_dim)
            except RunError as error:
                raise NodeStartupError(str(error).replace("--base", "base")) from None
            learner = Learner(kind.observation_spec, kind.action_dim, kind.sac, cfg.learner,
                              chunk_decisions=kind.chunk_decisions, robot_action_dim=kind.robot_action_dim)
            self.server.make_policy = kind.make_policy
            self._mark("learner")
            resuming = self.server.checkpoint_state is not None
            demos = None if resuming or not cfg.learns_from_demos else record_demos(cfg, self.run_dir)
            labeller = kind.make_policy(learner.agent) if cfg.policy == "residual" else None
            message = self.server.load_learner(learner, demos, labeller)
            if cfg.demo_path is not None and not resuming:  # read by the loader above: a usable dataset
                check_demo_images(cfg.demo_path, str(self.settings["robot"]), cfg.image_size)
            if not resuming:  # the settings this run starts with, once its demos are in (a failed start leaves none)
                (self.run_dir / CONFIG_FILE).write_text(json.dumps(config_to_json(cfg), indent=2))
            self._mark("restore")
            compile_learner_step(learner)
            self._mark("compile")
            self.cfg = cfg
            self._built = (learner, message)
        except BaseException as error:  # noqa: BLE001 - reported by the node loop
            self._build_error = error

    def _spaces(self, cfg):
        """(observation spec, action dim): recorded in the checkpoint, else from the task's sim env."""
        state = self.server.checkpoint_state or {}
        if "observation_spec" in state and cfg.policy == "plain":  # a head's recorded spec is its own, not the robot's
            from robot_rl.types import ArraySpec, ObservationSpec

            recorded = state["observation_spec"].items()
            spec = ObservationSpec.from_shapes({key: ArraySpec.from_json(entry) for key, entry in recorded})
            return spec, int(state["action_dim"])
        from robot_rl.loop import make_env
        from robot_rl.ros.actor_node import _sim_task_episode_steps

        if not _sim_task_episode_steps(cfg.task):
            return robot_task_spaces(str(self.settings["robot"]), cfg.obs_mode, cfg.image_size)
        env = make_env(cfg.task, obs_mode=cfg.obs_mode, image_size=cfg.image_size)
        try:
            return env.observation_space, env.action_space.shape[0]
        finally:
            env.close()

    def _attach(self) -> None:
        """The builder is done: stage the logged transitions, broadcast weights, start training (node loop)."""
        from robot_rl.train import UpdateRate

        self._builder.join()
        learner, message = self._built or (None, "")
        if self._build_error is None:
            self._log.info(message)
            try:
                self._log.info(self.server.attach(learner))
            except (ValueError, OSError) as error:  # the transition log changed under us
                self._build_error = error
        if self._build_error is not None:
            self._start_up_failed(self._build_error)
            return
        self._log_rejections()
        self._mark("replay")
        self._next_checkpoint = self.server.received + self.checkpoint_every
        self._metrics_episodes = self.server.episodes
        self._update_rate = UpdateRate(learner.updates, time.monotonic())
        self.publish_weights()
        stages = ", ".join(f"{k} {v - _started_at:.2f}s" for k, v in self.startup.items() if k != "pid")
        self._log.info(f"learner ready: utd={self.cfg.learner.utd} critics={self.cfg.sac.critic_ensemble_size} "
                       f"(start-up: {stages})")

    def _start_up_failed(self, error: BaseException) -> None:
        """Log the reason in one line and end the node: status 2 for what it was given, else 1."""
        from robot_rl.data.episodes import DatasetError

        if isinstance(error, NodeStartupError):
            status = error.status
        else:  # parameters, files and data: a restart would repeat it
            status = 2 if isinstance(error, (ValueError, OSError, DatasetError)) else 1
        self._log.error(f"learner start-up failed: {type(error).__name__}: {error}")
        self.exit_status, self.done = status, True

    # ----- callbacks ---------------------------------------------------------------------------------------------
    def _on_transitions(self, msg) -> None:
        from robot_rl.ros.convert import payload_view
        from robot_rl.transport import TransportError

        abandoned = self.server.abandoned
        try:
            self.server.ingest(payload_view(msg))
        except TransportError as error:
            self._log.warning(f"dropped a malformed transitions message: {error}", throttle_duration_sec=1.0)
            return
        self._log_rejections()
        if self.server.abandoned > abandoned:
            self._log.info(f"an actor restarted: closed {self.server.abandoned - abandoned} episode(s) its previous "
                           "run left open (inserted as truncated)")
        self._publish_acks()

    def _log_rejections(self) -> None:
        for reason in self.server.rejections:
            self._log.warning(f"dropped {reason}", throttle_duration_sec=1.0)
        self.server.rejections.clear()

    def _close_abandoned(self) -> None:
        for source, episode in self.server.close_abandoned():
            self._log.warning(f"closed episode {episode} of {source}: no step for "
                              f"{self.server.abandon_after_s:.0f}s (inserted as truncated)")

    def _on_ack_matched(self, info) -> None:
        if info.current_count_change > 0:
            self._publish_acks()

    def _publish_acks(self) -> None:
        from robot_rl.ros.convert import bytes_to_msg
        from robot_rl.transport import encode_ack

        acks = self.server.inbox.acks()
        if acks:
            self._ack_pub.publish(bytes_to_msg(encode_ack(acks, self.server.inbox.acks_above())))

    def publish_weights(self) -> None:
        from robot_rl.ros.convert import bytes_to_msg
        from robot_rl.transport import encode_weights

        self._weights_pub.publish(bytes_to_msg(encode_weights(self.server.weights())))

    def _write_status(self) -> None:
        self.server.write_status(self.run_dir / STATUS_FILE, info=self._last_info,
                                 seconds=time.monotonic() - self._started, startup=dict(self.startup))

    # ----- node loop ---------------------------------------------------------------------------------------------
    def work(self) -> bool:
        """One unit of start-up or training work if any is owed; returns whether it did some."""
        server = self.server
        if not server.attached:
            if self._builder.is_alive() or self.done:
                return False
            self._attach()
            return True
        if server.budget_done and not self.done:
            self.finish()
            return False
        if server.pending_steps <= 0:
            if server.warmup_weights_due:
                self.publish_weights()
                return True
            return False
        self._last_info, weights_due = server.train_step()
        if weights_due:
            self.publish_weights()
        self._record_metrics()
        if server.received >= self._next_checkpoint:
            self.checkpoint()
        return True

    def _record_metrics(self) -> None:
        """A training-metrics row for the report once per inserted episode, as the in-process loop keeps them."""
        server = self.server
        if server.episodes == self._metrics_episodes or not self._last_info:
            return
        rate = self._update_rate.read(server.learner.updates, time.monotonic())
        server.metrics.append({"env_step": server.received, "updates": server.learner.updates, "updates_per_s": rate,
                               **self._last_info})
        self._metrics_episodes = server.episodes

    def write_report(self, evals=(), video: Path | None = None, status: str | None = None) -> Path:
        """report.md, learning_curve.png and training_curves.png, as `robot-rl train` writes them."""
        from robot_rl.report import learner_counters, write_report
        from robot_rl.train import config_to_json

        server = self.server
        return write_report(
            self.run_dir, title=f"{self.cfg.task}, obs {self.cfg.obs_mode}, over ROS 2", config=config_to_json(self.cfg),
            evals=list(evals), episodes=server.episode_log, metrics=server.metrics,
            counters=learner_counters(server.learner), wall_seconds=time.time() - server.run_started_at, video=video,
            status=status)

    def checkpoint(self) -> None:
        start = time.perf_counter()
        self.server.checkpoint()
        self._update_rate.exclude(time.perf_counter() - start)  # the learner's speed, not the checkpoint's
        self._next_checkpoint = self.server.received + self.checkpoint_every
        self._log.info(f"checkpoint at {self.server.received} transitions, {self.server.learner.updates} updates "
                       f"({time.perf_counter() - start:.2f}s)")

    def finish(self) -> None:
        """Budget reached: checkpoint, final weights, optional final evaluation; then the node exits."""
        self.checkpoint()
        self.publish_weights()
        result = {"received": self.server.received, "trained_on": self.server.trained_on,
                  "updates": self.server.learner.updates}
        evals, video = [], None
        if self.final_eval_episodes:
            from robot_rl.actor import Actor
            from robot_rl.loop import make_env
            from robot_rl.sim.evaluate import EVAL_SEED_OFFSET, evaluate

            env = make_env(self.cfg.task, obs_mode=self.cfg.obs_mode, image_size=self.cfg.image_size)
            try:
                policy = self.server.make_policy(self.server.learner.agent)
                evaluation = evaluate(env, Actor(policy, deterministic=True),
                                      self.final_eval_episodes, self.cfg.seed + EVAL_SEED_OFFSET,
                                      video_path=self.run_dir / VIDEO_FILE)
            finally:
                env.close()
            evals, video = [evaluation.report_row(self.server.received)], evaluation.video
            result.update(final_eval_success=evaluation.success_rate, final_eval_episodes=len(evaluation),
                          final_eval_ci95=list(evaluation.success_interval))
            suite = str(self.settings["validate_suite"])
            if suite and self.robot.sim:
                result["validation"] = self.validate(suite)
        (self.run_dir / "result.json").write_text(json.dumps(result))
        report = self.write_report(evals, video)
        self._log.info(f"training budget reached: {json.dumps(result)}; report: {report}")
        self._write_status()
        self.done = True

    def validate(self, suite: str) -> dict:
        """Validate the final policy in the sim (the run's robot file, final_eval_episodes per condition, in this
        process) and write its record next to the policy file: what a real robot's actor checks before running it."""
        from robot_rl.learner_server import POLICY_FILE
        from robot_rl.validate import ValidateConfig, validate

        summary = validate(ValidateConfig(self.run_dir / POLICY_FILE, robot=str(self.settings["robot"]),
                                          task=self.cfg.task, suite=suite, episodes=self.final_eval_episodes,
                                          workers=1, out=self.run_dir / "validation", video=False))
        self._log.info(f"validation ({suite} suite, {self.final_eval_episodes} episodes per condition): "
                       f"{summary['verdict'].upper()}"
                       + (f" ({'; '.join(summary['verdict_reasons'])})" if summary["verdict_reasons"] else "")
                       + f"; record {summary['record']}")
        return {"suite": suite, "verdict": summary["verdict"], "record": summary["record"],
                "success": {c["condition"]: c["success_rate"] for c in summary["conditions"]}}

    @property
    def finished(self) -> bool:
        return self.done

    def stop(self, executor, signal_number: int | None) -> None:
        if not self.server.attached:  # main() does not wait for the builder
            if not self.done:
                self._log.info(f"stopping (signal {signal_number}) before the learner was ready: nothing to "
                               "checkpoint (the transition log holds every acknowledged transition)")
            return
        if not self.done:
            self._log.info(f"stopping (signal {signal_number}): checkpointing")
            self.checkpoint()
            report = self.write_report(status=f"Stopped by signal {signal_number} after {self.server.received} "
                                              "transitions; launch it again with the same run_dir to resume.")
            self._log.info(f"report so far: {report}; launch again with run_dir {self.run_dir} to resume")
            return
        deadline = time.monotonic() + 1.0  # let the last weights and acks go out
        while time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)

    def destroy(self) -> None:
        try:
            self._write_status()
        finally:
            self.node.destroy_node()


def main(argv: list[str] | None = None) -> int:
    """Run the learner node until SIGINT / SIGTERM or the end of its budget; returns the exit status."""
    from robot_rl.ros.node_util import run_node

    status = run_node(LearnerNode, list(sys.argv if argv is None else argv), NODE_NAME)
    if any(thread.name == BUILDER_THREAD and thread.is_alive() for thread in threading.enumerate()):
        # Stopped while the agent was being built: a JAX compile cannot be interrupted, and an interpreter exit with a
        # thread inside XLA aborts the process. Nothing is lost by not waiting (the transition log has it all).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status

if __name__ == "__main__":
    sys.exit(main())
