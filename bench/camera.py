"""Camera node latency: capture -> publish in the node and capture -> received at a subscriber; prints ONE JSON line.

Usage::

    python bench/camera.py                   # raw bgr8 and JPEG, 640x480 at 30 Hz, 10 s each (about 30 s)
    python bench/camera.py --seconds 20 --jpeg-quality 80
    python bench/camera.py --smoke           # 0.5 s per format from a 15-frame video: checks that it runs (tests)

What is measured (milliseconds, on this machine), from a generated 640x480 30 fps MJPG video file (a textured,
moving scene, so JPEG costs what a camera frame costs):

1. ``baseline``: what the node cannot go below: ``cv2_read_ms`` (one ``VideoCapture.read`` of the file: demux and
   MJPG decode) and ``jpeg_encode_ms`` (robot_rl.core.vision.encode_compressed of one frame at ``--jpeg-quality``).
2. Per format (``raw_bgr8``, ``jpeg``): robot_rl.drivers.camera_node's CameraNode runs in this process at 30 Hz
   (best-effort, its default) while a subscriber runs in a process of its own. ``capture_to_publish_ms``: from the
   moment the frame was handed over by OpenCV (its stamp) to the return of ``publish`` (conversion and the
   middleware's send), from the node's own statistics; ``capture_to_received_ms``: from the header stamp to the
   subscriber's callback (same host and clock). ``published_hz`` and ``received`` / ``published`` (best-effort may
   drop; nothing should with the project's shared-memory transport; the two counts may differ by one at the window's
   edges). Frames published before the subscriber matched are not counted.

``loadavg_1m`` is recorded: compare runs on the same machine only.

Network rule: the script re-executes itself inside a private network namespace (``unshare -n``, only ``lo``) and
refuses to run without one; every ROS process gets ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` and domain id 96
(``--domain-id``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

INNER_FLAG = "ROBOT_RL_BENCH_CAMERA_INNER"
DOMAIN_ID = 96
WIDTH, HEIGHT, FPS = 640, 480, 30.0
VIDEO_FRAMES = 90
NAMESPACE = "/camerabench"


def log(message: str) -> None:
    print(f"[bench/camera {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentiles_ms(seconds) -> dict:
    values = 1e3 * np.asarray(seconds, dtype=float)
    if values.size == 0:
        return {"n": 0}
    p50, p99 = np.percentile(values, [50, 99])
    return {"p50": round(float(p50), 3), "p99": round(float(p99), 3), "n": int(values.size)}


def write_video(path: str, frames: int = VIDEO_FRAMES) -> None:
    """A textured scene (gradient, moving discs, sensor noise) so that JPEG has a camera frame's work to do."""
    import cv2

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:HEIGHT, 0:WIDTH]
    background = np.stack([(xx * 200 // WIDTH), (yy * 200 // HEIGHT), ((xx + yy) * 100 // (WIDTH + HEIGHT))], -1)
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), FPS, (WIDTH, HEIGHT))
    for index in range(frames):
        frame = background.astype(np.uint8)
        for disc in range(6):
            centre = (int(80 + 90 * disc + 40 * np.sin(index / 9 + disc)), int(240 + 150 * np.cos(index / 13 + disc)))
            cv2.circle(frame, centre, 35 + 5 * disc, (40 * disc, 255 - 30 * disc, 120), -1)
        noisy = frame.astype(np.int16) + rng.normal(0, 4, frame.shape).astype(np.int16)
        writer.write(np.clip(noisy, 0, 255).astype(np.uint8))
    writer.release()


def baseline(video: str, quality: int, passes: int = 3) -> dict:
    import cv2

    from robot_rl.core.vision import encode_compressed

    cv2.setNumThreads(1)
    capture = cv2.VideoCapture(video)
    reads, encodes = [], []
    for _ in range(passes):  # three passes over the file (--smoke: one)
        capture.set(cv2.CAP_PROP_POS_FRAMES, 0)
        while True:
            start = time.perf_counter()
            ok, frame = capture.read()
            if not ok:
                break
            reads.append(time.perf_counter() - start)
            rgb = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
            start = time.perf_counter()
            encode_compressed(rgb, "jpeg", quality)
            encodes.append(time.perf_counter() - start)
    capture.release()
    return {"cv2_read_ms": percentiles_ms(reads), "jpeg_encode_ms": percentiles_ms(encodes)}


# ------------------------------------------------------------------------------------------------ subscriber


def role_subscriber(topic: str, compressed: bool) -> int:
    """Record (stamp, arrival) of every message on `topic` until SIGINT / SIGTERM; print them as JSON."""
    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    import rclpy
    from rclpy.signals import SignalHandlerOptions
    from sensor_msgs.msg import CompressedImage, Image

    from robot_rl.ros import qos
    from robot_rl.ros.convert import stamp_to_seconds
    from robot_rl.core.interrupts import StopFlag, install_stop_signals

    flag = StopFlag()
    install_stop_signals(flag)
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("camera_bench_subscriber")
    records: list[tuple[float, float]] = []
    node.create_subscription(CompressedImage if compressed else Image, topic,
                             lambda msg: records.append((stamp_to_seconds(msg.header.stamp), time.time())),
                             qos.sensor_qos("best_effort", depth=5))
    print("subscriber up", flush=True)
    while not flag.is_set():
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    rclpy.try_shutdown()
    print(json.dumps(records), flush=True)
    return 0


# ------------------------------------------------------------------------------------------------ measurement


def measure(video: str, fmt: str, seconds: float, quality: int, settle_s: float = 1.0) -> dict:
    from robot_rl.drivers.camera_node import CameraNode

    name = f"bench_{fmt}"
    topic = f"{NAMESPACE}/camera/{name}/image_raw" + ("/compressed" if fmt != "raw" else "")
    subscriber = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--role", "subscriber",
                                   "--topic", topic, *(["--compressed"] if fmt != "raw" else [])],
                                  stdout=subprocess.PIPE, text=True)
    try:
        subscriber.stdout.readline()  # "subscriber up"
        params = {"source": video, "name": name, "rate_hz": 30.0, "format": fmt, "jpeg_quality": quality}
        cli_args = ["--ros-args", "-r", f"__ns:={NAMESPACE}",
                    *(a for k, v in params.items() for a in ("-p", f"{k}:={v}"))]
        camera = CameraNode(node_name=f"camera_{name}", cli_args=cli_args)
        try:
            deadline = time.monotonic() + 30.0
            while camera.publisher.get_subscription_count() < 1:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the subscriber of {topic} did not match in 30 s")
                time.sleep(0.05)
            time.sleep(settle_s)  # let the subscriber's side settle
            camera.take_statistics()
            started = time.time()
            time.sleep(seconds)
            captured, published, latencies = camera.take_statistics()
            ended = time.time()
        finally:
            camera.destroy()
        time.sleep(0.3)  # the last frames arrive
        subscriber.send_signal(signal.SIGINT)
        out, _ = subscriber.communicate(timeout=30)
    except BaseException:  # a stop (SIGINT / SIGTERM) or an error: the subscriber ends with the bench
        subscriber.kill()
        subscriber.wait()
        raise
    records = [(stamp, arrival) for stamp, arrival in json.loads(out.strip().splitlines()[-1])
               if started <= stamp <= ended]
    span = ended - started
    return {
        "capture_to_publish_ms": percentiles_ms(latencies),
        "capture_to_received_ms": percentiles_ms([arrival - stamp for stamp, arrival in records]),
        "captured_fps": round(captured / span, 2),
        "published_hz": round(published / span, 2),
        "published": published,
        "received": len(records),
    }


def run_inner(args) -> int:
    import rclpy

    from robot_rl.ros.net.env import ensure_ros_environment

    ensure_ros_environment()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    result: dict = {"bench": "camera", "size": f"{WIDTH}x{HEIGHT}", "rate_hz": 30.0, "seconds": args.seconds,
                    "jpeg_quality": args.jpeg_quality, "smoke": args.smoke, "cpus": os.cpu_count(),
                    "loadavg_1m_start": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="bench-camera-") as tmp:
        video = os.path.join(tmp, "scene.avi")
        write_video(video, 15 if args.smoke else VIDEO_FRAMES)
        result["baseline"] = baseline(video, args.jpeg_quality, 1 if args.smoke else 3)
        rclpy.init()
        try:
            for fmt, key in (("raw", "raw_bgr8"), ("jpeg", "jpeg")):
                log(f"measuring {key} for {args.seconds:g} s")
                result[key] = measure(video, fmt, args.seconds, args.jpeg_quality, 0.2 if args.smoke else 1.0)
        finally:
            rclpy.try_shutdown()
    result["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=None, help="measurement time per format (default 10)")
    parser.add_argument("--jpeg-quality", type=int, default=90)
    parser.add_argument("--timeout", type=float, default=300.0, help="kill everything after this many seconds")
    parser.add_argument("--domain-id", type=int, default=DOMAIN_ID, help=f"ROS_DOMAIN_ID (default {DOMAIN_ID})")
    parser.add_argument("--smoke", action="store_true",
                        help="0.5 s per format from a 15-frame video, one baseline pass, 0.2 s settling: checks that "
                             "the bench runs (tests run this; the figures mean little)")
    parser.add_argument("--role", choices=("subscriber",), help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--compressed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.seconds = args.seconds if args.seconds is not None else (0.5 if args.smoke else 10.0)
    if args.role == "subscriber":
        return role_subscriber(args.topic, args.compressed)
    if not os.environ.get(INNER_FLAG):
        from private_network import rerun_in_private_network

        return rerun_in_private_network(__file__, argv, bench="camera", domain_id=args.domain_id, inner_flag=INNER_FLAG,
                                        timeout_s=args.timeout)
    return run_inner(args)


if __name__ == "__main__":
    from robot_rl.core import interrupts

    sys.exit(interrupts.run_program(main))  # a stop ends what the bench started
