"""The learner node: transitions from any number of actors in, SAC training, versioned weights out, checkpoints.

Run::

    python -m robot_rl.ros.nodes.learner_node --ros-args -p run_dir:=runs/ros -p task:=PickCube-v0 -p obs_mode:=state

The robot file (``robot``) decides what a real robot's run sees: with ``sim: false`` the observation spec is its state
and its cameras at ``image_size`` (the keys its actor builds from the same file), whatever ``task`` is named, and the
run has no sim evaluation, scripted demos or final validation. On a sim robot file (``sim_panda``, the default) a sim
task's env gives the spaces, as in-process ``robot-rl train``.

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
``steps`` > 0 it stops training after that many transitions, checkpoints, broadcasts its final weights (marked
``training_done``: actors stop waiting for newer ones), optionally evaluates the final policy in the sim
(``final_eval_episodes``) and validates it (``final_validation``), writes the report and exits 0. In a sim task it
evaluates its current policy every ``eval_every`` transitions (robot_rl.learner.evaluations: in a worker thread, with the
in-process trainer's evaluation, so the node keeps acknowledging and training meanwhile); each evaluation is a log
line and a row of the report. Every ``progress_every_s`` it logs a progress line. An episode whose actor went
silent (killed, or no step for ``abandon_after_s``) is closed as truncated and trained on (robot_rl.learner.server).
Status: ``<run_dir>/learner_status.json`` (every second; ``robot-rl status RUN_DIR`` shows it), with ``startup``:
the wall-clock time each start-up stage ended.

Files that cross between hosts (robot_rl.ros.nodes.file_share_node): the node offers its ``base`` to actors on other hosts, its
sha256 in every weights message; a ``base`` or ``demo_path`` this host lacks is fetched once from the node that
offers it (the robot host's ``file_share`` node for teleoperated demos), verified, before the agent is built; a
``demo_path`` copy here that differs from an offered one stops the node with one line naming both hashes.

A start-up that fails on what it was given (a parameter, the demo dataset, a corrupt checkpoint or transition log) is
one error line and exit status 2, which a restart would only repeat: the launcher does not respawn it then. SIGINT /
SIGTERM before the agent is built ends the node at once (there is nothing to checkpoint yet).
"""

from __future__ import annotations

if __name__ == "__main__":  # a program's start, before the heavy imports below
    from robot_rl.core.startup import program_start

    program_start()

import collections
import dataclasses
import json
import math
import os
import sys
import threading
import time
from pathlib import Path

from robot_rl.core.config_io import config_to_json
from robot_rl.learner.evaluations import RateWindow, robot_summary
from robot_rl.policies.base import PolicyError
from robot_rl.policies.registry import learner_plan
from robot_rl.ros import qos
from robot_rl.ros.nodes.learner_params import (
    CONFIG_FILE, NODE_NAME, PARAMETERS, check_demo_images, check_parameters, checked_train_config, load_robot,
    not_in_sim, run_spaces,
)
from robot_rl.ros.node_util import NodeStartupError, declare_parameters, publish_refused

STATUS_FILE = "learner_status.json"
JAX_CACHE_DIR = "jax_cache"
BUILDER_THREAD = "learner-build"
VIDEO_FILE = "eval.mp4"
# A weights broadcast waits until every actor has the previous one (a slow link gets them as often as it carries
# them), but not longer than this: an actor that is gone for good must not hold back the others' weights.
WEIGHTS_MAX_WAIT_S = 5.0
_started_at = time.time()  # module import: the node's start-up stages are measured from the earliest point we see


def _resident_mb() -> float | None:
    """This process's resident memory [MB] (None where /proc is not there)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 1e6, 1)


class LearnerNode:
    """rclpy node around a `LearnerServer` (see the module doc)."""

    def __init__(self, *, node_name: str = NODE_NAME, context=None, cli_args: list[str] | None = None):
        import rclpy
        from rclpy.event_handler import PublisherEventCallbacks, SubscriptionEventCallbacks
        from std_msgs.msg import UInt8MultiArray

        from robot_rl.learner.server import LearnerServer, checkpoint_dir
        from robot_rl.ros.convert import bytes_to_msg  # also what the callbacks use: loaded before the builder starts

        self.startup: dict[str, float | int] = {"pid": os.getpid(), "interpreter_imports": _started_at}
        self.node = rclpy.create_node(node_name, context=context, cli_args=cli_args)
        node = self.node
        self._log = node.get_logger()
        param = declare_parameters(node, PARAMETERS)
        self.settings = {name: param(name) for name, _, _ in PARAMETERS}
        self.run_dir = Path(self.settings["run_dir"])
        check_parameters(node.get_name(), param)
        # A new run checks its settings before it writes anything (a resumed one had them checked when it began, and
        # its respawn does not wait for the import this takes).
        self.cfg = None if checkpoint_dir(self.run_dir) else checked_train_config(self.settings)
        # What this start adds, removed again should a new run end before it got going (_remove_unstarted_run).
        from robot_rl.core.interrupts import first_missing

        self._new_run = self.cfg is not None and not (self.run_dir / CONFIG_FILE).exists()
        self._made_dir = first_missing(self.run_dir)
        self._entries_before = set(os.listdir(self.run_dir)) if self._made_dir is None else set()
        self._stopping = self._removed = False
        from robot_rl.ros.node_util import STARTUP_ABANDONED

        STARTUP_ABANDONED.append(self._remove_unstarted_run)  # a start-up ended by a stop signal leaves nothing
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.budget = int(self.settings["steps"])
        self.checkpoint_every = int(self.settings["checkpoint_every"])
        self.final_eval_episodes = int(self.settings["final_eval_episodes"])
        self._watch_settings()
        self._mark("node")

        self.robot = load_robot(str(self.settings["robot"]))  # checked by check_parameters: small YAML, fast
        if self.settings["validate_suite"]:
            from robot_rl.apps.validate import load_suite

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
        # What crosses the link (bytes on this node's topics, times the matched readers for what it sends) and when
        # each weights version went out (unix time: for a bench on hosts that share a clock; nothing compares it).
        self.link = {"transitions_in_bytes": 0, "transitions_in_messages": 0, "weights_out_bytes": 0,
                     "acks_out_bytes": 0, "weights_published": 0, "weights_skipped": 0, "weights_bytes": 0,
                     "transitions_lost_messages": 0, "weights_refused": 0, "acks_refused": 0}
        self._weights_refused: bool | None = None  # a refused broadcast to send again (its training_done), or None
        self.weights_published_at: collections.deque[tuple[int, float]] = collections.deque(maxlen=200)
        # (received transitions, seconds, bytes) of this start's checkpoints: a session's figures (bench/session.py)
        self.checkpoints: collections.deque[tuple[int, float, int]] = collections.deque(maxlen=200)
        self._weights_sent_at = -math.inf
        # Acks are volatile: those sent before an actor's subscription matched are lost, so a new match (an actor, or
        # every actor after this node respawned) gets the current acks at once rather than at the next timer tick.
        self._ack_pub = node.create_publisher(
            UInt8MultiArray, qos.LEARNER_ACK, qos.topic_qos(qos.LEARNER_ACK),
            event_callbacks=PublisherEventCallbacks(matched=self._counted(self._on_ack_matched)))
        # The base goes to actors on other hosts (its digest in every weights message); a base or demo dataset this
        # host lacks comes from the host that offers it (robot_rl.ros.nodes.file_share_node; fetched by the builder).
        self.files = None
        if self.settings["base"] or self.settings["demo_path"]:
            from robot_rl.wire.file_share import FileShareError
            from robot_rl.ros.nodes.file_share_node import FileShare

            try:
                self.files = FileShare(node, on_conflict=self._files_conflict)
            except FileShareError as error:
                raise NodeStartupError(str(error)) from None
        stored = self.server.stored_weights()  # the last checkpoint's policy, for actors that start without one
        if stored is not None and publish_refused(
                self._weights_pub, bytes_to_msg(self.files.weights_payload(stored) if self.files else stored)):
            self._log.warning("the middleware refused the stored weights; actors get the next version")
        # Counted, so the node loop runs every ready callback between gradient steps (node_util.spin_callbacks).
        self.callbacks_run = 0
        node.create_subscription(UInt8MultiArray, qos.ACTOR_TRANSITIONS, self._counted(self._on_transitions),
                                 qos.topic_qos(qos.ACTOR_TRANSITIONS),
                                 event_callbacks=SubscriptionEventCallbacks(message_lost=self._on_transitions_lost))
        node.create_timer(0.5, self._counted(self._publish_acks))
        node.create_timer(0.5, self._counted(self._publish_refused_weights))
        node.create_timer(1.0, self._counted(self._write_status))
        node.create_timer(1.0, self._counted(self._close_abandoned))
        if self.progress_every_s > 0:
            node.create_timer(self.progress_every_s, self._counted(self._log_progress))
        self._mark("listening")
        self._last_info: dict[str, float] = {}
        self._started = time.monotonic()
        self._next_checkpoint = 0
        self.done = False
        self.exit_status = 0
        self._built = None
        self._build_error: BaseException | None = None
        self.sim_episode_steps = 0  # the task's episode length if it is a sim task (set by the builder)
        self._worker = None  # robot_rl.learner.evaluations.EvalWorker: evaluations and the final validation (sim tasks)
        self._jobs: dict[str, object] = {}  # name of a submitted worker job -> what to do with its result
        self._last_eval_step = self.server.evals[-1]["env_step"] if self.server.evals else None
        self._finishing: str | None = None  # the end-of-budget stage under way (final evaluation, validation)
        self._result: dict | None = None  # result.json, once the budget is reached
        self._video: Path | None = None
        self._rate_window = RateWindow()
        self._rates = {"received_per_s": 0.0, "updates_per_s": 0.0}
        self._builder = threading.Thread(target=self._build_learner, name=BUILDER_THREAD, daemon=True)
        self._builder.start()
        self._log.info(f"learner listening: run_dir={self.run_dir} robot={self.robot.name} "
                       f"task={self.settings['task']} obs_mode={self.settings['obs_mode']} "
                       f"budget={self.budget or 'none'} transitions "
                       f"({self.startup['listening'] - _started_at:.2f}s after start; building the agent)")

    def _mark(self, stage: str) -> None:
        self.startup[stage] = time.time()

    def _watch_settings(self) -> None:
        """Evaluation, progress and final-validation settings (checked by check_parameters)."""
        from robot_rl.learner.evaluations import resolve_eval_every

        settings = self.settings
        self.eval_episodes = int(settings["eval_episodes"])
        self.eval_every = resolve_eval_every(int(settings["eval_every"]), self.budget) if self.eval_episodes else 0
        self.progress_every_s = float(settings["progress_every_s"])

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

            cache = (str(self.settings["jax_cache_dir"]) or os.environ.get("JAX_COMPILATION_CACHE_DIR")
                     or str(self.run_dir / JAX_CACHE_DIR))
            jax.config.update("jax_compilation_cache_dir", cache)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            from robot_rl.learner.learner import Learner
            from robot_rl.learner.server import compile_learner_step
            from robot_rl.apps.train import record_demos

            cfg = self._files_here(self.cfg or checked_train_config(self.settings))
            spec, action_dim = self._spaces(cfg)
            self._mark("spaces")
            from robot_rl.sim.loop import sim_run_steps

            self.sim_episode_steps = sim_run_steps(self.robot, cfg.task)
            if cfg.demos and cfg.demo_path is None and not self.sim_episode_steps:
                raise NodeStartupError(f"demos={cfg.demos}: scripted demos are recorded in a sim task, and "
                                       f"{not_in_sim(self.robot, cfg.task)}: give demo_path (teleoperated demos) or "
                                       "demos:=0")
            if int(self.settings["eval_every"]) > 0 and not self.sim_episode_steps:
                raise NodeStartupError(f"eval_every={self.settings['eval_every']}: evaluations run in the sim mirror, "
                                       f"and {not_in_sim(self.robot, cfg.task)} (eval_every:=0)")
            if not self.sim_episode_steps:
                self.eval_every = 0  # evaluations: sim runs only
            try:
                plan = learner_plan(cfg, spec, action_dim)
            except PolicyError as error:
                raise NodeStartupError(str(error).replace("--base", "base")) from None
            learner = Learner(plan.observation_spec, plan.action_dim, plan.sac, cfg.learner,
                              chunk_decisions=plan.chunk_decisions, robot_action_dim=plan.robot_action_dim)
            self.server.make_policy = plan.make_policy
            self._mark("learner")
            resuming = self.server.checkpoint_state is not None
            demos = None if resuming or not cfg.learns_from_demos else record_demos(cfg, self.run_dir,
                                                                                     should_stop=self._is_stopping)
            labeller = plan.demo_labeller(learner.agent)
            message = self.server.load_learner(learner, demos, labeller)
            if cfg.demo_path is not None and not resuming:  # read by the loader above: a usable dataset
                check_demo_images(cfg.demo_path, str(self.settings["robot"]), cfg.image_size)
            # The settings this run starts with, once its demos are in (a failed or stopped start leaves none).
            if not resuming and not self._stopping:
                (self.run_dir / CONFIG_FILE).write_text(json.dumps(config_to_json(cfg), indent=2))
            self._mark("restore")
            compile_learner_step(learner)
            self._mark("compile")
            self.cfg = cfg
            self._built = (learner, message)
        except BaseException as error:  # noqa: BLE001 - reported by the node loop
            self._build_error = error

    def _files_here(self, cfg):
        """`cfg` with its base and demo dataset on this host: one this host lacks is fetched from the node offering
        it; a demo dataset here is checked against offered ones (robot_rl.ros.nodes.file_share_node). Builder thread."""
        if self.files is None:
            return cfg
        from robot_rl.wire.file_share import FileShareError
        from robot_rl.ros.nodes.file_share_node import policy_location

        changes = {}
        try:
            if cfg.base is not None and not cfg.base.exists():
                changes["base"] = self.files.fetch(str(self.settings["base"]), "base", locate=policy_location,
                                                   should_stop=self._is_stopping).resolve()
            if cfg.demo_path is not None and cfg.learns_from_demos and self.server.checkpoint_state is None:
                name = str(self.settings["demo_path"])
                if cfg.demo_path.exists():  # used now; checked meanwhile: an offer with other bytes stops the node
                    self.files.resolve(name, "demo_path")
                else:
                    changes["demo_path"] = self.files.fetch(name, "demo_path", should_stop=self._is_stopping)
        except FileShareError as error:
            raise NodeStartupError(str(error)) from None
        return dataclasses.replace(cfg, **changes)

    def _files_conflict(self, problem: str) -> None:
        """A peer offers the demo dataset with other bytes than this host's copy (logged): the node stops."""
        if self.server.attached and not self.done:
            self.checkpoint()
        self.exit_status, self.done = 2, True

    def _spaces(self, cfg):
        """(observation spec, action dim) of this run (`run_spaces`)."""
        return run_spaces(self.robot, cfg, self.server.checkpoint_state)

    def _attach(self) -> None:
        """The builder is done: stage the logged transitions, broadcast weights, start training (node loop)."""
        from robot_rl.apps.train import UpdateRate

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
        evals = (f"; evaluating every {self.eval_every} transitions ({self.eval_episodes} episodes, in a worker "
                 "thread)" if self.eval_every else "")
        self._log.info(f"learner ready: utd={self.cfg.learner.utd} critics={self.cfg.sac.critic_ensemble_size}"
                       f"{evals} (start-up: {stages})")
        if self.sim_episode_steps and (self.eval_every or self.final_eval_episodes):
            from robot_rl.learner.evaluations import EvalWorker
            from robot_rl.sim.loop import make_env

            cfg = self.cfg
            self._worker = EvalWorker(lambda: make_env(cfg.task, **cfg.env_settings()))
        self._maybe_evaluate()

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
        from robot_rl.wire.transport import TransportError

        abandoned, foreign = self.server.abandoned, dict(self.server.foreign_runs)
        payload = payload_view(msg)
        self.link["transitions_in_bytes"] += len(payload)
        self.link["transitions_in_messages"] += 1
        try:
            self.server.ingest(payload)
        except TransportError as error:
            self._log.warning(f"dropped a malformed transitions message: {error}", throttle_duration_sec=1.0)
            return
        if self.server.foreign_runs != foreign:  # addressed to another run: dropped, and nothing to acknowledge
            for run in set(self.server.foreign_runs) - set(foreign):
                self._log.warning(f"an actor serving another run (run {run}) sends transitions: dropping them "
                                  f"unacknowledged (this learner serves run {self.server.run_id}; counted in its "
                                  "status's foreign_transitions)")
            return
        self._log_rejections()
        if self.server.abandoned > abandoned:
            self._log.info(f"an actor restarted: closed {self.server.abandoned - abandoned} episode(s) its previous "
                           "run left open (inserted as truncated)")
        self._publish_acks()

    def _on_transitions_lost(self, info) -> None:
        """DDS lost transitions messages (the actors re-send what is not acknowledged)."""
        self.link["transitions_lost_messages"] = int(info.total_count)

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
        from robot_rl.wire.transport import encode_ack

        # Sent on every tick, with no source yet too: the learner's heartbeat. An actor that holds while its learner
        # is away (learner_lost.action hold) sends nothing, so a learner that spoke only when spoken to would never
        # be heard again (a learner up, before any transition: both would wait for ever).
        payload = encode_ack(self.server.inbox.acks(), self.server.inbox.acks_above(), run=self.server.run_id,
                             incarnation=self.server.incarnation)
        if publish_refused(self._ack_pub, bytes_to_msg(payload)):
            self.link["acks_refused"] += 1  # cumulative: the next tick's acks carry these too
            return
        self.link["acks_out_bytes"] += len(payload) * self._ack_pub.get_subscription_count()

    def publish_weights(self, training_done: bool = False) -> bool:
        """Broadcast the current policy as a new weights version (`training_done`: the final ones, at the budget);
        returns False, sending nothing, while an actor still lacks the previous version (for at most
        WEIGHTS_MAX_WAIT_S): a newer sample would replace the one in flight, and on a link slower than the broadcasts
        no actor would ever get a whole one."""
        from rclpy.duration import Duration

        from robot_rl.ros.convert import bytes_to_msg
        from robot_rl.wire.transport import encode_weights

        link = self.link
        now = time.monotonic()
        if (not training_done and now - self._weights_sent_at < WEIGHTS_MAX_WAIT_S
                and not self._weights_pub.wait_for_all_acked(Duration(seconds=0))):
            link["weights_skipped"] += 1
            return False
        weights = dataclasses.replace(self.server.weights(), training_done=training_done)
        if self.files is not None:
            weights = dataclasses.replace(weights, files=self.files.weights_files(weights))
        payload = encode_weights(weights)
        if publish_refused(self._weights_pub, bytes_to_msg(payload)):
            link["weights_refused"] += 1
            self._weights_refused = training_done or bool(self._weights_refused)
            self._log.warning("the middleware refused a weights broadcast (channel full); sending the policy again "
                              "shortly", throttle_duration_sec=5.0)
            return False
        self._weights_refused = None
        self._weights_sent_at = now
        link["weights_published"] += 1
        link["weights_bytes"] = len(payload)
        link["weights_out_bytes"] += len(payload) * self._weights_pub.get_subscription_count()
        self.weights_published_at.append((weights.version, round(time.time(), 4)))
        return True

    def _publish_refused_weights(self) -> None:
        if self._weights_refused is not None:
            self.publish_weights(training_done=self._weights_refused)

    def _write_status(self) -> None:
        server = self.server
        updates = server.learner.updates if server.attached else 0
        self._rates = self._rate_window.add(time.monotonic(), received_per_s=server.received, updates_per_s=updates)
        worker = self._worker
        server.write_status(
            self.run_dir / STATUS_FILE, info=self._last_info, seconds=time.monotonic() - self._started,
            startup=dict(self.startup), phase=self.phase, budget=self.budget, trained_on=server.trained_on,
            rates=self._rates, eval_every=self.eval_every, evals=len(server.evals),
            last_eval=server.evals[-1] if server.evals else None,
            worker={"job": worker.current, "progress": worker.progress} if worker is not None else None,
            robots=robot_summary(server.episode_log), result=self._result, link=dict(self.link),
            weights_published_at=list(self.weights_published_at),
            checkpoints=[list(row) for row in self.checkpoints], rss_mb=_resident_mb())

    @property
    def phase(self) -> str:
        """starting (the agent is being built) | warm-up | training | final evaluation | final validation | done."""
        if self.done:
            return "done"
        if self._finishing is not None:
            return self._finishing
        if not self.server.attached:
            return "starting"
        return "warm-up" if self.server.learner.warming_up else "training"

    def _log_progress(self) -> None:
        from robot_rl.learner.evaluations import progress_line

        server, worker = self.server, self._worker
        if not server.attached or self.done:
            return
        job = None
        if worker is not None and worker.current is not None:
            done, total = worker.progress or (0, 0)
            job = f"{worker.current}: {done}/{total} episodes ({time.monotonic() - worker.started_at:.0f} s)"
        if self._finishing is not None:
            self._log.info(job or self._finishing)
            return
        self._log.info(progress_line(
            trained_on=server.trained_on, received=server.received, budget=self.budget,
            updates=server.learner.updates, updates_per_s=self._rates["updates_per_s"],
            weights_version=server.weights_version, episodes=server.episodes, successes=server.successes,
            last_eval=server.evals[-1] if server.evals else None, evaluating=job))

    # ----- node loop ---------------------------------------------------------------------------------------------
    def work(self) -> bool:
        """One unit of start-up or training work if any is owed; returns whether it did some."""
        server = self.server
        if not server.attached:
            if self._builder.is_alive() or self.done:
                return False
            self._attach()
            return True
        self._collect_jobs()
        if self._finishing is not None or self.done:
            return False  # the worker evaluates / validates; the node keeps acknowledging
        if server.budget_done:
            self.finish()
            return True
        if server.pending_steps <= 0:
            if server.warmup_weights_due and self.publish_weights():
                return True
            self._maybe_evaluate()
            return False
        self._last_info, weights_due = server.train_step()
        if weights_due:
            self.publish_weights()
        self._record_metrics()
        if server.received >= self._next_checkpoint:
            self.checkpoint()
        self._maybe_evaluate()
        return True

    def _record_metrics(self) -> None:
        """A training-metrics row for the report once per inserted episode, as the in-process loop keeps them."""
        server = self.server
        if server.episodes == self._metrics_episodes or not self._last_info:
            return
        rate = self._update_rate.read(server.learner.updates, time.monotonic())
        server.metrics.append({"env_step": server.trained_on, "updates": server.learner.updates,
                               "updates_per_s": rate, **self._last_info})
        self._metrics_episodes = server.episodes

    # ----- evaluations (robot_rl.learner.evaluations: a worker thread) -------------------------------------------------
    def _submit(self, name: str, job, on_done) -> None:
        self._jobs[name] = on_done
        self._worker.submit(name, job)

    def _evaluation(self, episodes: int, video: bool = False):
        """A worker job evaluating the current policy (a snapshot: the agent is immutable) as `robot-rl train` does."""
        from robot_rl.learner.evaluations import evaluation_job
        from robot_rl.sim.evaluate import EVAL_SEED_OFFSET

        policy = self.server.make_policy(self.server.learner.agent)
        return evaluation_job(policy, episodes, self.cfg.seed + EVAL_SEED_OFFSET,
                              video_path=self.run_dir / VIDEO_FILE if video else None)

    def _maybe_evaluate(self) -> None:
        """Start the evaluation that is due (eval_every), unless the worker is still on the previous one."""
        from robot_rl.learner.evaluations import eval_due

        server = self.server
        if self._worker is None or self._worker.busy or self._finishing is not None:
            return
        step = server.trained_on
        if not eval_due(step, self._last_eval_step, self.eval_every, self.budget):
            return
        self._last_eval_step = step
        self._submit(f"evaluation at env step {step}", self._evaluation(self.eval_episodes),
                     lambda job: self._evaluated(job, step))

    def _collect_jobs(self) -> None:
        if self._worker is None:
            return
        for job in self._worker.collect():
            self._jobs.pop(job.name)(job)

    def _job_failed(self, job) -> bool:
        """Log a job that raised (a stop request is not a failure); returns whether it did not finish."""
        from robot_rl.sim.evaluate import StopRequested

        if job.error is None and job.result is not None:
            return False
        if job.error is not None and not isinstance(job.error, StopRequested):
            self._log.error(f"{job.name} failed: {type(job.error).__name__}: {job.error}")
            self.exit_status = 1
        return True

    def _evaluated(self, job, step: int) -> None:
        from robot_rl.learner.evaluations import eval_line

        if self._job_failed(job):
            return
        row = job.result.report_row(step)
        self.server.evals.append(row)
        self._log.info(eval_line(row, job.seconds))

    # ----- end of the budget -------------------------------------------------------------------------------------
    def write_report(self, video: Path | None = None, status: str | None = None) -> Path:
        """report.md, learning_curve.png and training_curves.png, as `robot-rl train` writes them; env steps are the
        transitions trained on, as the eval rows and `trained_on` count them."""
        from robot_rl.core.report import learner_counters, write_report

        server = self.server
        counters = {**learner_counters(server.learner), "transitions": server.trained_on}
        return write_report(
            self.run_dir, title=f"{self.cfg.task or self.robot.name}, obs {self.cfg.obs_mode}, over ROS 2",
            config=config_to_json(self.cfg),
            evals=list(server.evals), episodes=server.episode_log, metrics=server.metrics, counters=counters,
            wall_seconds=time.time() - server.run_started_at, video=video, status=status)

    def checkpoint(self) -> None:
        from robot_rl.learner.server import checkpoint_dir

        start = time.perf_counter()
        self.server.checkpoint()
        seconds = time.perf_counter() - start
        self._update_rate.exclude(seconds)  # the learner's speed, not the checkpoint's
        self._next_checkpoint = self.server.received + self.checkpoint_every
        written = checkpoint_dir(self.run_dir)
        size = sum(f.stat().st_size for f in written.rglob("*") if f.is_file()) if written else 0
        self.checkpoints.append((self.server.received, round(seconds, 4), size))
        self._log.info(f"checkpoint at {self.server.received} transitions, {self.server.learner.updates} updates "
                       f"({seconds:.2f}s, {size / 1e6:.1f} MB)")

    def finish(self) -> None:
        """Budget reached: checkpoint, final weights (marked training_done), then the final evaluation and validation
        in the worker while the node keeps serving; `_complete` writes the result and the report."""
        server = self.server
        self.checkpoint()
        self.publish_weights(training_done=True)
        self._log_progress()  # the last training progress line: 100 %
        self._result = {"received": server.received, "trained_on": server.trained_on, "updates": server.learner.updates}
        beyond = server.received - server.trained_on
        self._log.info(f"training budget reached: trained on {server.trained_on} transitions"
                       + (f" ({beyond} more received, logged but not trained on)" if beyond > 0 else "")
                       + f", {server.learner.updates} updates")
        if self.final_eval_episodes and self._worker is not None:
            self._finishing = "final evaluation"
            self._log.info(f"final evaluation: {self.final_eval_episodes} episodes in the sim")
            self._submit("final evaluation", self._evaluation(self.final_eval_episodes, video=True),
                         self._final_evaluated)
            return
        if self.final_eval_episodes:
            self._log.warning(f"no final evaluation: {not_in_sim(self.robot, self.cfg.task)}")
        self._complete()

    def _final_evaluated(self, job) -> None:
        from robot_rl.learner.evaluations import eval_line

        if self._job_failed(job):
            self._complete()
            return
        evaluation = job.result
        row = evaluation.report_row(self.server.trained_on)
        # a run finished before and launched again with the same budget evaluates again: one row per env step
        self.server.evals[:] = [r for r in self.server.evals if r["env_step"] != row["env_step"]] + [row]
        self._video = evaluation.video
        self._result.update(final_eval_success=evaluation.success_rate, final_eval_episodes=len(evaluation),
                            final_eval_ci95=list(evaluation.success_interval))
        self._log.info(f"final evaluation: {eval_line(row, job.seconds)}")
        suite = str(self.settings["validate_suite"])
        if suite and self.robot.sim and bool(self.settings["final_validation"]):
            self._start_validation(suite)
            return
        self._complete()

    def _start_validation(self, suite_name: str) -> None:
        """Validate the final policy in the sim (the run's robot file, in the worker) and write its record next to
        the policy file: what a real robot's actor checks before running it. Sized to the run unless
        validation_episodes says."""
        from robot_rl.learner.evaluations import validation_episodes
        from robot_rl.learner.server import POLICY_FILE
        from robot_rl.sim.evaluate import StopRequested
        from robot_rl.apps.validate import ValidateConfig, load_suite, validate

        suite = load_suite(suite_name)
        requested = int(self.settings["validation_episodes"])
        episodes = validation_episodes(requested, self.budget, len(suite.conditions), self.sim_episode_steps,
                                       suite.min_episodes)
        policy = self.run_dir / POLICY_FILE
        note = ""
        if episodes < suite.min_episodes:
            sized = "" if requested else f"sized to the run's {self.budget} transitions; "
            note = (f" ({sized}a verdict needs {suite.min_episodes} per condition: `robot-rl validate {policy} "
                    f"--robot {self.settings['robot']}` gives one)")
        self._log.info(f"final validation: {suite.name} suite, {len(suite.conditions)} conditions x {episodes} "
                       f"episodes{note}; skip it with final_validation:=false")
        config = ValidateConfig(policy, robot=str(self.settings["robot"]), task=self.cfg.task, suite=suite_name,
                                episodes=episodes, workers=1, out=self.run_dir / "validation", video=False)

        def job(worker):
            def on_block(done: int, total: int) -> None:
                worker.progress = (done, total)
                if worker.should_stop():
                    raise StopRequested

            return validate(config, on_block=on_block)

        self._finishing = "final validation"
        self._submit("final validation", job, lambda finished: self._validated(finished, suite.name, episodes))

    def _validated(self, job, suite: str, episodes: int) -> None:
        if not self._job_failed(job):
            summary = job.result
            self._log.info(f"validation ({suite} suite, {episodes} episodes per condition, {job.seconds:.1f} s): "
                           f"{summary['verdict'].upper()}"
                           + (f" ({'; '.join(summary['verdict_reasons'])})" if summary["verdict_reasons"] else "")
                           + f"; record {summary['record']}")
            self._result["validation"] = {
                "suite": suite, "verdict": summary["verdict"], "record": summary["record"],
                "episodes_per_condition": episodes,
                "success": {c["condition"]: c["success_rate"] for c in summary["conditions"]}}
        self._complete()

    def _complete(self, status: str | None = None) -> None:
        """result.json and the report; the node then exits."""
        self._finishing = None
        (self.run_dir / "result.json").write_text(json.dumps(self._result))
        report = self.write_report(self._video, status)
        self._log.info(f"done: {json.dumps(self._result)}; report: {report}")
        self._write_status()
        self.done = True

    @property
    def finished(self) -> bool:
        return self.done

    teardown_limit_s = 4.0
    """Once stop() returns, the run is checkpointed and reported: node_util.bound_teardown bounds the rest."""

    def _is_stopping(self) -> bool:
        return self._stopping

    def stop(self, executor, signal_number: int | None) -> None:
        self._stopping = True  # the builder's demo recording stops at its next step (and leaves no partial dataset)
        if not self.server.attached:  # main() does not wait for the builder
            if not self.done:
                self._log.info(f"stopping (signal {signal_number}) before the learner was ready: nothing to "
                               "checkpoint (the transition log holds every acknowledged transition)")
            return
        if self._worker is not None:  # an evaluation or the validation under way stops at its next step
            self._worker.close()
        if self._finishing is not None:  # training is done and checkpointed
            stage = self._finishing
            self._log.info(f"stopping (signal {signal_number}) during the {stage}: training was done and "
                           "checkpointed")
            self._result["stopped_during"] = stage
            self._complete(status=f"Stopped by signal {signal_number} during the {stage}, after training on "
                                  f"{self.server.trained_on} transitions (the policy file is the final one).")
            return
        if not self.done:
            self._log.info(f"stopping (signal {signal_number}): checkpointing")
            self.checkpoint()
            report = self.write_report(status=f"Stopped by signal {signal_number} after {self.server.trained_on} "
                                              "transitions; launch it again with the same run_dir to resume.")
            self._log.info(f"report so far: {report}; launch again with run_dir {self.run_dir} to resume")
            return
        deadline = time.monotonic() + 1.0  # let the last weights and acks go out
        while time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)

    def destroy(self) -> None:
        try:
            if self._worker is not None:
                self._worker.close()
            if self.files is not None:
                self.files.close()
            self._write_status()
            self._remove_unstarted_run()
            if self._builder.is_alive():  # it may still make a folder in run_dir (a dataset, JAX's cache)
                _BEFORE_EXIT.append(self._remove_unstarted_run)
        finally:
            self.node.destroy_node()

    def _remove_unstarted_run(self) -> None:
        """A new run that ends before it got going (stopped, or its start-up failed, before its config was written
        and with no transition logged) leaves nothing behind: neither the run_dir this start made nor what it added
        to an existing folder (status file, empty transition log, compilation cache). Launched again, it starts
        afresh; a run with its config or a logged transition is kept, and resumes."""
        import shutil

        self._stopping = True
        if not self._removed:  # decided once; main() may do it again, after the builder wrote there meanwhile
            server = getattr(self, "server", None)  # none yet: a start-up ended early by a stop signal
            if (not self._new_run or (self.run_dir / CONFIG_FILE).exists()
                    or (server is not None and (server.received or server.log.indices()))):
                return  # an acknowledged transition is in the log, not yet staged
            self._removed = True
            if "jax" in sys.modules:  # a compile the builder finishes now writes no cache entry into the folder
                import jax

                jax.config.update("jax_persistent_cache_min_compile_time_secs", float("inf"))
            self._log.info(f"the run never got going (no config, no transition): removing what it made in "
                           f"{self.run_dir}")
        if self._made_dir is not None:
            shutil.rmtree(self._made_dir, ignore_errors=True)
        elif self.run_dir.is_dir():
            for name in set(os.listdir(self.run_dir)) - self._entries_before:
                path = self.run_dir / name
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


_BEFORE_EXIT: list = []  # what main() does before it leaves a process whose builder thread still runs


def main(argv: list[str] | None = None) -> int:
    """Run the learner node until SIGINT / SIGTERM or the end of its budget; returns the exit status."""
    from robot_rl.ros.node_util import run_node

    status = run_node(LearnerNode, list(sys.argv if argv is None else argv), NODE_NAME, PARAMETERS, check_parameters,
                      graph="link")
    if any(thread.name == BUILDER_THREAD and thread.is_alive() for thread in threading.enumerate()):
        # Stopped while the agent was being built: a JAX compile cannot be interrupted, and an interpreter exit with a
        # thread inside XLA aborts the process. Nothing is lost by not waiting (the transition log has it all).
        for cleanup in _BEFORE_EXIT:  # again, at the last moment: the builder may have written there meanwhile
            cleanup()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status

if __name__ == "__main__":
    sys.exit(main())
