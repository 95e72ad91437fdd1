"""End-to-end over ROS 2: one process publishes images and a bytes payload, another receives and checks them.

Both processes run in one private network namespace (only ``lo``) where the kernel allows it, always with
ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, a test-specific ROS_DOMAIN_ID and the shipped Fast DDS profile.
This file is also the script the test runs: ``python test_ros_graph.py publish|subscribe``.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import numpy as np
import pytest

from ros_harness import allocate_domain_id

pytest.importorskip("rclpy")

IMAGE_COUNT = 20
IMAGE_SHAPE = (128, 128, 3)
PAYLOAD_BYTES = 1_000_003
DEADLINE_S = 25.0
IMAGE_TOPIC = "/test/camera/image_raw"
PAYLOAD_TOPIC = "/test/learner/weights"


def _expected_image(index: int) -> np.ndarray:
    return np.random.default_rng(index).integers(0, 256, IMAGE_SHAPE, dtype=np.uint8)


def _expected_payload() -> bytes:
    return np.random.default_rng(1234).integers(0, 256, PAYLOAD_BYTES, dtype=np.uint8).tobytes()


def _subscribe() -> int:
    """Receive IMAGE_COUNT images and one payload, check their content, print a JSON summary."""
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from sensor_msgs.msg import Image
    from std_msgs.msg import UInt8MultiArray

    from robot_rl.ros import qos
    from robot_rl.ros.convert import image_from_msg, msg_to_bytes, stamp_to_seconds

    rclpy.init()
    node = rclpy.create_node("test_graph_subscriber")
    received: dict[int, bool] = {}
    latencies_ms: list[float] = []
    payload_ok: list[bool] = []

    def on_image(msg: Image) -> None:
        index = int(msg.header.frame_id)
        received[index] = bool(np.array_equal(image_from_msg(msg), _expected_image(index)))
        latencies_ms.append((time.time() - stamp_to_seconds(msg.header.stamp)) * 1e3)

    def on_payload(msg: UInt8MultiArray) -> None:
        payload_ok.append(msg_to_bytes(msg) == _expected_payload())

    node.create_subscription(Image, IMAGE_TOPIC, on_image, qos.qos_profile(qos.SENSORS, depth=IMAGE_COUNT))
    node.create_subscription(UInt8MultiArray, PAYLOAD_TOPIC, on_payload, qos.qos_profile(qos.WEIGHTS))
    print("READY", flush=True)
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline and (len(received) < IMAGE_COUNT or not payload_ok):
            rclpy.spin_once(node, timeout_sec=0.1)
    finally:
        node.destroy_node()
        rclpy.shutdown()
    summary = {
        "images_received": len(received),
        "images_correct": sum(received.values()),
        "payload_ok": payload_ok[:1] == [True],
        "latency_p50_ms": float(np.median(latencies_ms)) if latencies_ms else None,
    }
    print("RESULT " + json.dumps(summary), flush=True)
    return 0


def _publish() -> int:
    """Start the subscriber, wait until it is matched, publish, relay its JSON summary; always stop it."""
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from sensor_msgs.msg import Image
    from std_msgs.msg import UInt8MultiArray

    from robot_rl.ros import qos
    from robot_rl.ros.convert import bytes_to_msg, image_to_msg

    subscriber = subprocess.Popen([sys.executable, os.path.abspath(__file__), "subscribe"],
                                  stdout=subprocess.PIPE, text=True)
    rclpy.init()
    node = rclpy.create_node("test_graph_publisher")
    try:
        images = node.create_publisher(Image, IMAGE_TOPIC, qos.qos_profile(qos.SENSORS, depth=IMAGE_COUNT))
        payloads = node.create_publisher(UInt8MultiArray, PAYLOAD_TOPIC, qos.qos_profile(qos.WEIGHTS))
        deadline = time.monotonic() + DEADLINE_S
        while images.get_subscription_count() < 1 or payloads.get_subscription_count() < 1:
            if time.monotonic() > deadline or subscriber.poll() is not None:
                print("RESULT " + json.dumps({"error": "subscriber never matched"}), flush=True)
                return 1
            rclpy.spin_once(node, timeout_sec=0.05)
        for index in range(IMAGE_COUNT):
            images.publish(image_to_msg(_expected_image(index), "rgb8", stamp=time.time(), frame_id=str(index)))
            time.sleep(0.01)
        payloads.publish(bytes_to_msg(_expected_payload()))
        lines = []
        while time.monotonic() < deadline:
            ready, _, _ = select.select([subscriber.stdout], [], [], 0.1)
            rclpy.spin_once(node, timeout_sec=0)
            if ready:
                line = subscriber.stdout.readline()
                if not line:
                    break
                lines.append(line)
                if line.startswith("RESULT "):
                    print(line, end="", flush=True)
                    return 0
        print("RESULT " + json.dumps({"error": "no result from subscriber", "output": lines}), flush=True)
        return 1
    finally:
        node.destroy_node()
        rclpy.shutdown()
        if subscriber.poll() is None:
            subscriber.kill()
        subscriber.wait(timeout=10)


def test_images_and_payload_cross_process_boundaries_intact():
    from ros_harness import run_ros_script

    domain_id = allocate_domain_id()
    summary, stderr, returncode = run_ros_script(__file__, "publish", domain_id, DEADLINE_S + 5)
    assert summary.get("images_received") == IMAGE_COUNT, (summary, stderr[-2000:])
    assert summary["images_correct"] == IMAGE_COUNT, summary
    assert summary["payload_ok"], summary
    assert returncode == 0, stderr[-2000:]


if __name__ == "__main__":
    sys.exit({"publish": _publish, "subscribe": _subscribe}[sys.argv[1]]())
