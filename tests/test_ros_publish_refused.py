"""A send the middleware refuses (rclpy's RCLError "cannot publish data": a secure channel full both ways, as the
megabyte test in tests/test_secure_network.py once met) is counted and sent again later; it never reaches the node
loop, and no transition or final policy is lost. The actor node is driven in-process by calling its callbacks, the
learner's broadcast on a stand-in with the node's own methods, inside a private network namespace with its own
ROS_DOMAIN_ID (tests/ros_harness.py).

The same actor then meets two learner runs on the learner topics (this process publishes their weights and
acknowledgements): it serves the first it hears, names the other once in its log, and neither uses the other run's
weights (a version of 2**62) nor releases an outbox entry on its acknowledgements.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest

from ros_harness import allocate_domain_id

DOMAIN_ID = allocate_domain_id()
SERVED_RUN, OTHER_RUN = "served" + "0" * 26, "other" + "1" * 27


class RefusingPublisher:
    """A publisher whose first `refuse` sends fail as rclpy's do on a full channel; keeps what it sent."""

    def __init__(self, refuse: int):
        self.refuse = refuse
        self.sent: list = []

    def publish(self, msg) -> None:
        from rclpy.impl.implementation_singleton import rclpy_implementation

        if self.refuse > 0:
            self.refuse -= 1
            raise rclpy_implementation.RCLError("Failed to publish: cannot publish data")
        self.sent.append(msg)

    def wait_for_all_acked(self, _timeout) -> bool:
        return True

    def get_subscription_count(self) -> int:
        return 1


def actor_transitions() -> dict:
    import rclpy
    from ros_harness import untrained_state_agent
    from std_msgs.msg import Bool

    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import write_policy_file
    from robot_rl.ros.nodes.actor_node import ActorNode
    from robot_rl.ros.convert import floats_to_msg, joint_state_to_msg, msg_to_bytes
    from robot_rl.sim.robot import HOME_QPOS
    from robot_rl.wire.transitions import decode_transitions

    work = Path(tempfile.mkdtemp(prefix="ros-publish-refused-"))
    weights = write_policy_file(work / "policy.msgpack", weights_message(untrained_state_agent(), version=1))
    rclpy.init()
    actor = ActorNode(cli_args=["--ros-args", "-p", "robot:=sim_panda_driver", "-p", "mode:=lockstep",
                                "-p", "obs_mode:=state", "-p", "reset_service:=none", "-p", f"weights_path:={weights}"])
    actor._arm_pub = types.SimpleNamespace(publish=lambda msg: None)
    names = [f"joint{i}" for i in range(1, 8)] + ["finger_joint1", "finger_joint2"]
    summary = {}
    try:
        actor.runner.tick()
        for step in range(6):
            actor._on_object_state(floats_to_msg([0.0] * 10))
            actor._on_joint_states(joint_state_to_msg(names, [*HOME_QPOS, 0.04, 0.04], [0.0] * 9,
                                                      stamp=100.0 + 0.1 * step))
            actor.inputs.reward(0.0)
            actor._on_success(Bool(data=False))
        summary["transitions"] = actor.session.next_seq
        actor._transitions_pub = full = RefusingPublisher(refuse=1)
        actor._flush_outbox()  # refused: counted, and the node goes on
        summary["refused"] = actor.transitions_refused_messages
        summary["sent_while_full"] = len(full.sent)
        actor.outbox.resend_all()  # what the resend timer does once resend_after has passed
        actor._flush_outbox()
        summary["seqs_sent"] = sorted(t.seq for msg in full.sent for t in decode_transitions(msg_to_bytes(msg))[1])
        summary["stats_refused"] = actor.stats()["transitions_refused_messages"]
        summary["run_identity"] = two_runs(actor, weights)
    finally:
        actor.destroy()
        rclpy.try_shutdown()
        shutil.rmtree(work, ignore_errors=True)
    return summary


def two_runs(actor, policy_file: Path) -> dict:
    """The actor beside two scripted learners (runs SERVED_RUN and OTHER_RUN) on the real learner topics: what it
    used and released after each step. Each step waits for its own message to arrive before the next is sent."""
    import dataclasses

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from std_msgs.msg import UInt8MultiArray

    from robot_rl.wire.policy_file import read_policy_file
    from robot_rl.ros import qos
    from robot_rl.ros.convert import bytes_to_msg, msg_to_bytes
    from robot_rl.wire.transitions import decode_transitions_message, encode_ack
    from robot_rl.wire.weights import encode_weights

    node = rclpy.create_node("scripted_learners")
    weights_pub = node.create_publisher(UInt8MultiArray, qos.LEARNER_WEIGHTS, qos.topic_qos(qos.LEARNER_WEIGHTS))
    ack_pub = node.create_publisher(UInt8MultiArray, qos.LEARNER_ACK, qos.topic_qos(qos.LEARNER_ACK))
    executor = SingleThreadedExecutor()
    executor.add_node(actor.node)
    executor.add_node(node)
    policy = read_policy_file(policy_file)
    binding, outbox, source = actor.run_binding, actor.outbox, actor.source

    def weights(version: int, run: str) -> None:
        message = dataclasses.replace(policy, version=version, run=run, incarnation=1)
        weights_pub.publish(bytes_to_msg(encode_weights(message)))

    def ack(through: int, run: str) -> None:
        ack_pub.publish(bytes_to_msg(encode_ack({source: through}, run=run, incarnation=1)))

    def spin_until(predicate, seconds: float = 30.0) -> bool:
        end = time.monotonic() + seconds
        while not predicate() and time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
        return predicate()

    def in_use() -> list:
        stamp = actor.policy.weights_stamp
        return list(stamp) if stamp is not None else None

    summary: dict = {"outbox_before": len(outbox)}
    try:
        summary["matched"] = spin_until(lambda: node.count_subscribers(qos.LEARNER_WEIGHTS) >= 1
                                        and node.count_subscribers(qos.LEARNER_ACK) >= 1)
        weights(5, SERVED_RUN)  # the first run heard: served
        summary["bound"] = spin_until(lambda: binding.run == SERVED_RUN and in_use() == [SERVED_RUN, 1, 5])
        weights(2**62, OTHER_RUN)
        summary["other_weights_heard"] = spin_until(lambda: binding.ignored[OTHER_RUN] >= 1)
        summary["in_use_after_other_weights"] = in_use()
        for _ in range(3):  # the other run acknowledges everything, repeatedly
            ack(summary["outbox_before"] - 1, OTHER_RUN)
        ack(1, SERVED_RUN)  # after those on the same writer: once it is applied, they were all judged
        summary["served_ack_applied"] = spin_until(lambda: outbox.acknowledged_through >= 1)
        summary["after_acks"] = {"acknowledged_through": outbox.acknowledged_through, "outbox": len(outbox),
                                 "ignored": binding.ignored[OTHER_RUN]}
        weights(6, SERVED_RUN)  # the other run's 2**62 locks nothing out
        summary["newer_served_weights_used"] = spin_until(lambda: in_use() == [SERVED_RUN, 1, 6])
        outbox.resend_all()
        actor._flush_outbox()
        summary["transitions_addressed_to"] = decode_transitions_message(
            msg_to_bytes(actor._transitions_pub.sent[-1])).run
        summary["stats_run"] = actor.stats()["run"]
    finally:
        executor.remove_node(node)
        executor.remove_node(actor.node)
        node.destroy_node()
    return summary


def learner_weights() -> dict:
    """LearnerNode.publish_weights and its retry timer on a stand-in holding just what they use."""
    import collections
    import math

    import numpy as np

    from robot_rl.ros.convert import msg_to_bytes
    from robot_rl.ros.nodes.learner_node import LearnerNode
    from robot_rl.wire.weights import WeightsMessage, decode_weights
    from robot_rl.core.types import ObservationSpec

    versions = iter(range(1, 100))
    spec = ObservationSpec.from_shapes({"state": ((3,), np.float32)})
    server = types.SimpleNamespace(weights=lambda: WeightsMessage(
        version=next(versions), policy=b"\0" * 8, observation_spec=spec, action_dim=4, policy_config={}))
    learner = types.SimpleNamespace(
        server=server, files=None, _weights_pub=RefusingPublisher(refuse=2), _weights_sent_at=-math.inf,
        _weights_refused=None, weights_published_at=collections.deque(maxlen=200),
        _log=types.SimpleNamespace(warning=lambda *args, **kwargs: None),
        link={"weights_published": 0, "weights_skipped": 0, "weights_bytes": 0, "weights_out_bytes": 0,
              "weights_refused": 0})
    learner.publish_weights = lambda training_done=False: LearnerNode.publish_weights(learner, training_done)
    summary = {"first": learner.publish_weights(), "final": learner.publish_weights(training_done=True)}
    summary["refused"] = learner.link["weights_refused"]
    LearnerNode._publish_refused_weights(learner)  # the retry timer's tick: the channel has room again
    LearnerNode._publish_refused_weights(learner)  # nothing left to retry: sends nothing more
    sent = [decode_weights(msg_to_bytes(msg)) for msg in learner._weights_pub.sent]
    summary["sent"] = [(w.version, w.training_done) for w in sent]
    summary["published"] = learner.link["weights_published"]
    return summary


def client() -> dict:
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    return {"actor": actor_transitions(), "learner": learner_weights()}


@pytest.fixture(scope="module")
def script() -> tuple[dict, str]:
    from ros_harness import run_ros_script

    summary, stderr, _ = run_ros_script(__file__, "client", DOMAIN_ID, 120)
    return summary, stderr


def test_refused_sends_are_counted_and_sent_again_without_loss(script):
    summary, stderr = script
    actor, learner = summary["actor"], summary["learner"]
    assert actor["transitions"] >= 4, (summary, stderr[-2000:])
    assert actor["refused"] == actor["stats_refused"] == 1 and actor["sent_while_full"] == 0, actor
    assert actor["seqs_sent"] == list(range(actor["transitions"])), actor  # every one, once the channel had room
    assert learner["first"] is False and learner["final"] is False and learner["refused"] == 2, learner
    assert learner["sent"] == [[3, True]] and learner["published"] == 1, learner  # the final flag survived


def test_an_actor_serves_one_run_and_ignores_a_learner_of_another(script):
    summary, stderr = script
    runs = summary["actor"]["run_identity"]
    assert runs["matched"] and runs["bound"] and runs["other_weights_heard"], (runs, stderr[-3000:])
    assert runs["in_use_after_other_weights"] == [SERVED_RUN, 1, 5], runs  # 2**62 of the other run: not used
    # the other run acknowledged every transition; only the served run's acknowledgement released any
    assert runs["served_ack_applied"] and runs["outbox_before"] >= 4, runs
    assert runs["after_acks"]["acknowledged_through"] == 1, runs
    assert runs["after_acks"]["outbox"] == runs["outbox_before"] - 2 and runs["after_acks"]["ignored"] >= 2, runs
    assert runs["newer_served_weights_used"], runs
    assert runs["transitions_addressed_to"] == SERVED_RUN and runs["stats_run"]["run"] == SERVED_RUN, runs
    named = [line for line in stderr.splitlines() if f"a learner of another run (run {OTHER_RUN}" in line]
    assert len(named) == 1 and f"this actor serves run {SERVED_RUN}" in named[0], named


if __name__ == "__main__":
    if sys.argv[1:] == ["client"]:
        import json

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        print("RESULT " + json.dumps(client()), flush=True)
