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
import math
import os
import sys
import threading
import time
from pathlib import Path

from robot_rl.learner.evaluations import robot_summary
from robot_rl.policies.base import PolicyError
from robot_rl.policies.registry import learner_plan
from robot_rl.ros import qos
from robot_rl.ros.nodes.learner_params import (
    NODE_NAME, PARAMETERS, check_demo_images, check_parameters, checked_train_config, load_robot, run_spaces,
)
from robot_rl.ros.node_util import NodeStartupError, declare_parameters, publish_refused
from robot_rl.training.learner_loop import LearnerLoop, not_in_sim

STATUS_FILE = "learner_status.json"
JAX_CACHE_DIR = "jax_cache"
BUILDER_THREAD = "learner-build"
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
    """rclpy node around a run's `LearnerLoop` and its `LearnerServer` (see the module doc)."""

    def __init__(self, *, node_name: str = NODE_NAME, context=None, cli_args: list[str] | None = None):
        import rclpy
        from rclpy.event_handler import PublisherEventCallbacks, SubscriptionEventCallbacks
        from std_msgs.msg import UInt8MultiArray

        from robot_rl.learner.server import checkpoint_dir
        from robot_rl.ros.convert import bytes_to_msg  # also what the callbacks use: loaded before the builder starts
        from robot_rl.ros.node_util import STARTUP_ABANDONED

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
        cfg = None if checkpoint_dir(self.run_dir) else checked_train_config(self.settings)
        self.robot = load_robot(str(self.settings["robot"]))  # checked by check_parameters: small YAML, fast
        # Made before the run folder: what this start adds is removed again should a new run end before it got going.
        self.loop = LearnerLoop(self.settings, cfg, self.robot, startup=self.startup, log=self._log,
                                publish_weights=self.publish_weights, write_status=self._write_status)
        STARTUP_ABANDONED.append(self.loop.remove_unstarted_run)  # a start-up ended by a stop signal leaves nothing
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.loop.mark("node")

        if self.settings["validate_suite"]:
            from robot_rl.sim.validation import load_suite

            try:
                load_suite(str(self.settings["validate_suite"]))
            except ValueError as error:
                raise NodeStartupError(f"validate_suite: {error}") from None
        try:
            self._log.info(self.loop.open_server())
        except (ValueError, OSError) as error:  # a corrupt checkpoint state or transition log entry
            raise NodeStartupError(f"cannot resume run_dir {self.run_dir}: {error}") from None
        self.server = self.loop.server
        self._weights_pub = node.create_publisher(UInt8MultiArray, qos.LEARNER_WEIGHTS,
                                                  qos.topic_qos(qos.LEARNER_WEIGHTS))
        # What crosses the link (bytes on this node's topics, times the matched readers for what it sends) and when
        # each weights version went out (unix time: for a bench on hosts that share a clock; nothing compares it).
        self.link = {"transitions_in_bytes": 0, "transitions_in_messages": 0, "weights_out_bytes": 0,
                     "acks_out_bytes": 0, "weights_published": 0, "weights_skipped": 0, "weights_bytes": 0,
                     "transitions_lost_messages": 0, "weights_refused": 0, "acks_refused": 0}
        self._weights_refused: bool | None = None  # a refused broadcast to send again (its training_done), or None
        self.weights_published_at: collections.deque[tuple[int, float]] = collections.deque(maxlen=200)
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
        if self.loop.progress_every_s > 0:
            node.create_timer(self.loop.progress_every_s, self._counted(self.loop.log_progress))
        self.loop.mark("listening")
        self._started = time.monotonic()
        self._builder = threading.Thread(target=self._build_learner, name=BUILDER_THREAD, daemon=True)
        self._builder.start()
        self._log.info(f"learner listening: run_dir={self.run_dir} robot={self.robot.name} "
                       f"task={self.settings['task']} obs_mode={self.settings['obs_mode']} "
                       f"budget={self.loop.budget or 'none'} transitions "
                       f"({self.startup['listening'] - _started_at:.2f}s after start; building the agent)")

    def _counted(self, callback):
        def run(*args) -> None:
            self.callbacks_run += 1
            callback(*args)

        return run

    @property
    def finished(self) -> bool:
        return self.loop.done

    @property
    def exit_status(self) -> int:
        return self.loop.exit_status

    # ----- start-up (builder thread) -----------------------------------------------------------------------------
    def _build_learner(self) -> None:
        """The run's config, files and spaces, then the learner (LearnerLoop.build_learner), off the node loop,
        which meanwhile logs and acknowledges."""
        loop = self.loop
        try:
            import jax

            cache = (str(self.settings["jax_cache_dir"]) or os.environ.get("JAX_COMPILATION_CACHE_DIR")
                     or str(self.run_dir / JAX_CACHE_DIR))
            jax.config.update("jax_compilation_cache_dir", cache)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            from robot_rl.sim.loop import sim_run_steps

            cfg = self._files_here(loop.cfg or checked_train_config(self.settings))
            spec, action_dim = run_spaces(self.robot, cfg, self.server.checkpoint_state)
            loop.mark("spaces")
            loop.sim_episode_steps = sim_run_steps(self.robot, cfg.task)
            if cfg.demos and cfg.demo_path is None and not loop.sim_episode_steps:
                raise NodeStartupError(f"demos={cfg.demos}: scripted demos are recorded in a sim task, and "
                                       f"{not_in_sim(self.robot, cfg.task)}: give demo_path (teleoperated demos) or "
                                       "demos:=0")
            if int(self.settings["eval_every"]) > 0 and not loop.sim_episode_steps:
                raise NodeStartupError(f"eval_every={self.settings['eval_every']}: evaluations run in the sim mirror, "
                                       f"and {not_in_sim(self.robot, cfg.task)} (eval_every:=0)")
            if not loop.sim_episode_steps:
                loop.eval_every = 0  # evaluations: sim runs only
            try:
                plan = learner_plan(cfg, spec, action_dim)
            except PolicyError as error:
                raise NodeStartupError(str(error).replace("--base", "base")) from None
            loop.build_learner(cfg, plan, check_demos=lambda: check_demo_images(
                cfg.demo_path, str(self.settings["robot"]), cfg.image_size))
        except BaseException as error:  # noqa: BLE001 - reported by the node loop
            loop.build_error = error

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

    def _is_stopping(self) -> bool:
        return self.loop.stopping

    def _files_conflict(self, problem: str) -> None:
        """A peer offers the demo dataset with other bytes than this host's copy (logged): the node stops."""
        if self.server.attached and not self.loop.done:
            self.loop.checkpoint()
        self.loop.exit_status, self.loop.done = 2, True

    def _attach(self) -> None:
        """The builder is done: the loop attaches the learner and starts training, or the start-up failed."""
        self._builder.join()
        error = self.loop.attach()
        if error is not None:
            self._start_up_failed(error)

    def _start_up_failed(self, error: BaseException) -> None:
        """Log the reason in one line and end the node: status 2 for what it was given, else 1."""
        from robot_rl.data.episodes import DatasetError

        if isinstance(error, NodeStartupError):
            status = error.status
        else:  # parameters, files and data: a restart would repeat it
            status = 2 if isinstance(error, (ValueError, OSError, DatasetError)) else 1
        self._log.error(f"learner start-up failed: {type(error).__name__}: {error}")
        self.loop.exit_status, self.loop.done = status, True

    # ----- callbacks ---------------------------------------------------------------------------------------------
    def _on_transitions(self, msg) -> None:
        from robot_rl.ros.convert import payload_view
        from robot_rl.wire.protocol import TransportError

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
        self.loop.log_rejections()
        if self.server.abandoned > abandoned:
            self._log.info(f"an actor restarted: closed {self.server.abandoned - abandoned} episode(s) its previous "
                           "run left open (inserted as truncated)")
        self._publish_acks()

    def _on_transitions_lost(self, info) -> None:
        """DDS lost transitions messages (the actors re-send what is not acknowledged)."""
        self.link["transitions_lost_messages"] = int(info.total_count)

    def _close_abandoned(self) -> None:
        for source, episode in self.server.close_abandoned():
            self._log.warning(f"closed episode {episode} of {source}: no step for "
                              f"{self.server.abandon_after_s:.0f}s (inserted as truncated)")

    def _on_ack_matched(self, info) -> None:
        if info.current_count_change > 0:
            self._publish_acks()

    def _publish_acks(self) -> None:
        from robot_rl.ros.convert import bytes_to_msg
        from robot_rl.wire.transitions import encode_ack

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
        from robot_rl.wire.weights import encode_weights

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
        server, loop = self.server, self.loop
        rates = loop.measure_rates()
        worker = loop.worker
        server.write_status(
            self.run_dir / STATUS_FILE, info=loop.last_info, seconds=time.monotonic() - self._started,
            startup=dict(self.startup), phase=loop.phase, budget=loop.budget, trained_on=server.trained_on,
            rates=rates, eval_every=loop.eval_every, evals=len(server.evals),
            last_eval=server.evals[-1] if server.evals else None,
            worker={"job": worker.current, "progress": worker.progress} if worker is not None else None,
            robots=robot_summary(server.episode_log), result=loop.result, link=dict(self.link),
            weights_published_at=list(self.weights_published_at),
            checkpoints=[list(row) for row in loop.checkpoints], rss_mb=_resident_mb())

    # ----- node loop ---------------------------------------------------------------------------------------------
    def work(self) -> bool:
        """One unit of start-up or training work if any is owed; returns whether it did some."""
        if not self.server.attached:
            if self._builder.is_alive() or self.loop.done:
                return False
            self._attach()
            return True
        return self.loop.work()

    teardown_limit_s = 4.0
    """Once stop() returns, the run is checkpointed and reported: node_util.bound_teardown bounds the rest."""

    def stop(self, executor, signal_number: int | None) -> None:
        if not self.loop.stop(signal_number):
            return
        deadline = time.monotonic() + 1.0  # let the last weights and acks go out
        while time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)

    def destroy(self) -> None:
        try:
            self.loop.close()
            if self.files is not None:
                self.files.close()
            self._write_status()
            self.loop.remove_unstarted_run()
            if self._builder.is_alive():  # it may still make a folder in run_dir (a dataset, JAX's cache)
                _BEFORE_EXIT.append(self.loop.remove_unstarted_run)
        finally:
            self.node.destroy_node()


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
