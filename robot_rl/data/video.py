"""Write camera frames to a video file with OpenCV."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np


def tile_frames(streams: Sequence[np.ndarray]) -> np.ndarray:
    """Tile (T, H, W, 3) RGB streams side by side, resizing to the tallest one."""
    height = max(s.shape[1] for s in streams)
    resized = []
    for stream in streams:
        if stream.shape[1] != height:
            width = round(stream.shape[2] * height / stream.shape[1])
            stream = np.stack([cv2.resize(f, (width, height), interpolation=cv2.INTER_AREA) for f in stream])
        resized.append(stream)
    return np.concatenate(resized, axis=2)


def write_video(path: str | Path, streams: Sequence[np.ndarray], fps: float) -> int:
    """Write RGB uint8 (T, H, W, 3) streams, tiled side by side, to an mp4; returns the number of frames."""
    frames = tile_frames(streams)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"expected uint8 frames (T, H, W, 3), got {frames.dtype} {frames.shape}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    height, width = frames.shape[1:3]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (width, height))
    if not writer.isOpened():
        raise OSError(f"OpenCV cannot open a video writer for {path}")
    try:
        for frame in frames:
            writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    finally:
        writer.release()
    return len(frames)
