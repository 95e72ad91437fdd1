"""H.264 video files (PyAV / libx264, yuv420p: what browsers play): tiled camera streams with per-frame captions."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

from robot_rl.core.files import atomic_path

CODEC = "libx264"
PIXEL_FORMAT = "yuv420p"


def tile_frames(streams: Sequence[np.ndarray]) -> np.ndarray:
    """Tile (T, H, W, 3) RGB streams side by side, resizing to the tallest one."""
    if not streams:
        raise ValueError("no video streams given")
    lengths = {len(s) for s in streams}
    if len(lengths) != 1:
        raise ValueError(f"video streams differ in length: {[len(s) for s in streams]} frames")
    height = max(s.shape[1] for s in streams)
    resized = []
    for stream in streams:
        if stream.shape[1] != height:
            width = round(stream.shape[2] * height / stream.shape[1])
            stream = np.stack([cv2.resize(f, (width, height), interpolation=cv2.INTER_AREA) for f in stream])
        resized.append(stream)
    return np.concatenate(resized, axis=2)


def draw_caption(frame: np.ndarray, text: str) -> np.ndarray:
    """A copy of an RGB frame with `text` in its top-left corner, white on a darkened box: readable on any
    background, even on a 64 px camera frame (where an outline around such small letters smears them)."""
    frame = np.ascontiguousarray(frame).copy()
    if not text:
        return frame
    height, width = frame.shape[:2]
    font = cv2.FONT_HERSHEY_SIMPLEX
    scale = max(0.3, height / 240)
    thickness = max(1, round(scale))
    (text_width, text_height), baseline = cv2.getTextSize(text, font, scale, thickness)
    if text_width > width - 4:  # shrink to fit rather than clip
        scale *= (width - 4) / text_width
        (text_width, text_height), baseline = cv2.getTextSize(text, font, scale, thickness)
    box = frame[: min(height, text_height + baseline + 4), : min(width, text_width + 4)]
    box[:] = (box * 0.3).astype(np.uint8)
    cv2.putText(frame, text, (2, 2 + text_height), font, scale, (255, 255, 255), thickness, cv2.LINE_AA)
    return frame


def pad_to_even(frame: np.ndarray) -> np.ndarray:
    """Pad the bottom / right edge with black to an even height and width (yuv420p needs both even)."""
    height, width = frame.shape[:2]
    if height % 2 == 0 and width % 2 == 0:
        return frame
    return np.pad(frame, ((0, height % 2), (0, width % 2), (0, 0)))


def video_rate(fps: float) -> Fraction:
    """A frame rate as the exact fraction the encoder needs (12.5 -> 25/2)."""
    if not np.isfinite(fps) or fps <= 0:
        raise ValueError(f"video fps must be a positive number, got {fps}")
    return Fraction(float(fps)).limit_denominator(1001)


class VideoEncoder:
    """Encodes RGB uint8 frames of one size to an H.264 mp4; frame i is shown at i / fps seconds."""

    def __init__(self, path: str | Path, width: int, height: int, fps: float, *, crf: int = 20,
                 gop: int | None = None):
        if width % 2 or height % 2:
            raise ValueError(f"H.264 (yuv420p) needs an even width and height, got {width}x{height}")
        self.path = Path(path)
        self.width, self.height = int(width), int(height)
        options = {"crf": str(int(crf)), "bf": "0"}  # no B-frames: presentation order == decode order, exact pts
        if gop is not None:
            options["g"] = str(int(gop))
        self._container = av.open(str(self.path), mode="w", format="mp4")
        try:
            self._stream = self._container.add_stream(CODEC, rate=video_rate(fps), options=options)
            self._stream.width, self._stream.height = self.width, self.height
            self._stream.pix_fmt = PIXEL_FORMAT
        except Exception:
            self._container.close()
            raise
        self.frames = 0
        self.encoded_bytes = 0

    def write(self, frame: np.ndarray) -> None:
        if frame.shape != (self.height, self.width, 3) or frame.dtype != np.uint8:
            raise ValueError(
                f"{self.path}: frame is {frame.dtype}{frame.shape}, this video takes uint8{(self.height, self.width, 3)}"
            )
        video_frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
        video_frame.pts = self.frames
        self._mux(self._stream.encode(video_frame))
        self.frames += 1

    def _mux(self, packets) -> None:
        for packet in packets:
            self.encoded_bytes += packet.size
            self._container.mux(packet)

    def close(self) -> None:
        if self._container is None:
            return
        try:
            self._mux(self._stream.encode(None))
        finally:
            self._container.close()
            self._container = None

    def __enter__(self) -> VideoEncoder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_video(
    path: str | Path, streams: Sequence[np.ndarray], fps: float, captions: Sequence[str] | None = None
) -> int:
    """Write RGB uint8 (T, H, W, 3) streams, tiled side by side, to an H.264 mp4; returns the number of frames.

    `captions` (one string per frame, e.g. "step 12/50  success") are drawn on the frames. Odd sizes are padded
    to even. The file appears complete or not at all.
    """
    frames = tile_frames(streams)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or len(frames) == 0:
        raise ValueError(f"expected uint8 frames (T>0, H, W, 3), got {frames.dtype} {frames.shape}")
    if captions is not None and len(captions) != len(frames):
        raise ValueError(f"{len(captions)} captions for {len(frames)} frames")
    path = Path(path)
    if path.suffix.lower() != ".mp4":
        raise ValueError(f"{path}: the video file name must end in .mp4")
    path.parent.mkdir(parents=True, exist_ok=True)
    height, width = pad_to_even(frames[0]).shape[:2]
    with atomic_path(path) as partial, VideoEncoder(partial, width, height, fps) as encoder:
        for index, frame in enumerate(frames):
            if captions is not None:
                frame = draw_caption(frame, captions[index])
            encoder.write(pad_to_even(frame))
    return len(frames)


def decode_video(path: str | Path) -> Iterator[tuple[float, np.ndarray]]:
    """Yield (presentation time in seconds, RGB uint8 frame) for every frame of a video file."""
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            yield float(frame.time), frame.to_ndarray(format="rgb24")
