"""The camera node: an OpenCV capture source (a V4L2 camera, a video file, a stream) as a ROS 2 image topic.

Run::

    python -m robot_rl.drivers.camera_node --ros-args -p source:=/dev/video0 -p name:=front -p rate_hz:=30.0
    python -m robot_rl.drivers.camera_node --ros-args -p source:=demo.avi -p format:=jpeg -r __node:=camera_wrist

``source`` is a V4L2 device index (``0``) or path (``/dev/video2``, ``/dev/v4l/by-id/...``), a video file (played
at its own frame rate, rewound at its end unless ``loop:=false``) or any other string OpenCV opens (an
``rtsp://`` / ``http://`` stream, an image sequence ``img_%04d.png``, a GStreamer pipeline where OpenCV was built with
GStreamer). Topic (relative: ``-r __ns:=/robot1`` moves it), as image_transport names them:

=============  ======================================  ==========================================================
format         topic                                   type
=============  ======================================  ==========================================================
raw (default)  ``camera/<name>/image_raw``             sensor_msgs/Image in ``encoding``
jpeg / png     ``camera/<name>/image_raw/compressed``  sensor_msgs/CompressedImage (``rgb8; jpeg compressed bgr8``)
=============  ======================================  ==========================================================

Timing: a capture thread reads the source as fast as it delivers (so a camera's driver queue never fills with old
frames) and stamps each frame with the node clock the moment the source hands it over (``grab``, before it is
decoded); a publish thread sends the newest frame as soon as it arrives, each frame at most once and at most
``rate_hz`` on average (``0``: every frame). The stamp is the capture time, not the publish time.

A source that stops delivering frames (camera unplugged, stream down): a warning every 2 s while the capture
thread re-opens it, then, after ``stall_timeout_s`` without a frame, one error line and exit status 1, so that a
launch file's ``respawn`` (or the operator) starts it again; ``stall_timeout_s:=0`` keeps retrying for ever.

Parameters (:data:`PARAMETERS`, read at start-up): ``source``, ``name``, ``frame_id``, ``rate_hz``, ``width`` /
``height`` / ``fourcc`` (requested from a camera), ``encoding`` (bgr8 | rgb8 | mono8), ``format`` (raw | jpeg |
png), ``jpeg_quality``, ``qos`` (best_effort, as SensorDataQoS | reliable), ``loop``, ``stall_timeout_s``,
``stats`` (seconds between statistics log lines).

Exit status: 0 after SIGINT / SIGTERM / SIGHUP, or at the end of a video file with ``loop:=false``; 1 when the
source stopped delivering frames for ``stall_timeout_s`` (or a frame could not be published); 2 at start-up: a source that cannot be opened or gives no
first frame (one log line names the source and the reason), or a bad parameter.
"""

from __future__ import annotations

if __name__ == "__main__":  # a program's start, before the heavy imports below
    from robot_rl.core.startup import program_start

    program_start()

import argparse
import collections
import dataclasses
import glob
import os
import re
import stat
import sys
import threading
import time

import cv2
import numpy as np

NODE_NAME = "camera"
EXIT_OK = 0
EXIT_FAILURE = 1  # the source stopped delivering frames, or a frame could not be published
EXIT_STARTUP = 2
ENCODINGS = ("bgr8", "rgb8", "mono8")
FORMATS = ("raw", "jpeg", "png")
QOS_CHOICES = ("best_effort", "reliable")
REOPEN_INTERVAL_S = 1.0
WARN_INTERVAL_S = 2.0
QOS_DEPTH = 5  # as SensorDataQoS
LATENCY_SAMPLES = 10_000  # the newest capture->publish latencies kept for statistics

PARAMETERS: tuple[tuple[str, object, str], ...] = (
    ("source", "0", "V4L2 device index or path, video file, or any OpenCV source string (read at start-up)"),
    ("name", "front", "camera name: the topic is camera/<name>/image_raw (read at start-up)"),
    ("frame_id", "", "header frame id; empty: <name>_camera (read at start-up)"),
    ("rate_hz", 30.0, "most frames published per second, on average; 0: every frame captured (read at start-up)"),
    ("width", 0, "frame width requested from a camera; 0: the device's default (read at start-up)"),
    ("height", 0, "frame height requested from a camera; 0: the device's default (read at start-up)"),
    ("fourcc", "", "pixel format requested from a camera, e.g. MJPG or YUYV; empty: the device's default "
                   "(read at start-up)"),
    ("encoding", "bgr8", f"raw image encoding: {' | '.join(ENCODINGS)} (read at start-up)"),
    ("format", "raw", f"{' | '.join(FORMATS)}: raw Image or CompressedImage on <topic>/compressed (read at start-up)"),
    ("jpeg_quality", 90, "JPEG quality 1-100 for format jpeg (read at start-up)"),
    ("qos", "best_effort", f"publisher reliability: {' | '.join(QOS_CHOICES)} (read at start-up)"),
    ("loop", True, "video file source: rewind at its end; false: exit 0 there (read at start-up)"),
    ("stall_timeout_s", 10.0, "exit 1 after this long without a frame; 0: keep retrying (read at start-up)"),
    ("stats", 0.0, "seconds between statistics log lines (rates, capture->publish latency); 0: none"),
)
"""The node's ROS parameters (name, default, description)."""


def camera_settings(node_name: str, param) -> dict[str, object]:
    """The node's settings (attribute name -> value) from its parameter values (`param`: name -> value);
    NodeStartupError for a bad value. Cheap: run_node applies it to the command line's values before anything starts,
    the node to its declared values."""
    from robot_rl.ros.node_util import NodeStartupError

    def fail(name: str, problem: str) -> None:
        raise NodeStartupError(f"parameter {name!r} of node {node_name}: {problem}")

    source_text = str(param("source"))
    if not source_text.strip():
        fail("source", "empty; give a device index (0), a device path, a video file or an OpenCV source")
    name = str(param("name"))
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        fail("name", f"{name!r} is not a ROS name token (letters, digits, underscores)")
    rate_hz = float(param("rate_hz"))
    if not (rate_hz >= 0 and np.isfinite(rate_hz)):
        fail("rate_hz", f"must be >= 0 (0: every frame), got {rate_hz}")
    width, height = int(param("width")), int(param("height"))
    for key, value in (("width", width), ("height", height)):
        if value < 0:
            fail(key, f"must be >= 0 (0: the device's default), got {value}")
    fourcc = str(param("fourcc"))
    if fourcc and len(fourcc) != 4:
        fail("fourcc", f"must be 4 characters such as MJPG or YUYV, got {fourcc!r}")
    encoding, format_, qos = str(param("encoding")), str(param("format")), str(param("qos"))
    for key, value, choices in (("encoding", encoding, ENCODINGS), ("format", format_, FORMATS),
                                ("qos", qos, QOS_CHOICES)):
        if value not in choices:
            fail(key, f"{value!r} is not one of {', '.join(choices)}")
    jpeg_quality = int(param("jpeg_quality"))
    if not 1 <= jpeg_quality <= 100:
        fail("jpeg_quality", f"must be in 1..100, got {jpeg_quality}")
    stall_timeout_s, stats_period_s = float(param("stall_timeout_s")), float(param("stats"))
    for key, value in (("stall_timeout_s", stall_timeout_s), ("stats", stats_period_s)):
        if not (value >= 0 and np.isfinite(value)):
            fail(key, f"must be >= 0 seconds (0: off), got {value}")
    return {"source_text": source_text, "name": name, "frame_id": str(param("frame_id")) or f"{name}_camera",
            "rate_hz": rate_hz, "width": width, "height": height, "fourcc": fourcc, "encoding": encoding,
            "format": format_, "qos": qos, "jpeg_quality": jpeg_quality, "loop": bool(param("loop")),
            "stall_timeout_s": stall_timeout_s, "stats_period_s": stats_period_s}


def check_parameters(node_name: str, values) -> None:
    """NodeStartupError for a bad parameter value; run_node applies it to the command line's values first."""
    camera_settings(node_name, values)


class CameraSourceError(RuntimeError):
    """A capture source cannot be opened or read; the message names the source and the reason."""


@dataclasses.dataclass(frozen=True)
class CameraSource:
    """What a ``source`` string names: a V4L2 device, a video file, or another OpenCV source."""

    text: str
    kind: str
    """"device", "file" or "other"."""
    target: int | str
    """What cv2.VideoCapture opens: a device index or a path / source string."""
    api: int

    @classmethod
    def parse(cls, text: str) -> CameraSource:
        text = text.strip()
        if re.fullmatch(r"\d+", text):
            return cls(text, "device", int(text), cv2.CAP_V4L2)
        if text.startswith("/dev/"):
            return cls(text, "device", text, cv2.CAP_V4L2)
        if os.path.isfile(text):
            return cls(text, "file", text, cv2.CAP_ANY)
        return cls(text, "other", text, cv2.CAP_ANY)

    @property
    def device_path(self) -> str | None:
        if self.kind != "device":
            return None
        return f"/dev/video{self.target}" if isinstance(self.target, int) else str(self.target)

    def open(self, width: int = 0, height: int = 0, fourcc: str = "") -> cv2.VideoCapture:
        """An opened cv2.VideoCapture with the requested size / pixel format; CameraSourceError says why not."""
        capture = cv2.VideoCapture(self.target, self.api)
        if not capture.isOpened():
            capture.release()
            raise CameraSourceError(f"camera source {self.text!r}: cannot open it ({self._why_not_open()})")
        if self.kind == "device":
            if fourcc:
                capture.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter_fourcc(*fourcc))
            if width > 0:
                capture.set(cv2.CAP_PROP_FRAME_WIDTH, width)
            if height > 0:
                capture.set(cv2.CAP_PROP_FRAME_HEIGHT, height)
        return capture

    def _why_not_open(self) -> str:
        path = self.device_path
        if path is not None:
            present = sorted(glob.glob("/dev/video*"), key=lambda p: (len(p), p))
            found = f"cameras present: {', '.join(present)}" if present else "no /dev/video* present"
            if not os.path.exists(path):
                return f"no such device; {found}"
            if not stat.S_ISCHR(os.stat(path).st_mode):
                return "not a device file"
            if not os.access(path, os.R_OK | os.W_OK):
                return "permission denied; add the user to the 'video' group"
            return f"OpenCV's V4L2 backend rejects {path}: in use by another process, or not a capture device"
        if os.path.isfile(self.text):
            return "OpenCV cannot decode it: not a video file, or a codec this OpenCV build lacks"
        if os.path.isdir(self.text):
            return "a directory; an image sequence is given as a pattern such as frames/%04d.png"
        looks_like_path = "/" in self.text or re.search(r"\.[A-Za-z0-9]{2,4}$", self.text)
        if looks_like_path and "://" not in self.text and "!" not in self.text and "%" not in self.text:
            return "no such file"
        backends = ", ".join(cv2.videoio_registry.getBackendName(b) for b in cv2.videoio_registry.getStreamBackends())
        return f"no OpenCV backend opens it; this OpenCV has: {backends}"


def source_fps(capture: cv2.VideoCapture) -> float:
    """The frame rate a capture reports; 0.0 when it reports none (or nonsense)."""
    fps = float(capture.get(cv2.CAP_PROP_FPS) or 0.0)
    return fps if 0.0 < fps < 1000.0 else 0.0


def convert_frame(frame: np.ndarray, encoding: str) -> np.ndarray:
    """An OpenCV frame (BGR, or single-channel) as an array in `encoding` (bgr8, rgb8 or mono8)."""
    if frame.ndim == 2 or frame.shape[2] == 1:
        gray = frame.reshape(frame.shape[:2])
        return gray if encoding == "mono8" else cv2.cvtColor(gray, cv2.COLOR_GRAY2RGB if encoding == "rgb8"
                                                              else cv2.COLOR_GRAY2BGR)
    if frame.shape[2] == 4:
        frame = cv2.cvtColor(frame, cv2.COLOR_BGRA2BGR)
    if encoding == "bgr8":
        return frame
    if encoding == "rgb8":
        return cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
    if encoding == "mono8":
        return cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
    raise ValueError(f"unknown encoding {encoding!r}; supported: {', '.join(ENCODINGS)}")


class RateLimiter:
    """Passes at most `rate_hz` events per second on average, judged by their times; 0 passes every one.

    Each passed event books the next slot one period later; an event up to half a period early for its slot passes
    (frame timing jitters), so a 30 fps camera at 30 Hz loses no frame and at 10 Hz gives every third. A source
    that falls more than a period behind restarts the schedule instead of bursting to catch up.
    """

    def __init__(self, rate_hz: float):
        self.period = 1.0 / rate_hz if rate_hz > 0 else 0.0
        self._due: float | None = None

    def accept(self, t: float) -> bool:
        if self.period == 0.0:
            return True
        if self._due is None or t >= self._due + self.period:
            self._due = t
        elif t < self._due - 0.5 * self.period:
            return False
        self._due += self.period
        return True


@dataclasses.dataclass(frozen=True)
class Frame:
    """One captured frame: pixels, capture time (node clock, ns), monotonic capture time, sequence number."""

    pixels: np.ndarray
    stamp_ns: int
    captured: float
    seq: int


class CameraNode:
    """One rclpy node that captures from an OpenCV source and publishes its frames (see the module doc)."""

    def __init__(self, *, node_name: str = NODE_NAME, context=None, cli_args: list[str] | None = None):
        import rclpy

        from robot_rl.ros.node_util import NodeStartupError, declare_parameters

        cv2.setNumThreads(1)
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)  # its open-failure warnings: one line below
        self.node = rclpy.create_node(node_name, context=context, cli_args=cli_args)
        node = self.node
        self._log = node.get_logger()
        self.exit_status: int | None = None
        """Set when the node wants to stop by itself (source lost, end of a video file)."""
        self.capture: cv2.VideoCapture | None = None
        self._threads: list[threading.Thread] = []
        try:
            param = declare_parameters(node, PARAMETERS)
            self._read_parameters(param)
            self.source = CameraSource.parse(self.source_text)
            self.capture = self.source.open(self.width, self.height, self.fourcc)
        except (NodeStartupError, CameraSourceError) as error:
            node.destroy_node()
            raise NodeStartupError(str(error), EXIT_STARTUP) from None
        self.fps = source_fps(self.capture)
        self._reads_paced = self.source.kind == "file"
        self._read_period = 1.0 / (self.fps or self.rate_hz or 30.0)
        self.publisher, self.topic = self._make_publisher()
        self._clock = node.get_clock()
        self._condition = threading.Condition()
        self._stopping = threading.Event()
        self._latest: Frame | None = None
        self._last_frame_at = time.monotonic()
        self._end_of_file = False
        self._handled_seq = 0
        self._captured = 0
        self._published = 0
        self._latencies: collections.deque[float] = collections.deque(maxlen=LATENCY_SAMPLES)
        self._stats_at = time.monotonic()
        self._warned_at = 0.0
        self._source_note = ""

        first = self._start_capture()
        height, width = first.pixels.shape[:2]
        if (self.width and self.width != width) or (self.height and self.height != height):
            self._log.warning(f"camera source {self.source.text!r}: requested {self.width or width}x"
                              f"{self.height or height}, it delivers {width}x{height}")
        self._start_thread(self._publish_loop, "publish")
        kind = {"device": "camera", "file": f"video file, {self.fps:g} fps", "other": "stream"}[self.source.kind]
        what = f"Image {self.encoding}" if self.format == "raw" else f"CompressedImage {self.format}"
        rate = f"{self.rate_hz:g} Hz" if self.rate_hz > 0 else "every frame"
        self._log.info(f"camera node up: source {self.source.text!r} ({kind}, {self.capture.getBackendName()}) "
                       f"{width}x{height} -> {node.resolve_topic_name(self.topic)} ({what}, {self.qos}) at {rate}")

    # ------------------------------------------------------------------------------------------------- set-up

    def _read_parameters(self, param) -> None:
        for key, value in camera_settings(self.node.get_name(), param).items():
            setattr(self, key, value)

    def _make_publisher(self):
        from sensor_msgs.msg import CompressedImage, Image

        from robot_rl.ros import qos

        profile = qos.sensor_qos(self.qos, depth=QOS_DEPTH)
        topic = f"camera/{self.name}/image_raw"
        if self.format == "raw":
            return self.node.create_publisher(Image, topic, profile), topic
        topic += "/compressed"
        return self.node.create_publisher(CompressedImage, topic, profile), topic

    def _start_thread(self, target, what: str) -> None:
        thread = threading.Thread(target=target, name=f"camera-{self.name}-{what}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _start_capture(self) -> Frame:
        """Start the capture thread and wait for its first frame (NodeStartupError when none comes)."""
        from robot_rl.ros.node_util import NodeStartupError

        wait_s = max(self.stall_timeout_s, 5.0)
        self._start_thread(self._capture_loop, "capture")
        with self._condition:
            self._condition.wait_for(lambda: self._latest is not None or self._end_of_file, timeout=wait_s)
            first = self._latest
        if first is None:
            self._stopping.set()
            reason = self._source_note or f"no frame within {wait_s:g} s"
            self.node.destroy_node()
            raise NodeStartupError(f"camera source {self.source.text!r}: opened, but it gives no frames ({reason})",
                                   EXIT_STARTUP)
        return first

    # ------------------------------------------------------------------------------------------- capture thread

    def _capture_loop(self) -> None:
        next_read = time.monotonic()
        frames_since_open = 0
        while not self._stopping.is_set():
            if self.capture is None:
                if not self._reopen():
                    continue
                frames_since_open = 0
            if not self.capture.grab():
                frames_since_open = self._source_ended(frames_since_open)
                continue
            captured, stamp_ns = time.monotonic(), self._clock.now().nanoseconds
            ok, pixels = self.capture.retrieve()
            if not ok or pixels is None or pixels.size == 0:
                self._source_note = "a frame could not be decoded"
                continue
            frames_since_open += 1
            self._source_note = ""
            with self._condition:
                seq = self._latest.seq + 1 if self._latest is not None else 1
                self._latest = Frame(pixels, stamp_ns, captured, seq)
                self._captured += 1
                self._last_frame_at = captured
                self._condition.notify_all()
            if self._reads_paced:  # a file plays at its own frame rate, not as fast as it decodes
                next_read += self._read_period
                now = time.monotonic()
                if next_read > now:
                    self._stopping.wait(next_read - now)
                elif now - next_read > self._read_period:
                    next_read = now

    def _source_ended(self, frames_since_open: int) -> int:
        """The source gave no frame: rewind a file, stop at its end, or drop the capture to re-open it."""
        if self.source.kind == "file" and frames_since_open > 0:
            if not self.loop:
                with self._condition:
                    self._end_of_file = True
                    self._condition.notify_all()
                self._stopping.wait()
                return frames_since_open
            if self.capture.set(cv2.CAP_PROP_POS_FRAMES, 0):
                return 0
        self._source_note = "the source stopped giving frames"
        self.capture.release()
        self.capture = None
        self._stopping.wait(0.1)
        return 0

    def _reopen(self) -> bool:
        try:
            self.capture = self.source.open(self.width, self.height, self.fourcc)
            return True
        except CameraSourceError as error:
            self._source_note = str(error)
            self._stopping.wait(REOPEN_INTERVAL_S)
            return False

    # ------------------------------------------------------------------------------------------- publish thread

    def _publish_loop(self) -> None:
        limiter = RateLimiter(self.rate_hz)
        seen = 0
        while not self._stopping.is_set():
            with self._condition:
                self._condition.wait_for(lambda: self._stopping.is_set() or (
                    self._latest is not None and self._latest.seq != seen), timeout=0.2)
                frame = self._latest
            if frame is None or frame.seq == seen or self._stopping.is_set():
                continue
            seen = frame.seq
            if limiter.accept(frame.captured):
                try:
                    self.publisher.publish(self._message(frame))
                except Exception as error:  # noqa: BLE001 - at shutdown the context goes first: quietly
                    if not self._stopping.is_set():
                        self._log.error(f"camera {self.name!r}: cannot publish a frame ({error}); stopping")
                        self.exit_status = EXIT_FAILURE
                    return
                latency = time.monotonic() - frame.captured
                with self._condition:
                    self._published += 1
                    self._latencies.append(latency)
            with self._condition:
                self._handled_seq = seen

    def _message(self, frame: Frame):
        from robot_rl.ros.convert import compressed_image_to_msg, image_to_msg

        stamp = frame.stamp_ns * 1e-9
        if self.format == "raw":
            return image_to_msg(convert_frame(frame.pixels, self.encoding), self.encoding, stamp=stamp,
                                frame_id=self.frame_id)
        return compressed_image_to_msg(convert_frame(frame.pixels, "rgb8"), self.format, stamp=stamp,
                                       frame_id=self.frame_id, quality=self.jpeg_quality)

    # ------------------------------------------------------------------------------------------------ main loop

    def work(self) -> bool:
        """Watch the capture (stall warnings and time-out, end of file) and log statistics; called by run_node."""
        now = time.monotonic()
        with self._condition:
            last_frame_at, end_of_file = self._last_frame_at, self._end_of_file
            all_handled = self._latest is None or self._handled_seq == self._latest.seq
        if end_of_file and all_handled:
            self._log.info(f"camera source {self.source.text!r}: end of the video file (loop:=false); stopping")
            self.exit_status = EXIT_OK
            return False
        silent = now - last_frame_at
        if self.stall_timeout_s > 0 and silent > self.stall_timeout_s:
            self._log.error(f"camera source {self.source.text!r}: no frame for {silent:.1f} s "
                            f"(stall_timeout_s={self.stall_timeout_s:g}; {self._source_note or 'it sends nothing'}); "
                            "stopping")
            self.exit_status = EXIT_FAILURE
            return False
        if silent > max(1.0, 3.0 * self._read_period) and now - self._warned_at > WARN_INTERVAL_S:
            self._warned_at = now
            self._log.warning(f"camera source {self.source.text!r}: no frame for {silent:.1f} s "
                              f"({self._source_note or 'it sends nothing'}); still trying")
        if self.stats_period_s > 0 and now - self._stats_at >= self.stats_period_s:
            self._log_stats(now)
        return False

    def take_statistics(self) -> tuple[int, int, list[float]]:
        """(frames captured, frames published, capture->publish latencies [s] of the newest LATENCY_SAMPLES of
        those) since the last call."""
        with self._condition:
            taken = self._captured, self._published, self._latencies
            self._captured, self._published = 0, 0
            self._latencies = collections.deque(maxlen=LATENCY_SAMPLES)
        return taken[0], taken[1], list(taken[2])

    def _log_stats(self, now: float) -> None:
        captured, published, latencies = self.take_statistics()
        span, self._stats_at = now - self._stats_at, now
        if latencies:
            p50, p99 = (1e3 * float(v) for v in np.percentile(latencies, [50, 99]))
            latency = f"capture->publish p50 {p50:.2f} ms p99 {p99:.2f} ms"
        else:
            latency = "capture->publish: no frame published"
        self._log.info(f"stats over {span:.1f} s: captured {captured} ({captured / span:.1f} fps), published "
                       f"{published} ({published / span:.1f} Hz), {latency}")

    @property
    def finished(self) -> bool:
        return self.exit_status is not None

    def stop(self, executor, signal_number: int | None) -> None:
        if self.exit_status is None:
            self._log.info(f"stopping (signal {signal_number})")

    def destroy(self) -> None:
        self._stopping.set()
        with self._condition:
            self._condition.notify_all()
        stuck = False
        for thread in self._threads:
            thread.join(timeout=2.0)
            stuck |= thread.is_alive()
        # A capture thread blocked inside the source (a stalled stream) still uses the capture: leave it to exit.
        if self.capture is not None and not stuck:
            self.capture.release()
        self.node.destroy_node()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m robot_rl.drivers.camera_node",
        description="An OpenCV capture source (V4L2 camera, video file, stream) as a ROS 2 image topic. "
                    "Parameters go after --ros-args (e.g. --ros-args -p source:=/dev/video0 -p name:=front).")
    parser.add_argument("--node-name", default=NODE_NAME)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the camera node until SIGINT / SIGTERM (or its source ends or is lost); returns the exit status."""
    from robot_rl.ros.node_util import parse_node_arguments, run_node

    argv = list(sys.argv if argv is None else argv)
    args = parse_node_arguments(_parser(), argv)
    return run_node(lambda: CameraNode(node_name=args.node_name), argv, args.node_name, PARAMETERS, check_parameters)


if __name__ == "__main__":
    sys.exit(main())
