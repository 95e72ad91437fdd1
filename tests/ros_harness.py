"""Runs a ROS 2 test script in a private network namespace with its own domain id and collects its RESULT line;
skips (with the reason) where no private network namespace can be made.

What a ROS test may assert about time: nothing but generous deadlines for liveness ("it ended", "it arrived"); never
a count of real-time events, a rate or a latency bound. Those are figures for a `bench/` script, printed against a
baseline measured in the same run (the whole rule: tests/conftest.py)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ROS domain ids 1-232 (Fast DDS's ports cap them at 232), split between the two pytest-xdist workers; each allocation
# takes the next one of this process's half.
_DOMAIN_HALF = 116
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
_DOMAIN_BASE = 1 + _DOMAIN_HALF * (int(_WORKER[2:]) % 2 if _WORKER[2:].isdigit() else 0)
_domain_ids = itertools.count()


def allocate_domain_id() -> int:
    """A ROS_DOMAIN_ID that no other allocation of this test session has: the one allocator for every test and
    bench run a test starts (a module's ``DOMAIN_ID = allocate_domain_id()``, or one call per graph a test starts).

    Each test's graph also runs in its own network, IPC and /dev/shm namespaces (:func:`private_network_or_skip`),
    so ids are a second fence, not the only one. Calls cycle through 116 ids per worker.
    """
    return _DOMAIN_BASE + next(_domain_ids) % _DOMAIN_HALF


def private_network_or_skip(argv: list[str]) -> list[str]:
    """`argv` wrapped to run in a private network namespace (only ``lo``); the test is skipped, with the reason,
    where no namespace can be made: ROS tests never run on the host's network."""
    from robot_rl.ros.net.env import RosEnvironmentError, private_network_command

    try:
        return private_network_command(argv)
    except RosEnvironmentError as error:
        pytest.skip(str(error))


def run_ros_script(script: str, mode: str, domain_id: int, timeout: float, args: Sequence[str] = ()
                   ) -> tuple[dict, str, int]:
    """Run `python script mode *args` on loopback only; returns (the last `RESULT {json}` line, stderr, return code).

    The script and every process it starts share one session, killed as a whole on a time-out.
    """
    from robot_rl.ros.net.env import ros_environment

    env = ros_environment(domain_id=domain_id)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH", "")) if p)
    command = private_network_or_skip([sys.executable, os.path.abspath(script), mode, *args])
    process = subprocess.Popen(command, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{os.path.basename(script)} {mode} timed out; stdout={stdout!r} stderr={stderr[-3000:]!r}")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    results = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert results, f"no result; rc={process.returncode} stdout={stdout!r} stderr={stderr[-3000:]!r}"
    return json.loads(results[-1][len("RESULT "):]), stderr, process.returncode


def untrained_state_agent():
    """An untrained SAC agent for PickCube-v0's state observations (policy files and weights messages in tests)."""
    from robot_rl.agents.sac import SACAgent
    from robot_rl.sim.loop import make_env
    from robot_rl.training.config import TrainConfig
    from robot_rl.core.types import ObservationSpec

    env = make_env("PickCube-v0", obs_mode="state")
    spec = ObservationSpec.from_space(env.observation_space)
    action_dim = env.action_space.shape[0]
    env.close()
    return SACAgent.create(0, spec, action_dim, TrainConfig().sac)


THIRD_PARTY_CAMERAS = {"scene": "front", "hand": "wrist"}
"""A third-party driver's camera names (none of them the sim's) -> the sim camera a stand-in renders each from."""


def third_party_robot_file(path, *, sim: bool, max_episode_steps: int = 80, size=(640, 480)):
    """A robot file at `path` like a third-party driver's: sim_panda_driver's arm, gripper, commands and reset, two
    bgr8 best-effort cameras named `scene` and `hand` (not the sim's names), `max_episode_steps` (not a sim task's).
    `sim: true` is the copy the sim node serves as a stand-in for the drivers; `sim: false` the robot's own."""
    from pathlib import Path

    import yaml

    from robot_rl.actor.robot_config import load_robot_config

    source = Path(load_robot_config("sim_panda_driver").path)
    data = yaml.safe_load(source.read_text())
    data.update(name="third_party_arm", sim=bool(sim), max_episode_steps=int(max_episode_steps))
    data["arm"]["model"] = str((source.parent / data["arm"]["model"]).resolve())
    width, height = size
    data["cameras"] = {name: {"topic": f"{name}/color/image_raw", "type": "Image", "qos": "best_effort",
                              "fit": "crop", "width": width, "height": height, "encoding": "bgr8", "rate_hz": 10,
                              "sim_camera": sim_camera} for name, sim_camera in THIRD_PARTY_CAMERAS.items()}
    path = Path(path)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class StandInSensors:
    """What a lock-step sim publishes for an actor with state observations (tcp pose and twist, gripper, object
    state, then the step's reward and success), without a sim: publishers under `node`'s namespace."""

    def __init__(self, node):
        from geometry_msgs.msg import PoseStamped, TwistStamped
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Bool, Float32, Float32MultiArray

        from robot_rl.ros import qos

        sensors, events = qos.qos_profile(qos.SENSORS), qos.qos_profile(qos.EVENTS)
        self._pose = node.create_publisher(PoseStamped, "tcp_pose", sensors)
        self._twist = node.create_publisher(TwistStamped, "tcp_twist", sensors)
        self._gripper = node.create_publisher(JointState, "gripper/state", sensors)
        self._object = node.create_publisher(Float32MultiArray, "sim/object_state", sensors)
        self._reward = node.create_publisher(Float32, "task/reward", events)
        self._success = node.create_publisher(Bool, "task/success", events)
        self._Float32, self._Bool = Float32, Bool

    def frame(self, stamp: float, position=(0.45, 0.0, 0.2)) -> None:
        """One sensor frame; `tcp_pose` last, as the sim node publishes it."""
        import numpy as np

        from robot_rl.ros.convert import floats_to_msg, joint_state_to_msg, pose_to_msg, twist_to_msg

        self._object.publish(floats_to_msg(np.zeros(10, np.float32)))
        self._gripper.publish(joint_state_to_msg(("gripper",), [0.08], [0.0], stamp=stamp))
        self._twist.publish(twist_to_msg(np.zeros(3), np.zeros(3), stamp=stamp, frame_id="base"))
        self._pose.publish(pose_to_msg(position, (0.0, 1.0, 0.0, 0.0), stamp=stamp, frame_id="base"))

    def task_result(self, reward: float = 0.0, success: bool = False) -> None:
        """The reward and success of the step just taken (published before the step's frame)."""
        self._reward.publish(self._Float32(data=float(reward)))
        self._success.publish(self._Bool(data=bool(success)))
