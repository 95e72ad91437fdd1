"""The reward node over ROS 2: a classifier trained on two cameras (a raw front camera, a JPEG wrist camera) reads
them as a real driver publishes them (a wider-than-square bgr8 Image and a CompressedImage, best-effort, both named
by a robot file), and publishes task/reward + task/success per frame: success for frames with the square on the pad
only after `consecutive` of them, never for failure-like ones, the count restarted by actor/episode. Malformed
frames (wrong data length, unknown encoding, undecodable JPEG) are dropped with a log line, and the node goes on.
A missing model is one error line, exit status 2.

The test trains the classifier, then runs this file as a client script in a private network namespace with its own
ROS_DOMAIN_ID (tests/ros_harness.py); the client starts the node and plays the camera drivers and the actor.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ros_harness import allocate_domain_id

DOMAIN_ID = allocate_domain_id()
DEADLINE_S = 60.0
NAMESPACE = "/rewardtest"
CONSECUTIVE = 2
ROBOT_FILE = """\
name: two_camera_test
control_rate_hz: 10
mode: realtime
max_episode_steps: 100
frames: {base: base, tcp: tcp}
workspace: {low: [0.35, -0.22, 0.015], high: [0.65, 0.22, 0.30]}
limits: {max_translation: 0.03, max_rotation: 0.15}
home: {position: [0.45, 0.0, 0.25], quat: [0.0, 1.0, 0.0, 0.0], gripper: open}
cameras:
  front: {topic: camera/front/image_raw, type: Image, qos: best_effort, fit: crop, encoding: bgr8}
  wrist: {topic: camera/wrist/image_raw/compressed, type: CompressedImage, qos: best_effort, fit: crop}
arm: {state: tcp_pose, tcp_pose_topic: tcp_pose, twist: derived}
gripper: {state: topic, topic: gripper/state, max_opening: 0.08, command: Float64, command_topic: command/gripper}
command: {interface: pose, pose_topic: command/target_pose}
reset: {kind: human}
"""


def driver_frames(rng, on_pad: bool) -> tuple[np.ndarray, np.ndarray]:
    """(front as a 64x96 BGR frame whose centre square is the 32 px scene at twice the size, wrist 32 px RGB)."""
    from test_reward_classifier import SIZE, SQUARE, scene, success_square

    square = success_square() if on_pad else rng.integers(14, SIZE - SQUARE, size=2)
    front, wrist = scene(rng, square, "front"), scene(rng, square, "wrist")
    wide = rng.integers(0, 255, size=(2 * SIZE, 3 * SIZE, 3), dtype=np.uint8)
    wide[:, SIZE // 2:SIZE // 2 + 2 * SIZE] = front.repeat(2, axis=0).repeat(2, axis=1)
    return np.ascontiguousarray(wide[..., ::-1]), wrist


def client(model: str, robot: str) -> dict:
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from sensor_msgs.msg import CompressedImage, Image
    from std_msgs.msg import Bool, Float32, UInt32

    from robot_rl.ros import qos
    from robot_rl.ros.convert import image_to_msg
    from robot_rl.core.vision import encode_compressed

    python = sys.executable
    node_args = [python, "-m", "robot_rl.ros.nodes.reward_node", "--ros-args", "-r", f"__ns:={NAMESPACE}"]
    # max_frame_age_s: a wrist frame is paired with the front frame the client sends after it, however long a loaded
    # machine keeps the node from the second (a failure detector, generous here: this test is not about staleness)
    reward_node = subprocess.Popen(
        [*node_args, "-p", f"model:={model}", "-p", f"robot:={robot}", "-p", f"consecutive:={CONSECUTIVE}",
         "-p", "max_frame_age_s:=60.0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    no_model = subprocess.Popen([*node_args, "-p", f"model:={model}-missing", "-p", f"robot:={robot}"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rclpy.init()
    node = rclpy.create_node("reward_client")
    sensor = qos.sensor_qos("best_effort")
    front_pub = node.create_publisher(Image, f"{NAMESPACE}/camera/front/image_raw", sensor)
    wrist_pub = node.create_publisher(CompressedImage, f"{NAMESPACE}/camera/wrist/image_raw/compressed", sensor)
    episode_pub = node.create_publisher(UInt32, f"{NAMESPACE}/actor/episode", qos.topic_qos(qos.ACTOR_EPISODE))
    rewards: list[float] = []
    successes: list[bool] = []
    subs = (node.create_subscription(Float32, f"{NAMESPACE}/task/reward", lambda m: rewards.append(m.data),
                                     qos.topic_qos(qos.TASK_REWARD, depth=64)),
            node.create_subscription(Bool, f"{NAMESPACE}/task/success", lambda m: successes.append(m.data),
                                     qos.topic_qos(qos.TASK_SUCCESS, depth=64)))
    summary: dict = {"steps": []}
    deadline = time.monotonic() + DEADLINE_S
    rng = np.random.default_rng(5)

    def spin_until(predicate, what: str) -> None:
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            if reward_node.poll() is not None:
                raise RuntimeError(f"the reward node exited with {reward_node.returncode} while waiting for {what}")
            rclpy.spin_once(node, timeout_sec=0.02)

    def spin_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            rclpy.spin_once(node, timeout_sec=0.01)

    def compressed(data: bytes, format: str = "jpeg") -> CompressedImage:
        msg = CompressedImage(format=format)
        msg.data = data
        return msg

    def step(on_pad: bool) -> None:
        """One frame of each camera (wrist first: the front camera's frame triggers the classification)."""
        front, wrist = driver_frames(rng, on_pad)
        count = len(successes)
        wrist_pub.publish(compressed(encode_compressed(wrist, "jpeg", quality=95)))
        spin_for(0.05)
        front_pub.publish(image_to_msg(front, "bgr8", stamp=time.time(), frame_id="front"))
        spin_until(lambda: len(successes) > count and len(rewards) > count, "the frame's reward and success")
        summary["steps"].append({"on_pad": on_pad, "success": successes[-1], "reward": rewards[-1]})

    try:
        spin_until(lambda: front_pub.get_subscription_count() >= 1 and wrist_pub.get_subscription_count() >= 1
                   and episode_pub.get_subscription_count() >= 1, "the reward node's subscriptions")
        spin_until(lambda: all(sub.get_publisher_count() >= 1 for sub in subs), "the reward node's publishers")
        for on_pad in (False, False, False, True, True, True, False, True):
            step(on_pad)
        episode_pub.publish(UInt32(data=1))  # a new episode: the consecutive count starts again
        spin_for(0.2)
        for on_pad in (True, True):
            step(on_pad)

        # malformed frames: each dropped (no reward published), the node still up
        published = len(successes)
        bad_length = image_to_msg(np.zeros((8, 8, 3), np.uint8), "bgr8")
        bad_length.data = bad_length.data[:-5]
        front_pub.publish(bad_length)
        unknown = image_to_msg(np.zeros((8, 8, 3), np.uint8), "bgr8")
        unknown.encoding = "hsv8"
        front_pub.publish(unknown)
        wrist_pub.publish(compressed(b"\xff\xd8 not a jpeg"))
        spin_for(1.0)
        summary["published_for_malformed"] = len(successes) - published
        step(True)  # a good frame after them is classified again
        summary["alive_after_malformed"] = reward_node.poll() is None
    except Exception as error:  # noqa: BLE001 - reported in the summary
        summary["error"] = repr(error)
    finally:
        if reward_node.poll() is None:
            reward_node.send_signal(signal.SIGINT)
        try:
            summary["exit_code"] = reward_node.wait(timeout=15)
        except subprocess.TimeoutExpired:
            reward_node.kill()
            summary["exit_code"] = "killed"
        summary["log"] = reward_node.stdout.read()
        try:
            summary["no_model_exit_code"] = no_model.wait(timeout=30)
        except subprocess.TimeoutExpired:
            no_model.kill()
            summary["no_model_exit_code"] = "killed"
        summary["no_model_log"] = no_model.stdout.read()
        node.destroy_node()
        rclpy.shutdown()
    return summary


def test_reward_node_publishes_success_from_camera_frames(tmp_path):
    from ros_harness import run_ros_script
    from test_reward_classifier import make_dataset

    from robot_rl.agents.reward_classifier import RewardClassifierConfig
    from robot_rl.agents.reward_classifier_training import save_atomically, train_reward_classifier

    dataset = tmp_path / "squares"
    make_dataset(dataset, 16, seed=1, cameras=("front", "wrist"))
    config = RewardClassifierConfig(steps=150, success_frames=3, margin=3, validation_fraction=0.0,
                                    channels=(16, 16, 16))
    classifier, metrics = train_reward_classifier([dataset], config)
    model = save_atomically(classifier, tmp_path / "model", metrics)
    robot = tmp_path / "two_cameras.yaml"
    robot.write_text(ROBOT_FILE)

    summary, stderr, returncode = run_ros_script(__file__, "client", DOMAIN_ID, DEADLINE_S + 30,
                                                 args=[str(model), str(robot)])
    context = (json.dumps({k: v for k, v in summary.items() if k != "steps"})[-4000:], summary.get("steps"))
    assert "error" not in summary, context
    on_pad = [s["on_pad"] for s in summary["steps"]]
    success = [s["success"] for s in summary["steps"]]
    # success after 2 consecutive on-pad frames, never off the pad; the episode message restarts the count
    expected = [False, False, False, False, True, True, False, False, False, True, True]
    assert on_pad == [False, False, False, True, True, True, False, True, True, True, True]
    assert success == expected, context
    assert [s["reward"] for s in summary["steps"]] == [float(s) for s in expected]  # the sim task's sparse reward
    assert summary["published_for_malformed"] == 0 and summary["alive_after_malformed"], context
    log = summary["log"]
    assert "dropped a frame of camera/front/image_raw: image data has" in log, log
    assert "camera/wrist/image_raw/compressed: cannot decode" in log, log
    assert summary["exit_code"] == 0, context
    assert summary["no_model_exit_code"] == 2, summary["no_model_log"]
    errors = [line for line in summary["no_model_log"].splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "model-missing does not exist" in errors[0], summary["no_model_log"]
    assert returncode == 0, stderr[-3000:]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    print("RESULT " + json.dumps(client(*sys.argv[2:4])), flush=True)
