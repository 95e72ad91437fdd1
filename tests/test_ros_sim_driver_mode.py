"""The sim node in "foreign driver" mode (robots/sim_panda_driver.yaml): what it publishes and accepts, like a
RealSense / usb_cam camera driver and a ros2_control arm.

Without ROS: the robot file, forward kinematics of joint commands, command parsing, non-square rendering.
Over ROS 2: this file runs as a client script (``python test_ros_sim_driver_mode.py client``) in a private network
namespace (only ``lo``), ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and a test-specific ROS_DOMAIN_ID. It starts two sim
nodes with the driver file, one as shipped (realtime) and one with ``--mode lockstep`` (the mode parameter given
explicitly overrides the file's), checks their streams and QoS, drives them with JointTrajectory commands (good and
malformed), calls the reset service, stops them with SIGTERM and prints a JSON summary.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from robot_rl.actor.robot_config import RobotConfigError, load_robot_config, robot_config_from_dict
from robot_rl.sim.node import DriverProfile
from robot_rl.sim.node_robot import CommandError, SimRobot, rgb_to_encoding

from ros_harness import allocate_domain_id

DRIVER_FILE = "robots/sim_panda_driver.yaml"
DEADLINE_S = 45.0
REALTIME_NS = "/driver"
LOCKSTEP_NS = "/driver_lockstep"
ARM_JOINTS = [f"joint{i}" for i in range(1, 8)]
FINGER_JOINTS = ["finger_joint1", "finger_joint2"]
# A joint offset from the start configuration whose forward kinematics lies inside the workspace (no clipping).
JOINT_OFFSET = np.array([0.2, 0.1, 0.0, 0.15, 0.0, -0.05, 0.1])
TRAJECTORY_TOPIC = "joint_trajectory_controller/joint_trajectory"


# --------------------------------------------------------------------------------------------- without ROS


@pytest.fixture(scope="module")
def sim_robot():
    robot = SimRobot("PickCube-v0", obs_mode="state")
    yield robot
    robot.close()


@pytest.fixture(scope="module")
def driver_robot():
    return load_robot_config(DRIVER_FILE)


def test_driver_file_describes_a_foreign_driver_with_the_sim_limits(driver_robot):
    profile = DriverProfile.from_robot(driver_robot, obs_mode="pixels", image_size=64)
    front, wrist = profile.cameras
    assert (front.sim_camera, front.topic, front.message, front.encoding, front.width, front.height,
            front.reliability, front.frame_id) == (
        "front", "camera/front/image_raw", "Image", "bgr8", 640, 480, "best_effort", "front_camera")
    assert (wrist.topic, wrist.message, wrist.encoding, wrist.reliability, wrist.frame_id) == (
        "camera/wrist/image_raw/compressed", "CompressedImage", "jpeg", "best_effort", "wrist_camera")
    assert profile.tcp_pose_topic == profile.twist_topic == profile.gripper_state_topic == ""
    assert profile.arm_state == "joint_states" and profile.finger_joint_names == tuple(FINGER_JOINTS)
    assert profile.command_interface == "joint_trajectory" and profile.joint_trajectory_topic == TRAJECTORY_TOPIC
    assert profile.mode == "realtime" and driver_robot.control_rate_hz == 10
    assert driver_robot.model_path().name == "sim_panda.xml"
    native = load_robot_config("sim_panda")
    limits = ("control_rate_hz", "max_episode_steps", "max_sensor_age_s", "base_frame", "workspace_low",
              "workspace_high", "max_translation", "max_rotation", "step_bound", "nominal_quat", "rotation_low",
              "rotation_high", "home_position", "home_quat", "home_gripper")
    assert {k: getattr(driver_robot, k) for k in limits} == {k: getattr(native, k) for k in limits}


def test_a_lab_camera_is_rendered_from_its_sim_camera_at_its_mount(driver_robot):
    mount = {"position": [1.0, 0.0, 0.6], "quat": [0.7, 0.0, 0.7, 0.0]}
    robot = _robot_with(driver_robot, cameras={"cam_high": {"topic": "cam_high/image_raw", "width": 320,
                                                            "height": 240, "sim_camera": "front", "sim_mount": mount}})
    (stream,) = DriverProfile.from_robot(robot, obs_mode="pixels").cameras
    assert (stream.sim_camera, stream.topic, stream.width, stream.frame_id) == ("front", "cam_high/image_raw", 320,
                                                                                "cam_high_camera")
    assert list(stream.mount.position) == mount["position"]


def test_obs_mode_state_serves_no_cameras(driver_robot):
    assert DriverProfile.from_robot(driver_robot, obs_mode="state").cameras == ()


def _robot_with(driver_robot, **changes):
    data = driver_robot.to_json()
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            data[section] = {**data[section], field: value}
        else:
            data[section] = value
    return robot_config_from_dict(data, path="robots/x.yaml")


@pytest.mark.parametrize("changes, key", [
    ({"cameras": {"top": {"topic": "camera/top/image_raw"}}}, "cameras.top"),
    ({"cameras": {"front": {"topic": "c", "encoding": "yuv422"}}}, "cameras.front.encoding"),
    ({"cameras": {"front": {"topic": "c", "type": "CompressedImage", "encoding": "webp"}}}, "cameras.front.encoding"),
    ({"cameras": {"front": {"topic": "c", "width": 640}}}, "cameras.front"),
    ({"arm__joint_names": ARM_JOINTS[:6]}, "arm.joint_names"),
    ({"gripper__finger_joints": ["finger_joint1"]}, "gripper.finger_joints"),
])
def test_what_the_sim_cannot_serve_is_one_error_naming_the_key(driver_robot, changes, key):
    robot = _robot_with(driver_robot, **changes)
    with pytest.raises(RobotConfigError) as raised:
        DriverProfile.from_robot(robot, obs_mode="pixels")
    message = str(raised.value)
    assert message.startswith(f"robots/x.yaml: {key}") and "\n" not in message, message


def test_a_tcp_pose_arm_gets_the_pose_topic_and_the_sims_joint_names(driver_robot):
    robot = _robot_with(driver_robot, arm__state="tcp_pose", arm__joint_names=[], arm__model="", arm__twist="topic",
                        command__interface="pose", gripper__state="topic")
    profile = DriverProfile.from_robot(robot)
    assert profile.arm_joint_names == tuple(ARM_JOINTS) and profile.finger_joint_names == ()
    assert (profile.tcp_pose_topic, profile.twist_topic, profile.gripper_state_topic) == (
        "tcp_pose", "tcp_twist", "gripper/state")
    assert profile.command_interface == "pose" and profile.pose_topic == "command/target_pose"


def test_forward_kinematics_matches_the_simulated_tcp(sim_robot):
    sim_robot.reset(seed=0)
    position, quat = sim_robot.forward_kinematics(sim_robot.joint_positions())
    tcp_position, tcp_quat = sim_robot.tcp_pose()
    np.testing.assert_allclose(position, tcp_position, atol=1e-9)
    np.testing.assert_allclose(quat, tcp_quat, atol=1e-9)


def test_the_driver_files_model_has_the_sims_kinematics(sim_robot, driver_robot):
    """What an actor computes from the published joint_states (the file's arm.model) is the sim's TCP."""
    from robot_rl.core.kinematics import ArmKinematics

    arm = ArmKinematics.from_file(driver_robot.model_path(), driver_robot.arm.joint_names, "tcp")
    rng = np.random.default_rng(0)
    low, high = sim_robot.joint_limits[:, 0], sim_robot.joint_limits[:, 1]
    for q in rng.uniform(low, high, size=(5, 7)):
        position, quat = arm.forward(q)
        sim_position, sim_quat = sim_robot.forward_kinematics(q)
        np.testing.assert_allclose(position, sim_position, atol=1e-6)
        assert abs(float(np.dot(quat, sim_quat))) == pytest.approx(1.0, abs=1e-6)


def test_joint_target_drives_the_tcp_to_its_forward_kinematics(sim_robot):
    sim_robot.reset(seed=0)
    start = sim_robot.tcp_pose()[0]
    target_q = sim_robot.joint_positions() + JOINT_OFFSET
    goal, _ = sim_robot.forward_kinematics(target_q)
    applied, _ = sim_robot.set_target_joints(target_q)
    np.testing.assert_allclose(applied, goal)  # inside the workspace: not clipped
    assert np.linalg.norm(goal - start) > 0.02
    for _ in range(10):
        sim_robot.step()
    assert np.linalg.norm(sim_robot.tcp_pose()[0] - goal) < 0.003


def test_joint_target_outside_the_workspace_is_clipped_like_a_pose(sim_robot):
    sim_robot.reset(seed=0)
    far = sim_robot.joint_positions() + np.array([0.9, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # swings the TCP sideways
    goal, _ = sim_robot.forward_kinematics(far)
    applied, _ = sim_robot.set_target_joints(far)
    assert goal[1] > sim_robot.base.workspace_high[1]
    assert applied[1] == pytest.approx(sim_robot.base.workspace_high[1])


def test_bad_joint_commands_are_rejected_and_the_target_held(sim_robot, driver_robot):
    sim_robot.reset(seed=0)
    profile = DriverProfile.from_robot(driver_robot)
    q = sim_robot.joint_positions()
    before = sim_robot.base.target_pose()
    for names, positions, reason in (
            (ARM_JOINTS[:6] + ["elbow"], q, "unknown joint 'elbow'"),
            (ARM_JOINTS[:6], q[:6], "lacks joint 'joint7'"),
            (ARM_JOINTS + ["joint1"], [*q, 0.0], "twice"),
            (ARM_JOINTS, q[:6], "7 joint names and 6 positions"),
            (ARM_JOINTS, [*q[:6], np.nan], "not finite"),
            ([], [], "lacks joint 'joint1'")):
        with pytest.raises(CommandError, match=reason):
            profile.arm_positions(names, positions)
    outside = q.copy()
    outside[3] = 0.5  # joint4's upper limit is -0.0698 rad
    with pytest.raises(CommandError, match="joint4 = 0.5 rad is outside its limits"):
        sim_robot.set_target_joints(outside)
    with pytest.raises(CommandError, match="not finite"):
        sim_robot.set_target_joints([np.inf] * 7)
    after = sim_robot.base.target_pose()
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])


def test_joint_names_may_come_in_any_order(driver_robot):
    profile = DriverProfile.from_robot(driver_robot)
    values = np.arange(7, dtype=float) / 10
    order = [6, 2, 0, 5, 1, 4, 3]
    np.testing.assert_array_equal(profile.arm_positions([ARM_JOINTS[i] for i in order], values[order]), values)


def test_gripper_trajectory_command_gives_the_opening(driver_robot):
    robot = _robot_with(driver_robot, gripper__command="JointTrajectory",
                        gripper__command_joints=["finger_joint2", "finger_joint1"], gripper__opening_per_unit=2.0)
    profile = DriverProfile.from_robot(robot)
    assert profile.gripper_opening(["finger_joint1", "finger_joint2"], [0.01, 0.01]) == pytest.approx(0.04)
    with pytest.raises(CommandError, match="unknown joint 'joint1'"):
        profile.gripper_opening(["joint1"], [0.0])


def test_cameras_render_at_any_size_in_any_encoding(sim_robot):
    sim_robot.reset(seed=0)
    rgb = sim_robot.render("front", 640, 480)
    assert rgb.shape == (480, 640, 3) and rgb.dtype == np.uint8 and rgb.mean() > 0
    np.testing.assert_array_equal(rgb_to_encoding(rgb, "bgr8"), rgb[..., ::-1])
    assert rgb_to_encoding(rgb, "bgra8").shape == (480, 640, 4)
    mono = rgb_to_encoding(rgb, "mono8")
    assert mono.shape == (480, 640) and rgb_to_encoding(rgb, "mono16").max() == int(mono.max()) * 257
    assert sim_robot.render("wrist", 320, 240).shape == (240, 320, 3)
    assert sim_robot.render("front", 1280, 720).shape == (720, 1280, 3)  # beyond the scene's 640 x 640 buffer


# --------------------------------------------------------------------------------------------- over ROS 2


def _red_and_blue_pixels(bgr: np.ndarray) -> tuple[int, int]:
    """Pixels that look red / blue if `bgr` is in bgr order (the PickCube cube is red; nothing in the scene is blue)."""
    b, g, r = (bgr[..., i].astype(int) for i in range(3))
    red = int(((r > 120) & (r > b + 60) & (r > g + 60)).sum())
    blue = int(((b > 120) & (b > r + 60) & (b > g + 60)).sum())
    return red, blue


def _client() -> int:
    """Start two driver-mode sim nodes, check and drive them, stop them; print 'RESULT <json>'."""
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import cv2
    import rclpy
    from geometry_msgs.msg import PoseStamped, TwistStamped
    from rclpy.qos import ReliabilityPolicy
    from sensor_msgs.msg import CompressedImage, Image, JointState
    from std_srvs.srv import Trigger
    from builtin_interfaces.msg import Duration
    from rcl_interfaces.msg import Log
    from rclpy.qos import QoSProfile
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from robot_rl.ros import qos
    from robot_rl.ros.convert import image_from_msg, stamp_to_seconds
    from robot_rl.actor.runner import reset_frame_stamp

    summary: dict = {}
    nodes = {
        "realtime": subprocess.Popen([sys.executable, "-m", "robot_rl.sim.node", "--robot", DRIVER_FILE, "--seed", "0",
                                      "--ros-args", "-r", f"__ns:={REALTIME_NS}"]),
        "lockstep": subprocess.Popen([sys.executable, "-m", "robot_rl.sim.node", "--robot", DRIVER_FILE, "--seed", "0",
                                      "--mode", "lockstep", "--ros-args", "-r", f"__ns:={LOCKSTEP_NS}"]),
    }
    kinematics = SimRobot("PickCube-v0", obs_mode="state")  # forward kinematics of the published joints
    rclpy.init()
    node = rclpy.create_node("test_driver_client")
    best_effort, reliable = qos.sensor_qos("best_effort"), qos.sensor_qos("reliable")
    received: dict[str, list] = {}

    def keep(key: str):
        received[key] = []
        return lambda msg: received[key].append(msg)

    def subscribe(msg_type, ns: str, name: str, key: str, profile=best_effort):
        node.create_subscription(msg_type, f"{ns}/{name}", keep(key), profile)

    subscribe(Image, REALTIME_NS, "camera/front/image_raw", "front")
    subscribe(Image, REALTIME_NS, "camera/front/image_raw", "front_reliable", reliable)
    subscribe(CompressedImage, REALTIME_NS, "camera/wrist/image_raw/compressed", "wrist")
    subscribe(JointState, REALTIME_NS, "joint_states", "joints")
    subscribe(PoseStamped, REALTIME_NS, "tcp_pose", "tcp_pose")
    subscribe(TwistStamped, REALTIME_NS, "tcp_twist", "tcp_twist")
    subscribe(JointState, REALTIME_NS, "gripper/state", "gripper_state")
    subscribe(JointState, LOCKSTEP_NS, "joint_states", "lockstep_joints")
    # the sim nodes' log lines (rosout): a rejected command's line, to send the next one once it is out
    rejection_logs: list = []
    node.create_subscription(Log, "/rosout", lambda m: rejection_logs.append(m)
                             if "rejected joint trajectory command" in m.msg else None,
                             QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
    commands = qos.qos_profile(qos.COMMANDS)
    trajectory_pubs = {ns: node.create_publisher(JointTrajectory, f"{ns}/{TRAJECTORY_TOPIC}", commands)
                       for ns in (REALTIME_NS, LOCKSTEP_NS)}
    reset_client = node.create_client(Trigger, f"{REALTIME_NS}/reset")
    deadline = time.monotonic() + DEADLINE_S

    def spin_until(predicate, what: str) -> None:
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            for name, process in nodes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} sim node exited with {process.returncode} while waiting for {what}")
            rclpy.spin_once(node, timeout_sec=0.02)

    def spin_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        spin_until(lambda: time.monotonic() > end, f"{seconds} s of messages")

    def joints(key: str = "joints") -> tuple[np.ndarray, JointState]:
        msg = received[key][-1]
        return np.asarray(msg.position)[:7], msg

    def tcp_from_joints(key: str = "joints") -> np.ndarray:
        return kinematics.forward_kinematics(joints(key)[0])[0]

    def trajectory(ns: str, names, positions, points: bool = True) -> None:
        """A one-point JointTrajectory as a ros2_control client sends it (built by hand: it may be malformed)."""
        point = JointTrajectoryPoint(positions=[float(p) for p in positions], time_from_start=Duration(nanosec=10**8))
        trajectory_pubs[ns].publish(JointTrajectory(joint_names=list(names), points=[point] if points else []))

    try:
        spin_until(lambda: all(len(received[k]) >= 5 for k in ("front", "wrist", "joints")), "the driver streams")
        spin_for(0.5)
        # ----- streams, types, QoS
        front = received["front"][-1]
        image = image_from_msg(front)
        summary["front"] = {"encoding": front.encoding, "shape": list(image.shape), "frame": front.header.frame_id,
                            "red_blue": _red_and_blue_pixels(image)}
        summary["front_reliable_received"] = len(received["front_reliable"])
        summary["front_best_effort_received"] = len(received["front"])
        publishers = node.get_publishers_info_by_topic(f"{REALTIME_NS}/camera/front/image_raw")
        summary["front_publisher_best_effort"] = [p.qos_profile.reliability == ReliabilityPolicy.BEST_EFFORT
                                                  for p in publishers]
        wrist = received["wrist"][-1]
        decoded = cv2.imdecode(np.frombuffer(bytes(wrist.data), np.uint8), cv2.IMREAD_COLOR)
        summary["wrist"] = {"format": wrist.format, "shape": None if decoded is None else list(decoded.shape),
                            "jpeg_magic": bytes(wrist.data[:2]).hex(), "frame": wrist.header.frame_id,
                            "red_blue": None if decoded is None else _red_and_blue_pixels(decoded)}
        q_start, state = joints()
        summary["joint_names"] = list(state.name)
        summary["joint_arrays"] = [len(state.position), len(state.velocity)]
        summary["finger_opening"] = float(sum(state.position[7:]))
        # realtime: it steps on its own clock (no command sent yet), each step's message stamped later than the last
        stamps = [stamp_to_seconds(m.header.stamp) for m in received["joints"]]
        summary["joint_messages_before_commands"] = len(stamps)
        summary["joint_stamps_increase"] = all(a < b for a, b in zip(stamps, stamps[1:]))
        summary["absent_topics"] = {
            name: {"messages": len(received[name]),
                   "publishers": node.count_publishers(f"{REALTIME_NS}/{name.replace('_state', '/state')}")}
            for name in ("tcp_pose", "tcp_twist", "gripper_state")}

        # ----- a JointTrajectory command moves the TCP toward its forward kinematics
        spin_until(lambda: trajectory_pubs[REALTIME_NS].get_subscription_count() >= 1, "the trajectory subscriber")
        target_q = q_start + JOINT_OFFSET
        goal = kinematics.forward_kinematics(target_q)[0]
        start_error = float(np.linalg.norm(tcp_from_joints() - goal))
        shuffled = [6, 0, 5, 1, 4, 2, 3]  # joint names in any order
        trajectory(REALTIME_NS, [ARM_JOINTS[i] for i in shuffled], target_q[shuffled])
        errors = []
        for _ in range(8):
            count = len(received["joints"])
            spin_until(lambda: len(received["joints"]) > count, "joint states after the command")
            errors.append(float(np.linalg.norm(tcp_from_joints() - goal)))
        summary["tcp_error"] = {"start": start_error, "steps": errors}

        # ----- malformed commands: rejected with a log line each, target held. The line is throttled to one a second
        # (the node's system clock): each command goes once the last line is out and a second has passed since.
        for names, positions, points in ((ARM_JOINTS, [*target_q[:6], float("nan")], True),
                                         ([*ARM_JOINTS[:6], "elbow"], target_q, True),
                                         (ARM_JOINTS, q_start, False)):
            logged = len(rejection_logs)
            if rejection_logs:
                last = stamp_to_seconds(rejection_logs[-1].stamp)
                spin_until(lambda: time.time() > last + 1.0, "a second after the last rejection line")
            trajectory(REALTIME_NS, names, positions, points)
            spin_until(lambda: len(rejection_logs) > logged, "the rejection's log line")
        summary["after_malformed_error"] = float(np.linalg.norm(tcp_from_joints() - goal))
        summary["alive_after_malformed"] = nodes["realtime"].poll() is None

        # ----- lock-step (mode given explicitly): one trajectory command, one step
        lockstep_reset = node.create_client(Trigger, f"{LOCKSTEP_NS}/reset")
        spin_until(lambda: lockstep_reset.service_is_ready()
                   and trajectory_pubs[LOCKSTEP_NS].get_subscription_count() >= 1, "the lock-step node")
        # Its start-up frame may have gone out before this client matched, or may still be in flight: reset it and
        # wait for the frame the reset names (or a later one), so no reset or start-up frame lands in the idle window.
        future = lockstep_reset.call_async(Trigger.Request())
        spin_until(future.done, "the lock-step reset")
        lock_reset_stamp = reset_frame_stamp(future.result().message)
        if lock_reset_stamp is None:
            raise RuntimeError(f"the lock-step reset reply names no frame: {future.result().message!r}")
        spin_until(lambda: any(stamp_to_seconds(m.header.stamp) >= lock_reset_stamp
                               for m in received["lockstep_joints"]), "the lock-step reset's frame")
        idle = len(received["lockstep_joints"])
        spin_for(0.5)
        summary["lockstep_idle_messages"] = len(received["lockstep_joints"]) - idle
        q_lock = joints("lockstep_joints")[0]
        lock_goal = kinematics.forward_kinematics(q_lock + JOINT_OFFSET)[0]
        lock_errors = [float(np.linalg.norm(tcp_from_joints("lockstep_joints") - lock_goal))]
        for step in range(3):
            count = len(received["lockstep_joints"])
            trajectory(LOCKSTEP_NS, ARM_JOINTS, q_lock + JOINT_OFFSET)
            spin_until(lambda: len(received["lockstep_joints"]) > count, f"lock-step step {step}")
            spin_for(0.2)
            lock_errors.append(float(np.linalg.norm(tcp_from_joints("lockstep_joints") - lock_goal)))
        summary["lockstep_steps"] = len(received["lockstep_joints"]) - idle
        summary["lockstep_errors"] = lock_errors

        # ----- reset service: a new episode from a start pose, away from the commanded goal
        spin_until(reset_client.service_is_ready, "the reset service")
        future = reset_client.call_async(Trigger.Request())
        spin_until(future.done, "the reset response")
        summary["reset"] = {"success": future.result().success, "message": future.result().message}
        reset_stamp = reset_frame_stamp(future.result().message)  # the frame the reset published; later ones follow it
        if reset_stamp is None:
            raise RuntimeError(f"the reset reply names no frame: {future.result().message!r}")
        spin_until(lambda: stamp_to_seconds(received["joints"][-1].header.stamp) >= reset_stamp, "joints after reset")
        summary["after_reset_error"] = float(np.linalg.norm(tcp_from_joints() - goal))
    except Exception as error:  # noqa: BLE001 - reported in the summary
        summary["error"] = repr(error)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        kinematics.close()
        summary["exit_codes"] = {}
        for name, process in nodes.items():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                summary["exit_codes"][name] = process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                summary["exit_codes"][name] = "killed after SIGTERM timeout"
    print("RESULT " + json.dumps(summary), flush=True)
    return 0


def test_sim_node_publishes_and_accepts_like_a_real_driver():
    pytest.importorskip("rclpy")
    pytest.importorskip("trajectory_msgs")
    from ros_harness import run_ros_script

    domain_id = allocate_domain_id()
    summary, stderr, returncode = run_ros_script(__file__, "client", domain_id, DEADLINE_S + 15)
    context = (summary, stderr[-4000:])
    assert "error" not in summary, context
    # cameras: 640x480 bgr8 best-effort (a reliable subscriber does not match), JPEG CompressedImage
    assert summary["front"]["encoding"] == "bgr8" and summary["front"]["shape"] == [480, 640, 3], context
    assert summary["front"]["frame"] == "front_camera"
    red, blue = summary["front"]["red_blue"]
    assert red > 200 and blue < 20, context  # the red cube is red in bgr order
    assert summary["front_publisher_best_effort"] == [True], context
    assert summary["front_best_effort_received"] >= 5 and summary["front_reliable_received"] == 0, context
    assert "jpeg" in summary["wrist"]["format"] and summary["wrist"]["jpeg_magic"] == "ffd8", context
    assert summary["wrist"]["shape"] == [480, 640, 3] and summary["wrist"]["frame"] == "wrist_camera", context
    assert summary["wrist"]["red_blue"][0] > 200 and summary["wrist"]["red_blue"][1] < 20, context
    # arm and gripper state: joint_states only
    assert summary["joint_names"] == ARM_JOINTS + FINGER_JOINTS and summary["joint_arrays"] == [9, 9], context
    assert 0.07 < summary["finger_opening"] <= 0.081, context  # open at reset
    # realtime: it publishes without commands, each step stamped after the last (its rate: bench/, not a test)
    assert summary["joint_messages_before_commands"] >= 5 and summary["joint_stamps_increase"], context
    assert summary["absent_topics"] == {name: {"messages": 0, "publishers": 0}
                                        for name in ("tcp_pose", "tcp_twist", "gripper_state")}, context
    # a JointTrajectory command drives the TCP to the forward kinematics of its joints
    error = summary["tcp_error"]
    assert error["start"] > 0.02 and error["steps"][-1] < 0.005, context
    # malformed commands: rejected with a log line each, the node alive, the target held
    assert summary["alive_after_malformed"] and summary["after_malformed_error"] < 0.005, context
    rejections = [line for line in stderr.splitlines() if "rejected joint trajectory command" in line]
    assert len(rejections) == 3, stderr[-4000:]
    assert "finite" in rejections[0] and "unknown joint 'elbow'" in rejections[1], rejections
    assert "no points" in rejections[2], rejections
    # lock-step (mode given explicitly): no step without a command, one step per command
    assert summary["lockstep_idle_messages"] == 0 and summary["lockstep_steps"] == 3, context
    assert summary["lockstep_errors"][-1] < 0.5 * summary["lockstep_errors"][0], context
    # reset service
    assert summary["reset"]["success"] and summary["reset"]["message"].startswith("episode 0 reset"), context
    assert summary["after_reset_error"] > 0.01, context
    assert summary["exit_codes"] == {"realtime": 0, "lockstep": 0}, context
    assert returncode == 0, stderr[-4000:]


def test_an_unusable_robot_file_is_one_line_and_exit_status_2(tmp_path, driver_robot):
    pytest.importorskip("rclpy")
    from ros_harness import REPO_ROOT, private_network_or_skip

    from robot_rl.ros.net.env import ros_environment

    foreign = tmp_path / "top_camera.yaml"
    model = Path(__file__).resolve().parent.parent / "robots" / "models" / "sim_panda.xml"
    foreign.write_text(open(DRIVER_FILE).read().replace("  front:\n", "  top:\n")
                       .replace("model: models/sim_panda.xml", f"model: {model}"))
    cases = {"missing": (str(tmp_path / "nowhere.yaml"), "nowhere.yaml: cannot read it"),
             "foreign_camera": (str(foreign), f'{foreign}: cameras.top: no sim camera: add "sim_camera: front"')}
    env = ros_environment(domain_id=allocate_domain_id())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH", "")) if p)
    processes = {name: subprocess.Popen(
        private_network_or_skip([sys.executable, "-m", "robot_rl.sim.node", "--ros-args", "-p", f"robot:={path}"]),
        env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for name, (path, _) in cases.items()}
    for name, process in processes.items():
        output, _ = process.communicate(timeout=60)
        lines = [line for line in output.splitlines() if line.strip()]
        assert process.returncode == 2, output
        assert len(lines) == 1 and "parameter 'robot'" in lines[0] and cases[name][1] in lines[0], output


if __name__ == "__main__":
    sys.exit({"client": _client}[sys.argv[1]]())
