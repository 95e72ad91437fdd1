"""The learner node: transitions from any number of actors in, SAC training, versioned weights out, checkpoints.

Run::

    python -m robot_rl.ros.learner_node --ros-args -p run_dir:=runs/ros -p task:=PickCube-v0 -p obs_mode:=state

Topics (absolute, shared by every actor): ``/actor/transitions`` in (msgpack batches with actor id + sequence
numbers), ``/learner/ack`` out (cumulative per actor run, sent once the transitions are in the fsynced transition
log), ``/learner/weights`` out (transient-local, versioned, every ``weights_every`` learner steps).

Restarting the node with the same ``run_dir`` resumes: checkpoint (agent, optimiser, replay, counters) plus every
logged transition after it, so a crash (even ``kill -9``) loses nothing that was acknowledged. The node does one
learner step (``utd`` gradient steps) per received transition, like the in-process loop; with ``steps`` > 0 it stops
after that many transitions, checkpoints, optionally evaluates the final policy in the sim (``final_eval_episodes``)
and exits 0. Status: ``<run_dir>/learner_status.json`` (every second).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

from robot_rl.ros import qos
from robot_rl.ros.node_util import declare_parameters

NODE_NAME = "learner"
STATUS_FILE = "learner_status.json"


def _train_config(param):
    """TrainConfig (the CPU preset) with the node's parameters (`param`: name -> value) applied."""
    from robot_rl.train import TrainConfig

    base = TrainConfig()
    learner = dataclasses.replace(base.learner, utd=int(param("utd")), batch_size=int(param("batch_size")),
                                  seed=int(param("seed")))
    sac = dataclasses.replace(base.sac, critic_ensemble_size=int(param("critics")))
    demo_path = str(param("demo_path"))
    return TrainConfig(
        task=str(param("task")), obs_mode=str(param("obs_mode")), image_size=int(param("image_size")),
        demos=int(param("demos")), demo_path=Path(demo_path) if demo_path else None, steps=max(int(param("steps")), 1),
        weights_every=int(param("weights_every")), seed=int(param("seed")), learner=learner, sac=sac)


class LearnerNode:
    """rclpy node around a `LearnerServer` (see the module doc)."""

    def __init__(self, *, node_name: str = NODE_NAME, context=None, cli_args: list[str] | None = None):
        import rclpy
        from std_msgs.msg import UInt8MultiArray

        from robot_rl.learner import Learner
        from robot_rl.learner_server import LearnerServer
        from robot_rl.loop import make_env
        from robot_rl.train import config_to_json, record_demos

        self.node = rclpy.create_node(node_name, context=context, cli_args=cli_args)
        node = self.node
        self._log = node.get_logger()
        param = declare_parameters(node, (
            ("run_dir", "runs/ros-learner", "checkpoints, transition log, policy file, status (resumed if present)"),
            ("task", "PickCube-v0", "sim task (observation/action spaces, demos, final evaluation)"),
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
            ("final_eval_episodes", 0, "after `steps`: evaluate the final policy in-process in the sim"),
            ("seed", 0, "seed"),
        ))
        self.cfg = _train_config(param)
        self.run_dir = Path(param("run_dir"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.budget = int(param("steps"))
        self.checkpoint_every = int(param("checkpoint_every"))
        self.final_eval_episodes = int(param("final_eval_episodes"))
        config_file = self.run_dir / "config.json"
        if not config_file.exists():
            config_file.write_text(json.dumps(config_to_json(self.cfg), indent=2))

        env = make_env(self.cfg.task, obs_mode=self.cfg.obs_mode, image_size=self.cfg.image_size)
        learner = Learner(env.observation_space, env.action_space.shape[0], self.cfg.sac, self.cfg.learner)
        env.close()
        self.server = LearnerServer(learner, self.run_dir, updates_per_transition=float(param("updates_per_transition")),
                                    weights_every=self.cfg.weights_every, budget=self.budget)
        resuming = Learner.checkpoint_path(self.run_dir / "checkpoint") is not None
        demos = None if resuming else record_demos(self.cfg, self.run_dir)
        self._log.info(self.server.start(demos))
        self._next_checkpoint = self.server.received + self.checkpoint_every
        self.done = False

        self._weights_pub = node.create_publisher(UInt8MultiArray, qos.LEARNER_WEIGHTS,
                                                  qos.topic_qos(qos.LEARNER_WEIGHTS))
        self._ack_pub = node.create_publisher(UInt8MultiArray, qos.LEARNER_ACK, qos.topic_qos(qos.LEARNER_ACK))
        # Counted, so the node loop runs every ready callback between gradient steps (node_util.spin_callbacks).
        self.callbacks_run = 0
        node.create_subscription(UInt8MultiArray, qos.ACTOR_TRANSITIONS, self._counted(self._on_transitions),
                                 qos.topic_qos(qos.ACTOR_TRANSITIONS))
        node.create_timer(0.5, self._counted(self._publish_acks))
        node.create_timer(1.0, self._counted(self._write_status))
        self._last_info: dict[str, float] = {}
        self._started = time.monotonic()
        self.publish_weights()
        self._log.info(f"learner up: run_dir={self.run_dir} task={self.cfg.task} obs_mode={self.cfg.obs_mode} "
                       f"utd={self.cfg.learner.utd} critics={self.cfg.sac.critic_ensemble_size} "
                       f"budget={self.budget or 'none'} transitions")

    def _counted(self, callback):
        def run(*args) -> None:
            self.callbacks_run += 1
            callback(*args)

        return run

    def _on_transitions(self, msg) -> None:
        from robot_rl.ros.convert import payload_view
        from robot_rl.transport import TransportError

        try:
            self.server.ingest(payload_view(msg))
        except TransportError as error:
            self._log.warning(f"dropped a malformed transitions message: {error}", throttle_duration_sec=1.0)
            return
        for reason in self.server.rejections:
            self._log.warning(f"dropped {reason}", throttle_duration_sec=1.0)
        self.server.rejections.clear()
        self._publish_acks()

    def _publish_acks(self) -> None:
        from robot_rl.ros.convert import bytes_to_msg
        from robot_rl.transport import encode_ack

        acks = self.server.inbox.acks()
        if acks:
            self._ack_pub.publish(bytes_to_msg(encode_ack(acks)))

    def publish_weights(self) -> None:
        from robot_rl.ros.convert import bytes_to_msg
        from robot_rl.transport import encode_weights

        self._weights_pub.publish(bytes_to_msg(encode_weights(self.server.weights())))

    def _write_status(self) -> None:
        self.server.write_status(self.run_dir / STATUS_FILE, info=self._last_info,
                                 seconds=time.monotonic() - self._started)

    def work(self) -> bool:
        """One unit of training work if any is owed; returns whether it did some."""
        server = self.server
        if server.budget_done and not self.done:
            self.finish()
            return False
        if server.pending_steps <= 0:
            return False
        self._last_info, weights_due = server.train_step()
        if weights_due:
            self.publish_weights()
        if server.received >= self._next_checkpoint:
            self.checkpoint()
        return True

    def checkpoint(self) -> None:
        start = time.perf_counter()
        self.server.checkpoint()
        self._next_checkpoint = self.server.received + self.checkpoint_every
        self._log.info(f"checkpoint at {self.server.received} transitions, {self.server.learner.updates} updates "
                       f"({time.perf_counter() - start:.2f}s)")

    def finish(self) -> None:
        """Budget reached: checkpoint, final weights, optional final evaluation; then the node exits."""
        self.checkpoint()
        self.publish_weights()
        result = {"received": self.server.received, "trained_on": self.server.trained_on,
                  "updates": self.server.learner.updates}
        if self.final_eval_episodes:
            from robot_rl.actor import Actor
            from robot_rl.loop import make_env
            from robot_rl.train import EVAL_SEED_OFFSET, evaluate

            env = make_env(self.cfg.task, obs_mode=self.cfg.obs_mode, image_size=self.cfg.image_size)
            results = evaluate(env, Actor(self.server.learner.agent, deterministic=True), self.final_eval_episodes,
                               self.cfg.seed + EVAL_SEED_OFFSET)
            env.close()
            result["final_eval_success"] = sum(r.success for r in results) / len(results)
            result["final_eval_episodes"] = len(results)
        (self.run_dir / "result.json").write_text(json.dumps(result))
        self._log.info(f"training budget reached: {json.dumps(result)}")
        self._write_status()
        self.done = True

    @property
    def finished(self) -> bool:
        return self.done

    def stop(self, executor, signal_number: int | None) -> None:
        if not self.done:
            self._log.info(f"stopping (signal {signal_number}): checkpointing")
            self.checkpoint()
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

    return run_node(LearnerNode, list(sys.argv if argv is None else argv), NODE_NAME)

if __name__ == "__main__":
    sys.exit(main())
