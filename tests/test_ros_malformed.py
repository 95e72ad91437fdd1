"""Malformed messages are dropped with a clear log line and never kill the actor or learner node: garbage and
mismatched transition payloads, corrupt weights, a NaN pose, an unknown episode key. After
all that the actor still answers a valid sensor frame with a command. Runs in a private network namespace with its
own ROS_DOMAIN_ID (tests/ros_harness.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ros_harness import allocate_domain_id

DOMAIN_ID = allocate_domain_id()
DEADLINE_S = 120.0


def client() -> dict:
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from ros_harness import StandInSensors, untrained_state_agent
    from std_msgs.msg import String, UInt8MultiArray

    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import write_policy_file
    from robot_rl.ros import qos
    from robot_rl.ros.convert import bytes_to_msg, pose_to_msg
    from robot_rl.wire.transitions import StampedTransition, encode_transitions

    run_dir = Path(tempfile.mkdtemp(prefix="ros-malformed-"))
    weights = write_policy_file(run_dir / "policy.msgpack", weights_message(untrained_state_agent(), version=1))
    python = sys.executable
    logs = {name: open(run_dir / f"{name}.log", "w+") for name in ("actor", "learner")}
    nodes = {
        "actor": subprocess.Popen(
            [python, "-m", "robot_rl.ros.nodes.actor_node", "--ros-args", "-p", "obs_mode:=state", "-p", "mode:=lockstep",
             "-p", "reset_service:=none", "-p", f"weights_path:={weights}", "-p", "stream_transitions:=false"],
            stdout=logs["actor"], stderr=subprocess.STDOUT, start_new_session=True),
        "learner": subprocess.Popen(
            [python, "-m", "robot_rl.ros.nodes.learner_node", "--ros-args", "-p", f"run_dir:={run_dir / 'learner'}",
             "-p", "obs_mode:=state", "-p", "demos:=0"],
            stdout=logs["learner"], stderr=subprocess.STDOUT, start_new_session=True),
    }
    rclpy.init()
    node = rclpy.create_node("malformed_client")
    sensors = StandInSensors(node)
    pub = {
        "pose": node.create_publisher(PoseStamped, "tcp_pose", qos.qos_profile(qos.SENSORS)),  # the malformed one
        "episode": node.create_publisher(String, "teleop/episode", qos.topic_qos(qos.TELEOP_EPISODE)),
        "transitions": node.create_publisher(UInt8MultiArray, qos.ACTOR_TRANSITIONS,
                                             qos.topic_qos(qos.ACTOR_TRANSITIONS)),
        "weights": node.create_publisher(UInt8MultiArray, qos.LEARNER_WEIGHTS, qos.topic_qos(qos.LEARNER_WEIGHTS)),
    }
    commands: list[float] = []
    node.create_subscription(PoseStamped, "command/target_pose", lambda msg: commands.append(time.monotonic()),
                             qos.qos_profile(qos.COMMANDS))

    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.02)

    def wait_for(predicate, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if predicate():
                return True
            spin(0.2)
        return False

    summary: dict = {}
    try:
        # every topic of the frame below is subscribed (a frame sent before that is lost in part: no command)
        ready = wait_for(lambda: node.count_subscribers(qos.ACTOR_TRANSITIONS) >= 1
                         and all(node.count_subscribers(name) >= 1
                                 for name in ("tcp_pose", "tcp_twist", "gripper/state", "sim/object_state"))
                         and node.count_publishers("command/target_pose") >= 1
                         and node.count_publishers(qos.LEARNER_ACK) >= 1,
                         DEADLINE_S / 2)
        summary["ready"] = ready
        spin(1.0)
        # a first valid frame: the actor starts its episode and answers with a command
        sensors.frame(100.0)
        summary["first_command"] = wait_for(lambda: len(commands) >= 1, 20.0)
        # now the bad ones
        pub["transitions"].publish(bytes_to_msg(b"\x00garbage\xff"))
        pub["transitions"].publish(bytes_to_msg(json.dumps({"kind": "transitions"}).encode()))
        bad_obs = {"state": np.zeros(3, np.float32)}  # wrong shape, and object_state missing
        item = StampedTransition(0, 0, 0, bad_obs, np.zeros(4, np.float32), 0.0, False, True, bad_obs)
        pub["transitions"].publish(bytes_to_msg(encode_transitions("evil/run1", [item])))
        pub["weights"].publish(bytes_to_msg(b"not weights"))
        pub["episode"].publish(String(data="bogus"))
        bad_pose = pose_to_msg((0.45, 0.0, 0.2), (0.0, 1.0, 0.0, 0.0), stamp=101.0, frame_id="base")
        bad_pose.pose.position.x = float("nan")
        pub["pose"].publish(bad_pose)

        def logged(name: str, *lines: str) -> bool:
            text = (run_dir / f"{name}.log").read_text()
            return all(line in text for line in lines)

        # each one dropped with its log line (checked by the test), while both nodes stay up
        wait_for(lambda: logged("actor", "rejected weights from learner", "dropped malformed tcp_pose",
                                "dropped malformed teleop/episode")
                 and logged("learner", "dropped a malformed transitions message"), 20.0)
        summary["alive"] = {name: process.poll() is None for name, process in nodes.items()}
        # still working: the next valid frame (with the step's reward / success) gets a command
        before = len(commands)
        sensors.task_result()
        sensors.frame(102.0, position=(0.46, 0.0, 0.2))
        summary["command_after"] = wait_for(lambda: len(commands) > before, 20.0)
        # malformed transitions are logged and acknowledged at once, and rejected once the agent is built
        status = run_dir / "learner" / "learner_status.json"

        def learner_status() -> dict:
            try:
                return json.loads(status.read_text())
            except (OSError, ValueError):
                return {}

        wait_for(lambda: learner_status().get("learner_ready") and learner_status().get("rejected"), 60.0)
        summary["learner_status"] = learner_status() or None
    finally:
        for process in nodes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
        summary["exit"] = {}
        for name, process in nodes.items():
            try:
                summary["exit"][name] = process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                summary["exit"][name] = "killed"
        node.destroy_node()
        rclpy.try_shutdown()
        for name, log in logs.items():
            log.seek(0)
            summary[f"{name}_log"] = log.read()[-4000:]
            log.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    return summary


def test_malformed_messages_are_dropped_and_the_nodes_keep_working():
    from ros_harness import run_ros_script

    summary, stderr, _ = run_ros_script(__file__, "client", DOMAIN_ID, DEADLINE_S + 30)
    assert summary["ready"] and summary["first_command"], summary
    assert summary["alive"] == {"actor": True, "learner": True}, summary
    assert summary["command_after"], summary
    assert summary["exit"] == {"actor": 0, "learner": 0}, summary
    learner_log, actor_log = summary["learner_log"], summary["actor_log"]
    assert learner_log.count("dropped a malformed transitions message") >= 1, learner_log
    assert "lacks keys ['object_state']" in learner_log or "evil/run1 seq 0" in learner_log, learner_log
    assert summary["learner_status"]["rejected"] == 1, summary["learner_status"]
    assert "rejected weights from learner" in actor_log, actor_log
    assert "dropped malformed tcp_pose" in actor_log, actor_log
    assert "dropped malformed teleop/episode" in actor_log, actor_log


if __name__ == "__main__":
    if sys.argv[1:] == ["client"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        print("RESULT " + json.dumps(client()))
