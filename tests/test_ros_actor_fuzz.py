"""No message can crash the actor: a pixel policy on 640x480 frames and a fuzz of malformed messages on every topic it subscribes to, with a robot file
whose drivers publish like real ones (640x480 bgr8 best-effort Image, JPEG CompressedImage, joint_states with
finger joints, JointTrajectory commands). Before, during and after the fuzz a stand-in driver publishes valid
frames; the actor must stay up, keep commanding, log each dropped message by topic and count it in its status.
Runs in a private network namespace with its own ROS_DOMAIN_ID (tests/ros_harness.py).
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
import yaml

from ros_harness import allocate_domain_id

DOMAIN_ID = allocate_domain_id()
DEADLINE_S = 150.0
FUZZ_MESSAGES = 600
# every sensor path the fuzz reaches, which the actor must count as rejected (the status file is rewritten each second)
REJECTED = ("camera/front", "camera/wrist", "joint_states", "learner/weights", "learner/ack", "teleop/episode")
ROBOT = Path(__file__).resolve().parent.parent / "robots" / "sim_panda_driver.yaml"


def valid_joints() -> np.ndarray:
    """Arm joints whose TCP is the robot file's home pose (inside the workspace)."""
    from robot_rl.core.kinematics import ArmKinematics
    from robot_rl.actor.robot_config import load_robot_config
    from robot_rl.sim.robot import HOME_QPOS

    robot = load_robot_config(ROBOT)
    kinematics = ArmKinematics.from_file(robot.model_path(), robot.arm.joint_names, robot.tcp_frame)
    q = np.asarray(HOME_QPOS, dtype=np.float64)
    for _ in range(20):
        q = kinematics.solve(q, np.asarray(robot.home_position), np.asarray(robot.home_quat))
    return q


def untrained_pixel_agent(image_size: int = 64):
    """An untrained SAC agent seeing the robot file's two cameras at `image_size` and the state."""
    from robot_rl.agents.sac import SACAgent
    from robot_rl.ros.nodes.learner_params import robot_task_spaces
    from robot_rl.training.config import TrainConfig

    spec, action_dim = robot_task_spaces(str(ROBOT), "pixels", image_size)
    return SACAgent.create(0, spec, action_dim, TrainConfig().sac)


def client() -> dict:
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import cv2
    import rclpy
    from geometry_msgs.msg import TwistStamped
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import CompressedImage, Image, JointState
    from std_msgs.msg import Bool, Float32, Float64, String, UInt8MultiArray
    from trajectory_msgs.msg import JointTrajectory

    from robot_rl.policies.gaussian import weights_message
    from robot_rl.wire.policy_file import write_policy_file
    from robot_rl.ros import qos
    from robot_rl.ros.convert import image_to_msg, joint_state_to_msg, make_header

    work = Path(tempfile.mkdtemp(prefix="ros-fuzz-"))
    stats_path = work / "actor_status.json"
    weights = write_policy_file(work / "policy.msgpack", weights_message(untrained_pixel_agent(), version=1))
    log = open(work / "actor.log", "w+")
    actor = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.ros.nodes.actor_node", "--ros-args", "-p", f"robot:={ROBOT}",
         "-p", "obs_mode:=pixels", "-p", f"weights_path:={weights}", "-p", "stream_transitions:=false",
         "-p", "reset_service:=none", "-p", f"stats_path:={stats_path}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    # A second actor whose robot file asks for a reliable front camera: the best-effort driver never matches it.
    reliable = yaml.safe_load(ROBOT.read_text())
    reliable["cameras"]["front"]["qos"] = "reliable"
    reliable["arm"]["model"] = str(ROBOT.parent / reliable["arm"]["model"])
    for sensor in (reliable["cameras"]["front"], reliable["cameras"]["wrist"]):  # the driver's topics, from /other
        sensor["topic"] = "/" + sensor["topic"]
    reliable["arm"]["joint_states_topic"] = "/" + reliable["arm"]["joint_states_topic"]
    (work / "reliable.yaml").write_text(yaml.safe_dump(reliable))
    mismatch_stats = work / "mismatch_status.json"
    mismatch_log = open(work / "mismatch.log", "w+")
    mismatch = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.ros.nodes.actor_node", "--ros-args", "-r", "__node:=mismatch",
         "-r", "__ns:=/other", "-p", f"robot:={work / 'reliable.yaml'}", "-p", "obs_mode:=pixels",
         "-p", f"weights_path:={weights}", "-p", "stream_transitions:=false", "-p", "reset_service:=none",
         "-p", f"stats_path:={mismatch_stats}"],
        stdout=mismatch_log, stderr=subprocess.STDOUT, start_new_session=True)
    rclpy.init()
    node = rclpy.create_node("fuzz_driver")
    best_effort = QoSProfile(depth=2, reliability=ReliabilityPolicy.BEST_EFFORT)
    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    pubs = {
        "front": node.create_publisher(Image, "camera/front/image_raw", best_effort),
        "wrist": node.create_publisher(CompressedImage, "camera/wrist/image_raw/compressed", best_effort),
        "joints": node.create_publisher(JointState, "joint_states", best_effort),
        "teleop/twist": node.create_publisher(TwistStamped, "teleop/twist", qos.topic_qos(qos.TELEOP_TWIST)),
        "teleop/gripper": node.create_publisher(Float64, "teleop/gripper", qos.topic_qos(qos.TELEOP_GRIPPER)),
        "teleop/engaged": node.create_publisher(Bool, "teleop/engaged", latched),
        "teleop/episode": node.create_publisher(String, "teleop/episode", qos.topic_qos(qos.TELEOP_EPISODE)),
        "estop": node.create_publisher(Bool, "safety/estop", latched),
        "reward": node.create_publisher(Float32, "task/reward", qos.qos_profile(qos.EVENTS)),
        "success": node.create_publisher(Bool, "task/success", qos.qos_profile(qos.EVENTS)),
        "weights": node.create_publisher(UInt8MultiArray, qos.LEARNER_WEIGHTS, qos.topic_qos(qos.LEARNER_WEIGHTS)),
        "ack": node.create_publisher(UInt8MultiArray, qos.LEARNER_ACK, qos.topic_qos(qos.LEARNER_ACK)),
    }
    commands: list[float] = []
    node.create_subscription(JointTrajectory, "joint_trajectory_controller/joint_trajectory",
                             lambda msg: commands.append(time.monotonic()), qos.qos_profile(qos.COMMANDS))
    q = valid_joints()
    names = [f"joint{i}" for i in range(1, 8)] + ["finger_joint1", "finger_joint2"]
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)
    jpeg = cv2.imencode(".jpg", frame)[1].tobytes()

    def now() -> float:
        return node.get_clock().now().nanoseconds * 1e-9

    def valid_frame() -> None:
        stamp = now()
        pubs["front"].publish(image_to_msg(frame, "bgr8", stamp=stamp, frame_id="front_camera"))
        pubs["wrist"].publish(CompressedImage(header=make_header(stamp, "wrist_camera"), format="jpeg",
                                              data=jpeg))
        pubs["joints"].publish(joint_state_to_msg(names, [*q, 0.04, 0.04], stamp=stamp))

    last_frame = [0.0]

    def spin(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if time.monotonic() - last_frame[0] >= 0.05:
                last_frame[0] = time.monotonic()
                valid_frame()
            rclpy.spin_once(node, timeout_sec=0.01)

    def wait_for(predicate, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if predicate() or actor.poll() is not None:
                return predicate()
            spin(0.2)
        return False

    def status(path: Path = stats_path) -> dict:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    def fuzz_counted(data: dict) -> bool:
        """The status counts a rejection on every fuzzed path and a command the policy chose (not held); both only
        grow, so the status file shows them within a few of its one-second writes."""
        rejected = data.get("rejected", {})
        return all(rejected.get(what, 0) >= 1 for what in REJECTED) and data.get("commands", 0) > data.get("held", 0)

    def mismatch_counted(data: dict) -> bool:
        """The mismatched actor counted the QoS mismatch and held for the missing camera."""
        return data.get("incompatible_qos", {}).get("camera/front", 0) >= 1 and data.get("held", 0) >= 1 \
            and data.get("holds", {}).get("missing:camera/front", 0) >= 1

    def random_bytes(size_max: int) -> bytes:
        return rng.integers(0, 256, int(rng.integers(0, size_max)), dtype=np.uint8).tobytes()

    def bad_number() -> float:
        return float(rng.choice([np.nan, np.inf, -np.inf, 1e308, -1e308, 0.0]))

    def fuzz_one() -> str:
        topic = str(rng.choice(["front", "front", "wrist", "wrist", "joints", "joints", "teleop/twist",
                                "teleop/gripper", "teleop/episode", "reward", "success", "weights", "ack"]))
        stamp = now()
        if topic == "front":
            height, width = int(rng.integers(0, 600)), int(rng.integers(0, 700))
            encoding = str(rng.choice(["rgb8", "bgr8", "mono8", "rgba8", "bgra8", "mono16", "yuv422", "32FC1", "",
                                       "bayer_rggb8", "garbage"]))
            step = int(rng.choice([0, width, width * 3, width * 4, int(rng.integers(0, 5000))]))
            size = int(rng.choice([0, height * step, height * step - 1, int(rng.integers(0, 100_000))]))
            msg = Image(header=make_header(stamp, "front_camera"), height=height, width=width, encoding=encoding,
                        is_bigendian=int(rng.integers(0, 2)), step=step)
            msg.data = rng.integers(0, 256, max(0, min(size, 2_000_000)), dtype=np.uint8).tobytes()
        elif topic == "wrist":
            data = rng.choice([b"", jpeg[: int(rng.integers(1, len(jpeg)))], random_bytes(5000),
                               cv2.imencode(".png", np.zeros((1, 1, 3), np.uint8))[1].tobytes(),
                               cv2.imencode(".png", np.zeros((3, 5), np.uint16))[1].tobytes()])
            msg = CompressedImage(header=make_header(stamp, "wrist_camera"),
                                  format=str(rng.choice(["jpeg", "png", "", "rgb8; jpeg compressed bgr8", "tiff"])),
                                  data=bytes(data))
        elif topic == "joints":
            count = int(rng.integers(0, 12))
            chosen = [str(rng.choice([*names, "joint8", ""])) for _ in range(count)]
            if rng.random() < 0.3:
                chosen = list(names)  # every joint, with bad values or lengths
            values = rng.normal(0.0, 3.0, len(chosen))
            values[rng.random(len(chosen)) < 0.3] = bad_number()
            msg = JointState(header=make_header(stamp), name=chosen)
            msg.position = values[: int(rng.integers(0, len(chosen) + 2))].tolist()
            msg.velocity = values[: int(rng.integers(0, len(chosen) + 1))].tolist()
        elif topic == "teleop/twist":
            msg = TwistStamped(header=make_header(stamp))
            msg.twist.linear.x, msg.twist.angular.z = bad_number(), bad_number()
        elif topic == "teleop/gripper":
            msg = Float64(data=bad_number())
        elif topic == "teleop/episode":
            msg = String(data=str(rng.choice(["", "bogus", "reset\x00", "x" * 10_000])))
        elif topic == "reward":
            msg = Float32(data=float(np.float32(rng.choice([np.nan, np.inf, -np.inf, 3.4e38]))))
        elif topic == "success":
            msg = Bool(data=bool(rng.integers(0, 2)))
        else:
            msg = UInt8MultiArray()
            msg.data = random_bytes(3000)
        pubs[topic].publish(msg)
        return topic

    summary: dict = {}
    try:
        pubs["teleop/engaged"].publish(Bool(data=False))
        pubs["estop"].publish(Bool(data=False))
        summary["commanding"] = wait_for(lambda: len(commands) >= 5, DEADLINE_S / 2)
        sent: dict[str, int] = {}
        for i in range(FUZZ_MESSAGES):
            topic = fuzz_one()
            sent[topic] = sent.get(topic, 0) + 1
            if i % 20 == 0:
                spin(0.05)
        summary["sent"] = sent
        summary["alive_after_fuzz"] = actor.poll() is None
        before = len(commands)
        summary["commands_after"] = wait_for(lambda: len(commands) >= before + 5, 30.0)
        wait_for(lambda: fuzz_counted(status()), 30.0)  # liveness only: the assertions are on what it shows
        summary["status"] = status()
        wait_for(lambda: mismatch_counted(status(mismatch_stats)) or mismatch.poll() is not None, 30.0)
        summary["mismatch_status"] = status(mismatch_stats)
    finally:
        if mismatch.poll() is None:
            os.killpg(mismatch.pid, signal.SIGINT)
        mismatch.wait(timeout=20)
        mismatch_log.seek(0)
        text = mismatch_log.read()
        summary["mismatch_log"] = text[-3000:]
        summary["mismatch_qos_hint"] = [line for line in text.splitlines() if "incompatible QoS" in line][:3]
        mismatch_log.close()
        if actor.poll() is None:
            os.killpg(actor.pid, signal.SIGINT)
        try:
            summary["exit"] = actor.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(actor.pid, signal.SIGKILL)
            summary["exit"] = "killed"
        node.destroy_node()
        rclpy.try_shutdown()
        log.seek(0)
        text = log.read()
        summary["traceback"] = "Traceback" in text
        summary["log_tail"] = text[-5000:]
        summary["log_dropped"] = sorted({line.split("dropped malformed ")[1].split(" message")[0]
                                         for line in text.splitlines() if "dropped malformed " in line})
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    return summary


def test_no_message_crashes_the_actor():
    from ros_harness import run_ros_script

    summary, stderr, _ = run_ros_script(__file__, "client", DOMAIN_ID, DEADLINE_S + 60)
    assert summary["commanding"], summary
    assert summary["status"].get("held", 0) < summary["status"].get("commands", 0), summary  # the policy acted
    assert summary["alive_after_fuzz"], summary
    assert summary["commands_after"], summary
    assert summary["exit"] == 0, summary
    assert not summary["traceback"], summary["log_tail"]
    rejected = summary["status"]["rejected"]
    # every sensor path saw malformed messages and dropped them by name (with a log line naming the topic)
    for what in REJECTED:
        assert rejected.get(what, 0) >= 1, (what, rejected)
    for what in ("camera/front", "camera/wrist", "joint_states", "teleop/episode"):
        assert what in summary["log_dropped"], (what, summary["log_dropped"])
    # a QoS mismatch is named with its fix, counted, and the missing camera holds the robot (counted by reason)
    mismatch = summary["mismatch_status"]
    assert mismatch.get("incompatible_qos", {}).get("camera/front", 0) >= 1, (mismatch, summary["mismatch_log"])
    assert any("set qos: best_effort in the robot file" in line for line in summary["mismatch_qos_hint"]), summary
    assert mismatch.get("holds", {}).get("missing:camera/front", 0) >= 1 and mismatch.get("held", 0) >= 1, mismatch


if __name__ == "__main__":
    if sys.argv[1:] == ["client"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        print("RESULT " + json.dumps(client()))
