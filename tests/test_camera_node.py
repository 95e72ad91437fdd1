"""The OpenCV camera node: its pure parts (source parsing and open errors, frame encodings, rate limiting) in
process, and the node over ROS 2 on a generated video file.

The ROS test starts this file as a client script (``python test_camera_node.py client VIDEO``) in a private network
namespace (only ``lo``) with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and a test-specific ROS_DOMAIN_ID
(tests/ros_harness.py). The client starts, side by side: a raw bgr8 node at 10 Hz (best-effort, the default) that it
stops with SIGINT; a JPEG node (reliable); a node that plays the file once (``loop:=false``, every frame); a node
reading the file through a FIFO that then stalls (``stall_timeout_s:=3.0``); and two that must not start (a missing
``/dev/video99``, an unknown parameter). It prints a JSON summary the test checks.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import cv2
import numpy as np
import pytest

from robot_rl.drivers.camera_node import CameraSource, CameraSourceError, RateLimiter, convert_frame

from ros_harness import allocate_domain_id

DOMAIN_ID = allocate_domain_id()
DEADLINE_S = 45.0  # a failure detector: the client takes ~12 s on 2 idle cores
NAMESPACE = "/camtest"
FRAMES, FPS, WIDTH, HEIGHT = 30, 30.0, 640, 480
MIN_IMAGES = 10  # the client collects this many of each node's images (however long the machine takes)
RATE_HZ = 10.0


def frame_colour(index: int) -> tuple[int, int, int]:
    """Frame `index`'s solid colour (B, G, R): every channel different, so a swapped channel order shows."""
    return 20 + 7 * index, 230 - 6 * index, 90 + 3 * index


def write_video(path: str, frames: int = FRAMES) -> None:
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), FPS, (WIDTH, HEIGHT))
    assert writer.isOpened()
    for index in range(frames):
        image = np.empty((HEIGHT, WIDTH, 3), np.uint8)
        image[:] = frame_colour(index)
        cv2.putText(image, str(index), (20, 60), cv2.FONT_HERSHEY_SIMPLEX, 2, (255, 255, 255), 3)  # frame counter
        writer.write(image)
    writer.release()


def frame_index(bgr: np.ndarray) -> int | None:
    """Which video frame an image shows (by the colour of its centre), None if none is close."""
    centre = np.median(bgr[HEIGHT // 4: 3 * HEIGHT // 4, WIDTH // 4: 3 * WIDTH // 4].reshape(-1, 3), axis=0)
    errors = [np.abs(centre - np.array(frame_colour(i))).max() for i in range(FRAMES)]
    best = int(np.argmin(errors))
    return best if errors[best] <= 3 else None


# ------------------------------------------------------------------------------------------------ pure parts


def test_source_strings_name_devices_files_and_other_sources(tmp_path):
    video = str(tmp_path / "clip.avi")
    write_video(video, frames=2)
    assert (CameraSource.parse("0").kind, CameraSource.parse("0").target) == ("device", 0)
    assert CameraSource.parse("2").device_path == "/dev/video2"
    assert CameraSource.parse("/dev/v4l/by-id/usb-cam-video-index0").kind == "device"
    assert CameraSource.parse(video).kind == "file"
    assert CameraSource.parse("rtsp://127.0.0.1:8554/cam").kind == "other"
    assert CameraSource.parse("videotestsrc ! videoconvert ! appsink").kind == "other"


@pytest.mark.parametrize("source, reason", [
    ("/dev/video99", "no such device"),
    ("99", "no such device"),
    ("/no/such/clip.avi", "no such file"),
    (__file__, "OpenCV cannot decode it"),
    ("videotestsrc ! appsink", "no OpenCV backend opens it"),
])
def test_a_source_that_cannot_be_opened_is_one_line_naming_it(source, reason):
    with pytest.raises(CameraSourceError) as caught:
        CameraSource.parse(source).open()
    message = str(caught.value)
    assert message.startswith(f"camera source {source!r}: cannot open it (") and reason in message
    assert "\n" not in message


def test_frames_convert_to_each_encoding():
    bgr = np.zeros((4, 6, 3), np.uint8)
    bgr[..., 0], bgr[..., 1], bgr[..., 2] = 10, 20, 30
    assert convert_frame(bgr, "bgr8") is bgr
    np.testing.assert_array_equal(convert_frame(bgr, "rgb8")[0, 0], [30, 20, 10])
    mono = convert_frame(bgr, "mono8")
    assert mono.shape == (4, 6) and mono.dtype == np.uint8 and 18 <= mono[0, 0] <= 22
    gray = np.full((4, 6), 7, np.uint8)  # a source that delivers single-channel frames
    np.testing.assert_array_equal(convert_frame(gray, "rgb8")[0, 0], [7, 7, 7])
    with pytest.raises(ValueError, match="unknown encoding"):
        convert_frame(bgr, "yuv422")


def passed(limiter: RateLimiter, times) -> list[float]:
    return [t for t in times if limiter.accept(t)]


def test_rate_limiter_decimates_without_losing_frames_to_jitter():
    rng = np.random.default_rng(0)
    camera = np.arange(300) / 30.0 + rng.uniform(-0.008, 0.008, 300)  # 10 s of a jittery 30 fps camera
    every_third = passed(RateLimiter(10.0), camera)
    assert 99 <= len(every_third) <= 101
    assert np.diff(every_third).min() > 0.05  # evenly spread, never two frames in a row
    assert len(passed(RateLimiter(30.0), camera)) == 300  # equal rates: no frame lost
    assert len(passed(RateLimiter(60.0), camera)) == 300  # a slower source: every frame
    assert len(passed(RateLimiter(0.0), camera)) == 300  # 0: no limit
    # A source that stalled for a second does not burst to catch up afterwards.
    resumed = passed(RateLimiter(10.0), [0.0, 0.1, 1.3, 1.333, 1.367, 1.4, 1.433])
    assert resumed == [0.0, 0.1, 1.3, 1.367]


def test_a_launch_file_starts_the_camera_node_by_its_executable_name(tmp_path):
    import yaml

    from robot_rl.drivers import camera_node
    from robot_rl.ros.launch_file import load_launch_file

    path = tmp_path / "cameras.yaml"
    path.write_text(yaml.safe_dump({"launch": [{"node": {
        "pkg": "robot_rl", "exec": "camera_node", "name": "camera_front",
        "param": [{"name": "source", "value": "/dev/video0"}, {"name": "rate_hz", "value": 15.0}]}}]}))
    (spec,) = load_launch_file(path).processes
    assert spec.argv[1:3] == ("-m", "robot_rl.drivers.camera_node")
    declared = {row[0] for row in camera_node.PARAMETERS}
    assert {"source", "rate_hz"} <= declared and "source:=/dev/video0" in spec.argv


# --------------------------------------------------------------------------------------------- client script


def _client(video: str) -> int:
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from sensor_msgs.msg import CompressedImage, Image

    from robot_rl.ros import qos
    from robot_rl.ros.convert import compressed_image_from_msg, image_from_msg

    node_module = [sys.executable, "-m", "robot_rl.drivers.camera_node"]
    summary: dict = {"client_started": time.time()}  # before any node: each frame is captured after it

    def start(*ros_args: str, namespace: str = NAMESPACE) -> subprocess.Popen:
        return subprocess.Popen([*node_module, "--ros-args", "-r", f"__ns:={namespace}", *ros_args],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    fifo = os.path.join(tempfile.mkdtemp(prefix="camera_test_"), "stream")
    os.mkfifo(fifo)
    # Hold a write end first (O_RDWR never blocks on Linux): the node's open of the FIFO waits for a writer.
    writer = os.open(fifo, os.O_RDWR)
    with open(video, "rb") as file:
        stream_bytes = file.read()
    threading.Thread(target=os.write, args=(writer, stream_bytes), daemon=True).start()  # then no more bytes

    processes = {
        "missing": start("-p", "source:=/dev/video99"),
        "missing_index": start("-p", "source:=99"),  # ROS reads 99 as an integer: still a device index
        "unknown": start("-p", f"source:={video}", "-p", "rate:=5.0"),
        "raw": start("-p", f"source:={video}", "-p", f"rate_hz:={RATE_HZ}", "-r", "__node:=camera_front"),
        "jpeg": start("-p", f"source:={video}", "-p", "name:=wrist", "-p", "format:=jpeg", "-p", "qos:=reliable",
                      "-p", "frame_id:=wrist_optical", "-p", f"rate_hz:={RATE_HZ}", "-r", "__node:=camera_wrist"),
        "once": start("-p", f"source:={video}", "-p", "name:=once", "-p", "loop:=false", "-p", "rate_hz:=0.0",
                      "-p", "stats:=0.3", "-r", "__node:=camera_once"),
        "stall": start("-p", f"source:={fifo}", "-p", "name:=stall", "-p", "stall_timeout_s:=3.0",
                       "-r", "__node:=camera_stall"),
    }
    rclpy.init()
    node = rclpy.create_node("camera_test_client")
    received: dict[str, list] = {"raw": [], "jpeg": []}

    def on_image(kind: str, msg) -> None:
        received[kind].append((time.time(), msg))

    node.create_subscription(Image, f"{NAMESPACE}/camera/front/image_raw", lambda m: on_image("raw", m),
                             qos.sensor_qos("best_effort", depth=64))
    node.create_subscription(CompressedImage, f"{NAMESPACE}/camera/wrist/image_raw/compressed",
                             lambda m: on_image("jpeg", m), qos.sensor_qos("reliable", depth=64))
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not (received["raw"] and received["jpeg"]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no image yet: {[k for k, v in received.items() if not v]}")
            for kind in received:
                if processes[kind].poll() is not None:
                    raise RuntimeError(f"{kind} node exited with {processes[kind].returncode}: "
                                       f"{processes[kind].stdout.read()[-2000:]}")
            rclpy.spin_once(node, timeout_sec=0.05)
        for kind in received:
            received[kind].clear()
        while not all(len(images) >= MIN_IMAGES for images in received.values()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {MIN_IMAGES} images: { {k: len(v) for k, v in received.items()} }")
            rclpy.spin_once(node, timeout_sec=0.02)
        summary["raw"] = [describe_image(arrival, msg, image_from_msg(msg)) for arrival, msg in received["raw"]]
        summary["jpeg"] = [describe_image(arrival, msg, compressed_image_from_msg(msg)[..., ::-1])
                           for arrival, msg in received["jpeg"]]
        processes["raw"].send_signal(signal.SIGINT)
    except Exception as error:  # noqa: BLE001 - reported in the summary
        summary["error"] = repr(error)
    finally:
        outcome = {}
        for kind, process in processes.items():
            if kind == "jpeg" and process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                output, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
                outcome[kind] = {"exit_code": process.returncode, "output": output}
            except subprocess.TimeoutExpired:  # stuck: SIGABRT makes faulthandler print where (run_node enables it)
                process.send_signal(signal.SIGABRT)
                try:
                    output, _ = process.communicate(timeout=5.0)
                except subprocess.TimeoutExpired:
                    process.kill()
                    output, _ = process.communicate()
                outcome[kind] = {"exit_code": "killed", "output": output}
        summary["processes"] = outcome
        os.close(writer)
        os.unlink(fifo)
        os.rmdir(os.path.dirname(fifo))
        node.destroy_node()
        rclpy.shutdown()
    print("RESULT " + json.dumps(summary), flush=True)
    return 0


def describe_image(arrival: float, msg, bgr: np.ndarray) -> dict:
    from robot_rl.ros.convert import stamp_to_seconds

    info = {"arrival": arrival, "stamp": stamp_to_seconds(msg.header.stamp), "frame_id": msg.header.frame_id,
            "encoding": getattr(msg, "encoding", None) or getattr(msg, "format", None)}
    return {**info, "shape": list(bgr.shape), "index": frame_index(bgr)}


# --------------------------------------------------------------------------------------------- the ROS test


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "ERROR" in line or "Traceback" in line]


def test_camera_node_over_ros(tmp_path):
    pytest.importorskip("rclpy")
    from ros_harness import run_ros_script

    video = str(tmp_path / "counter.avi")
    write_video(video)
    summary, stderr, returncode = run_ros_script(__file__, "client", DOMAIN_ID, DEADLINE_S + 20, args=[video])
    processes = summary.get("processes", {})
    context = ({k: {"exit_code": v["exit_code"], "output": v["output"][-1500:]} for k, v in processes.items()},
               summary.get("error"), stderr[-2000:])
    assert "error" not in summary, context
    assert returncode == 0, context

    for kind, encoding, frame_id in (("raw", "bgr8", "front_camera"), ("jpeg", "rgb8; jpeg compressed bgr8",
                                                                       "wrist_optical")):
        images = summary[kind]
        assert len(images) >= MIN_IMAGES, (kind, len(images), context)
        assert {image["frame_id"] for image in images} == {frame_id}, (kind, images[:2])
        assert {image["encoding"] for image in images} == {encoding}, (kind, images[:2])
        assert all(image["shape"] == [HEIGHT, WIDTH, 3] for image in images), (kind, images[:2])
        stamps = [image["stamp"] for image in images]
        assert all(b > a for a, b in zip(stamps, stamps[1:])), (kind, stamps)
        # Decimated to rate_hz on the capture clock (a 30 fps file at 10 Hz): at most one frame a period, give or
        # take the rate limiter's half a period for jitter, however late the frames arrived here.
        assert len(images) <= (stamps[-1] - stamps[0]) * RATE_HZ + 3, (kind, stamps)
        # Stamped at capture with the node clock (system time): after the client started it, before it arrived here.
        assert all(summary["client_started"] <= image["stamp"] <= image["arrival"] for image in images), \
            (kind, summary["client_started"], images[:3])
        # Pixels are the video's frames, in order (the file rewinds: indices wrap around).
        indices = [image["index"] for image in images]
        assert None not in indices, (kind, indices)
        # A frame's index comes again only after a whole loop of the file (30 frames at its pace: close to a second,
        # as when a loaded machine kept the publisher from its frames that long).
        steps = [((b["index"] - a["index"]) % FRAMES, b["stamp"] - a["stamp"]) for a, b in zip(images, images[1:])]
        assert all(step > 0 or seconds >= 0.5 for step, seconds in steps), (kind, indices, steps)

    missing, unknown = processes["missing"], processes["unknown"]
    assert missing["exit_code"] == 2, missing["output"][-3000:]
    assert unknown["exit_code"] == 2, unknown["output"][-3000:]
    assert len(error_lines(missing["output"])) == 1, missing
    assert ("camera source '/dev/video99': cannot open it (no such device"
            in error_lines(missing["output"])[0]), missing
    index = processes["missing_index"]
    assert index["exit_code"] == 2 and len(error_lines(index["output"])) == 1, index
    assert "camera source '99': cannot open it" in error_lines(index["output"])[0], index
    assert len(error_lines(unknown["output"])) == 1, unknown
    assert "unknown parameter 'rate'" in unknown["output"] and "did you mean 'rate_hz'" in unknown["output"], unknown

    raw = processes["raw"]  # stopped with SIGINT
    assert raw["exit_code"] == 0 and not error_lines(raw["output"]), raw
    assert "camera node up: source" in raw["output"] and "640x480" in raw["output"], raw
    assert processes["jpeg"]["exit_code"] == 0 and not error_lines(processes["jpeg"]["output"]), processes["jpeg"]

    once = processes["once"]  # played to its end once, then stopped by itself
    assert once["exit_code"] == 0 and not error_lines(once["output"]), once
    assert "end of the video file (loop:=false)" in once["output"], once
    assert re.search(r"stats over \d+\.\d s: captured \d+ \(\d+\.\d fps\), published \d+ \(\d+\.\d Hz\), "
                     r"capture->publish p50 \d+\.\d+ ms p99 \d+\.\d+ ms", once["output"]), once

    stall = processes["stall"]  # the FIFO gave one video's worth of frames, then nothing
    assert stall["exit_code"] == 1, stall
    assert "camera node up" in stall["output"], stall
    # gave up once silent for stall_timeout_s; any warning before is one silent for at least 1 s, at most that
    # (whether the node's loop got to warn within those 2 s depends on the machine's load: not asserted)
    warned = [float(seconds) for seconds in re.findall(r"no frame for (\d+\.\d) s \(it sends nothing\); still trying",
                                                       stall["output"])]
    assert all(1.0 <= seconds <= 3.0 for seconds in warned), (warned, stall)
    errors = error_lines(stall["output"])
    assert len(errors) == 1 and "no frame for" in errors[0] and "stall_timeout_s=3" in errors[0], stall


if __name__ == "__main__":
    sys.exit({"client": _client}[sys.argv[1]](*sys.argv[2:]))
