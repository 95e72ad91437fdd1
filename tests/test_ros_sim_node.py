"""The sim node: command handling without ROS, and end to end over ROS 2 in lock-step mode.

End to end: the test starts this file as a client script (``python test_ros_sim_node.py client``) in a private network
namespace (only ``lo``) where the kernel allows it, always with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and a
test-specific ROS_DOMAIN_ID. The client starts the sim node (``python -m robot_rl.sim.node --mode lockstep``, namespaced
with ``__ns:=/simtest``) in the same namespace, drives it, stops it with SIGTERM and prints a JSON summary. It waits
for frames as the actor does: a frame is complete when every stream carries the tcp_pose's stamp; the episode's first
one is the frame the reset's reply names (never the node's start-up frame, which may still be arriving), each
lock-step step's the next complete one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from robot_rl.sim.node_robot import CommandError, SimRobot

from ros_harness import allocate_domain_id

DEADLINE_S = 30.0
NAMESPACE = "/simtest"
IMAGE_SIZE = 64
STEPS_UP = 6
LIFT_M = 0.02


# --------------------------------------------------------------------------------------------- without ROS


@pytest.fixture(scope="module")
def sim_robot():
    robot = SimRobot("PickCube-v0", obs_mode="pixels", image_size=32)
    yield robot
    robot.close()


def test_target_pose_is_clipped_into_the_workspace(sim_robot):
    sim_robot.reset(seed=0)
    _, quat = sim_robot.tcp_pose()
    position, _ = sim_robot.set_target_pose([5.0, -5.0, -1.0], quat)
    np.testing.assert_allclose(position, [sim_robot.base.workspace_high[0], sim_robot.base.workspace_low[1],
                                          sim_robot.base.workspace_low[2]])
    np.testing.assert_allclose(sim_robot.base.target_pose()[0], position)


def test_bad_commands_are_rejected_and_the_target_held(sim_robot):
    sim_robot.reset(seed=0)
    before = sim_robot.base.target_pose()
    for position, quat in (([np.nan, 0.0, 0.2], [0, 1, 0, 0]), ([0.5, 0.0, 0.2], [0, 0, 0, 0]),
                           ([0.5, 0.0], [0, 1, 0, 0]), ([0.5, 0.0, 0.2], [np.inf, 1, 0, 0])):
        with pytest.raises(CommandError):
            sim_robot.set_target_pose(position, quat)
    for value in (float("nan"), "open", None):
        with pytest.raises(CommandError):
            sim_robot.set_gripper(value)
    after = sim_robot.base.target_pose()
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])
    sim_robot.step()
    assert np.isfinite(sim_robot.tcp_pose()[0]).all()


def test_gripper_command_maps_open_to_env_convention(sim_robot):
    sim_robot.reset(seed=0)
    assert sim_robot.set_gripper(0.0) == 0.0
    for _ in range(5):
        sim_robot.step()
    assert sim_robot.base.gripper_command == pytest.approx(1.0)  # env: +1 closed
    assert sim_robot.set_gripper(7.0) == 1.0
    sim_robot.step()
    assert sim_robot.base.gripper_command == pytest.approx(-1.0)


def test_imminent_failure_names_a_target_pressing_beside_the_hole(sim_robot):
    assert sim_robot.imminent_failure() == ""  # PickCube names none
    robot = SimRobot("PegInsert-v0", obs_mode="state")
    try:
        robot.reset(seed=1)
        peg = robot.base
        _, quat = robot.tcp_pose()
        to_tip = peg.peg_tip() - robot.tcp_pose()[0]  # the tip hangs below the TCP
        above = peg.hole_top() + [-0.0015, 0.0, 0.006] - to_tip
        robot.set_target_pose(above, quat)
        for _ in range(10):
            robot.step()
        assert robot.imminent_failure() == ""  # held 6 mm above the mouth
        robot.set_target_pose(above - [0.0, 0.0, 0.008], quat)  # sent 2 mm into the rim, 1.5 mm beside the hole
        assert robot.imminent_failure() == "pressing beside the hole"
        robot.set_target_pose(above + [0.0015, 0.0, 0.0], quat)  # over the hole first...
        for _ in range(10):
            robot.step()
        robot.set_target_pose(above + [0.0015, 0.0, -0.008], quat)  # ...then down: it goes in
        assert robot.imminent_failure() == ""
    finally:
        robot.close()


def test_the_reset_reply_names_its_frame_by_the_stamp_its_headers_carry():
    pytest.importorskip("rclpy")
    from robot_rl.actor.runner import frame_stamp_text, reset_frame_stamp
    from robot_rl.ros.convert import stamp_from_seconds, stamp_to_seconds

    for seconds in (0.0, 1.5, 1764355584.123456789, 1764355584.000000001, 1764355584.999999999):
        header = stamp_from_seconds(seconds)  # what the node's messages carry
        reply = "episode 3 reset with seed 0" + frame_stamp_text(header.sec, header.nanosec)
        assert reset_frame_stamp(reply) == stamp_to_seconds(header)  # equal, as the frame's own stamp compares
    for reply in ("episode 0 reset", "", "; frame stamp 12", "; frame stamp 12.5", "; frame stamp -1.000000000",
                  "; frame stamp 12.000000000 ", "; frame stamp 1e3.000000000"):
        assert reset_frame_stamp(reply) is None, reply


# --------------------------------------------------------------------------------------------- over ROS 2


def _client() -> int:
    """Start the sim node, drive it in lock-step, check what it publishes, stop it; print 'RESULT <json>'."""
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import Bool, Float32
    from std_srvs.srv import Trigger

    from robot_rl.actor.runner import reset_frame_stamp
    from robot_rl.ros import qos
    from robot_rl.ros.convert import image_from_msg, pose_from_msg, pose_to_msg, stamp_to_seconds
    from robot_rl.sim.env import RobotEnv

    summary: dict = {}
    sim = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.sim.node", "--task", "PickCube-v0", "--mode", "lockstep",
         "--image-size", str(IMAGE_SIZE), "--seed", "0", "--ros-args", "-r", f"__ns:={NAMESPACE}"])
    rclpy.init()
    node = rclpy.create_node("test_sim_client")
    latest: dict[str, object] = {}
    counts = {"reward": 0, "success": 0}
    tcp_stamps: list[float] = []  # every tcp_pose stamp received, in arrival order

    def keep(key):
        def on_message(msg) -> None:  # the newest reading by stamp, as the actor's SensorCache keeps it
            held = latest.get(key)
            if held is None or stamp_to_seconds(msg.header.stamp) >= stamp_to_seconds(held.header.stamp):
                latest[key] = msg
            if key == "tcp":
                tcp_stamps.append(stamp_to_seconds(msg.header.stamp))
        return on_message

    def count(key):
        return lambda msg: counts.__setitem__(key, counts[key] + 1)

    def topic(name: str) -> str:
        return NAMESPACE + name

    sensors = qos.qos_profile(qos.SENSORS)
    for key, msg_type, name in (("front", Image, qos.CAMERA_FRONT_IMAGE), ("wrist", Image, qos.CAMERA_WRIST_IMAGE),
                                ("joints", JointState, qos.JOINT_STATES), ("gripper", JointState, qos.GRIPPER_STATE),
                                ("tcp", PoseStamped, qos.TCP_POSE)):
        node.create_subscription(msg_type, topic(name), keep(key), sensors)
    events = qos.qos_profile(qos.EVENTS)
    node.create_subscription(Float32, topic(qos.TASK_REWARD), count("reward"), events)
    node.create_subscription(Bool, topic("/task/success"), count("success"), events)
    target_pub = node.create_publisher(PoseStamped, topic(qos.COMMAND_TARGET_POSE), qos.qos_profile(qos.COMMANDS))
    reset_client = node.create_client(Trigger, topic("/reset"))
    deadline = time.monotonic() + DEADLINE_S

    def spin_until(predicate, what: str) -> None:
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            if sim.poll() is not None:
                raise RuntimeError(f"sim node exited with {sim.returncode} while waiting for {what}")
            rclpy.spin_once(node, timeout_sec=0.05)

    def stamps() -> dict[str, float]:
        return {k: stamp_to_seconds(m.header.stamp) for k, m in latest.items()}

    def frame_stamp() -> float | None:
        """The actor's rule for a lock-step frame (robot_rl.actor.robot_io.RobotSensors.frame_stamp): the newest frame is
        complete when every sensor stream carries the tcp_pose's stamp; None while one does not."""
        held = stamps()
        if len(held) < 5 or any(stamp != held["tcp"] for stamp in held.values()):
            return None
        return held["tcp"]

    def wait_frame(newer_than: float, what: str, *, at_least: float = -float("inf")) -> float:
        """Wait for a complete frame stamped after `newer_than` and at or after `at_least` (as the actor waits: for
        the first frame of an episode, not older than the one the reset's reply names; for each lock-step step, newer
        than the last frame stepped on); return its stamp."""
        def fresh() -> bool:
            stamp = frame_stamp()
            return stamp is not None and stamp > newer_than and stamp >= at_least
        spin_until(fresh, what)
        return frame_stamp()

    def tcp() -> tuple[np.ndarray, np.ndarray]:
        return pose_from_msg(latest["tcp"])

    try:
        spin_until(reset_client.service_is_ready, "the reset service")
        spin_until(lambda: target_pub.get_subscription_count() >= 1, "the command subscription")
        future = reset_client.call_async(Trigger.Request())
        spin_until(future.done, "the reset response")
        summary["reset"] = {"success": future.result().success, "message": future.result().message}
        reset_stamp = reset_frame_stamp(future.result().message)  # the frame the reset published
        if reset_stamp is None:
            raise AssertionError(f"the reset reply names no frame: {future.result().message!r}")
        stamp = wait_frame(-float("inf"), "the reset's frame", at_least=reset_stamp)
        summary["reset_frame_is_the_replys"] = stamp == reset_stamp  # lock-step: nothing newer before a command

        images = {k: image_from_msg(latest[k]) for k in ("front", "wrist")}
        summary["image_shapes"] = {k: list(v.shape) for k, v in images.items()}
        summary["image_means"] = {k: float(v.mean()) for k, v in images.items()}
        summary["image_frames"] = {k: latest[k].header.frame_id for k in ("front", "wrist")}
        summary["image_encodings"] = {k: latest[k].encoding for k in ("front", "wrist")}
        joints = latest["joints"]
        summary["joint_names"] = list(joints.name)
        summary["joint_arrays"] = [len(joints.position), len(joints.velocity)]
        summary["joints_finite"] = bool(np.isfinite(np.asarray(joints.position)).all())
        summary["gripper_width"] = float(latest["gripper"].position[0])
        summary["tcp_frame"] = latest["tcp"].header.frame_id
        summary["stamps_equal"] = len(set(stamps().values())) == 1

        start_position, start_quat = tcp()
        target = start_position + np.array([0.0, 0.0, LIFT_M])
        for step in range(STEPS_UP):
            target_pub.publish(pose_to_msg(target, start_quat, stamp=time.time(), frame_id="base"))
            stamp = wait_frame(stamp, f"lock-step frame {step}")
        lifted, _ = tcp()
        summary["lift"] = (lifted - start_position).tolist()

        bad = pose_to_msg(target, start_quat, stamp=time.time(), frame_id="base")
        bad.pose.position.z = float("nan")
        target_pub.publish(bad)
        stamp = wait_frame(stamp, "the step after a NaN command")
        after_nan, _ = tcp()
        summary["after_nan_alive"] = sim.poll() is None
        summary["after_nan_moved"] = float(np.linalg.norm(after_nan - lifted))
        summary["after_nan_in_workspace"] = bool(
            np.all(after_nan >= RobotEnv.workspace_low - 0.01) and np.all(after_nan <= RobotEnv.workspace_high + 0.01))
        spin_until(lambda: counts["reward"] >= STEPS_UP + 1 and counts["success"] >= STEPS_UP + 1, "task messages")
        summary["task_counts"] = dict(counts)
        # lock-step: one frame per command after the reset's, each newer than the one before
        after_reset = [t for t in tcp_stamps if t > reset_stamp]
        summary["frames_after_reset"] = len(after_reset)
        summary["tcp_stamps_increasing"] = all(a < b for a, b in zip(tcp_stamps, tcp_stamps[1:]))
    except Exception as error:  # noqa: BLE001 - reported in the summary
        summary["error"] = repr(error)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        if sim.poll() is None:
            sim.send_signal(signal.SIGTERM)
        try:
            summary["sim_exit_code"] = sim.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sim.kill()
            sim.wait()
            summary["sim_exit_code"] = "killed after SIGTERM timeout"
    print("RESULT " + json.dumps(summary), flush=True)
    return 0


def test_sim_node_lockstep_end_to_end():
    pytest.importorskip("rclpy")
    from ros_harness import run_ros_script

    domain_id = allocate_domain_id()
    summary, stderr, returncode = run_ros_script(__file__, "client", domain_id, DEADLINE_S + 10)
    context = (summary, stderr[-3000:])
    assert "error" not in summary, context
    assert summary["reset"]["success"], context
    assert summary["reset_frame_is_the_replys"], context
    assert summary["image_shapes"] == {"front": [IMAGE_SIZE, IMAGE_SIZE, 3], "wrist": [IMAGE_SIZE, IMAGE_SIZE, 3]}
    assert min(summary["image_means"].values()) > 0, context
    assert summary["image_frames"] == {"front": "front_camera", "wrist": "wrist_camera"}
    assert summary["image_encodings"] == {"front": "rgb8", "wrist": "rgb8"}
    assert summary["joint_names"] == [f"joint{i}" for i in range(1, 8)]
    assert summary["joint_arrays"] == [7, 7] and summary["joints_finite"]
    assert 0.0 < summary["gripper_width"] <= 0.081, context
    assert summary["tcp_frame"] == "base"
    assert summary["stamps_equal"], context
    dx, dy, dz = summary["lift"]
    assert abs(dz - LIFT_M) < 0.006 and abs(dx) < 0.005 and abs(dy) < 0.005, context
    assert summary["after_nan_alive"] and summary["after_nan_in_workspace"], context
    assert summary["after_nan_moved"] < 0.006, context  # the last target was held
    assert summary["frames_after_reset"] == STEPS_UP + 1 and summary["tcp_stamps_increasing"], context
    assert "rejected target pose command" in stderr, stderr[-3000:]
    assert summary["sim_exit_code"] == 0, context
    assert returncode == 0, stderr[-3000:]


if __name__ == "__main__":
    sys.exit({"client": _client}[sys.argv[1]]())
