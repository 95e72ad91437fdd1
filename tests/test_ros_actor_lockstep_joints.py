"""Lock-step with the arm state and the gripper in one JointState (robots/sim_panda_driver.yaml in lock-step): the
actor answers each frame from within that message's callback, once the fingers of the same message are in, rather
than at its next poll. The node is driven in-process by calling its callbacks (no executor), inside a private network
namespace with its own ROS_DOMAIN_ID (tests/ros_harness.py).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

from ros_harness import allocate_domain_id

DOMAIN_ID = allocate_domain_id()


def client() -> dict:
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from ros_harness import untrained_state_agent
    from std_msgs.msg import Bool

    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import write_policy_file
    from robot_rl.ros.nodes.actor_node import ActorNode
    from robot_rl.ros.convert import floats_to_msg, joint_state_to_msg
    from robot_rl.sim.robot import HOME_QPOS

    work = Path(tempfile.mkdtemp(prefix="ros-lockstep-joints-"))
    weights = write_policy_file(work / "policy.msgpack", weights_message(untrained_state_agent(), version=1))
    rclpy.init()
    actor = ActorNode(cli_args=["--ros-args", "-p", "robot:=sim_panda_driver", "-p", "mode:=lockstep",
                                "-p", "obs_mode:=state", "-p", "reset_service:=none", "-p", f"weights_path:={weights}",
                                "-p", "stream_transitions:=false"])
    published: list = []
    actor._arm_pub = types.SimpleNamespace(publish=published.append)
    names = [f"joint{i}" for i in range(1, 8)] + ["finger_joint1", "finger_joint2"]

    qdot = [0.1, -0.2, 0.15, 0.1, -0.1, 0.2, 0.05]

    def frame(stamp: float) -> None:
        actor._on_object_state(floats_to_msg([0.0] * 10))
        actor._on_joint_states(joint_state_to_msg(names, [*HOME_QPOS, 0.04, 0.04], [*qdot, 0.0, 0.0], stamp=stamp))

    summary = {}
    try:
        actor.runner.tick()  # idle -> starting (no reset call)
        frame(100.0)
        summary["after_first_frame"] = len(published)
        actor.inputs.reward(0.0)
        actor._on_success(Bool(data=False))
        summary["after_task_result"] = len(published)
        frame(100.1)
        summary["after_second_frame"] = len(published)
        summary["phase"] = actor.runner.phase
        # the derived twist is J(q) q' of the message's joint velocities (not a difference of wall-clock stamps)
        linear, angular = actor.link.cache._readings["tcp_twist"].value
        expected = actor.link.kinematics.twist(HOME_QPOS, qdot)
        summary["twist_error"] = float(max(abs(linear - expected[0]).max(), abs(angular - expected[1]).max()))
        summary["twist_speed"] = float(np.linalg.norm(expected[0]))
    finally:
        actor.destroy()
        rclpy.try_shutdown()
        shutil.rmtree(work, ignore_errors=True)
    return summary


def test_lockstep_steps_when_the_joint_state_completes_the_frame():
    from ros_harness import run_ros_script

    summary, stderr, _ = run_ros_script(__file__, "client", DOMAIN_ID, 120)
    assert summary["after_first_frame"] == 1, (summary, stderr[-2000:])  # the episode starts and commands at once
    assert summary["after_task_result"] == 1, summary  # the frame that answers the command is not in yet
    assert summary["after_second_frame"] == 2, summary  # answered inside the JointState callback, fingers included
    assert summary["phase"] == "running", summary
    assert summary["twist_speed"] > 0.01 and summary["twist_error"] < 1e-9, summary


if __name__ == "__main__":
    if sys.argv[1:] == ["client"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        print("RESULT " + json.dumps(client()))
