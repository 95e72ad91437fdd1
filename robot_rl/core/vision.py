"""Camera frames -> the policy's square RGB images. Pure (numpy + OpenCV, no ROS): the actor node, the demo recorder
and the camera driver all use these, so a frame is transformed the same way when recording, training and acting.

- :func:`to_rgb`: a raw frame in a sensor_msgs/Image encoding -> (H, W, 3) uint8 RGB;
- :func:`decode_compressed` / :func:`encode_compressed`: JPEG / PNG bytes (sensor_msgs/CompressedImage) <-> RGB;
- :class:`ImageTransform`: region of interest, then centre-crop + resize or squash-resize to (size, size, 3).

Every malformed input raises :class:`ImageError` with a one-line reason, never another exception type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import cv2
import numpy as np


class ImageError(ValueError):
    """A frame cannot be converted (wrong shape / dtype / encoding, undecodable bytes, bad transform settings)."""


# encoding -> (channels, dtype); yuv422 is UYVY and yuv422_yuy2 is YUYV (ROS image_encodings / cv_bridge naming).
_ENCODINGS: dict[str, tuple[int, np.dtype]] = {
    "rgb8": (3, np.dtype(np.uint8)),
    "bgr8": (3, np.dtype(np.uint8)),
    "rgba8": (4, np.dtype(np.uint8)),
    "bgra8": (4, np.dtype(np.uint8)),
    "mono8": (1, np.dtype(np.uint8)),
    "mono16": (1, np.dtype(np.uint16)),
    "yuv422": (2, np.dtype(np.uint8)),
    "yuv422_yuy2": (2, np.dtype(np.uint8)),
}
ENCODINGS = tuple(_ENCODINGS)
"""Raw encodings :func:`to_rgb` accepts."""

_YUV_CODES = {
    "yuv422": cv2.COLOR_YUV2RGB_UYVY,
    "yuv422_yuy2": cv2.COLOR_YUV2RGB_YUY2,
}
COMPRESSED_FORMATS = ("jpeg", "png")
"""Codecs :func:`encode_compressed` writes (:func:`decode_compressed` reads whatever OpenCV recognises)."""
_CODEC_EXTENSIONS = {"jpeg": ".jpg", "jpg": ".jpg", "png": ".png"}
FITS = ("crop", "resize")


def _describe(image: Any) -> str:
    if isinstance(image, np.ndarray):
        return f"shape {image.shape} dtype {image.dtype}"
    return f"a {type(image).__name__}"


def to_rgb(image: np.ndarray, encoding: str) -> np.ndarray:
    """(H, W, 3) uint8 RGB from a frame in `encoding`'s layout ((H, W) or (H, W, 1) for mono, (H, W, 2) for YUV 4:2:2).

    mono16 is scaled to 8 bit (the high byte). rgb8 comes back as is and bgr8 as a reversed-channel view (no copy);
    :class:`ImageTransform` handles such a view without copying the full frame.
    """
    spec = _ENCODINGS.get(encoding) if isinstance(encoding, str) else None
    if spec is None:
        raise ImageError(f"unknown image encoding {encoding!r}; supported: {', '.join(ENCODINGS)}")
    channels, dtype = spec
    if not isinstance(image, np.ndarray):
        raise ImageError(f"{encoding} image must be a numpy array, got {_describe(image)}")
    if channels == 1 and image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    if channels == 1:
        expected = "(H, W)"
        ok_shape = image.ndim == 2
    else:
        expected = f"(H, W, {channels})"
        ok_shape = image.ndim == 3 and image.shape[2] == channels
    if not ok_shape or image.shape[0] == 0 or image.shape[1] == 0:
        raise ImageError(f"{encoding} image must have shape {expected} with H, W > 0, got {image.shape}")
    if image.dtype.kind != "u" or image.dtype.itemsize != dtype.itemsize:
        raise ImageError(f"{encoding} image must have dtype {dtype}, got {image.dtype}")
    if encoding == "rgb8":
        return image
    if encoding == "bgr8":
        return image[..., ::-1]
    if encoding == "mono8":
        return cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_GRAY2RGB)
    if encoding == "mono16":
        return cv2.cvtColor((image >> 8).astype(np.uint8), cv2.COLOR_GRAY2RGB)
    if encoding in _YUV_CODES:
        if image.shape[1] % 2:
            raise ImageError(f"{encoding} image width must be even (2 pixels share U and V), got {image.shape[1]}")
        return cv2.cvtColor(np.ascontiguousarray(image), _YUV_CODES[encoding])
    code = cv2.COLOR_RGBA2RGB if encoding == "rgba8" else cv2.COLOR_BGRA2RGB
    return cv2.cvtColor(np.ascontiguousarray(image), code)


def _as_bytes(data: Any) -> np.ndarray:
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1:
            raise ImageError(f"compressed data must be 1-D uint8, got {_describe(data)}")
        return data
    try:
        return np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    except (TypeError, ValueError) as error:
        raise ImageError(f"compressed data must be bytes-like, got {type(data).__name__}") from error


def decode_compressed(data: Any, format: str = "") -> np.ndarray:
    """(H, W, 3) uint8 RGB from JPEG / PNG bytes. `format` is a sensor_msgs/CompressedImage format string ("jpeg",
    "png", "rgb8; jpeg compressed bgr8", ...); the codec is recognised from the bytes, so '' works too."""
    if not isinstance(format, str):
        raise ImageError(f"compressed image format must be a string, got {type(format).__name__}")
    if "compresseddepth" in format.lower().replace(" ", ""):
        raise ImageError(f"compressed image format {format!r} (compressedDepth) is not supported; send a colour "
                         "or mono image")
    buffer = _as_bytes(data)
    if buffer.size == 0:
        raise ImageError(f"compressed image ({format or 'no format'}) has no data")
    log_level = cv2.utils.logging.getLogLevel()
    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)  # the caller reports bad frames, once
    try:
        decoded = cv2.imdecode(buffer, cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION)
    except cv2.error as error:
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else "OpenCV error"
        raise ImageError(f"cannot decode {buffer.size} bytes as {format or 'an image'}: {reason}") from None
    finally:
        cv2.utils.logging.setLogLevel(log_level)
    if decoded is None or decoded.ndim != 3 or decoded.shape[2] != 3 or decoded.size == 0:
        raise ImageError(f"cannot decode {buffer.size} bytes as {format or 'an image'} (not a JPEG / PNG image, "
                         "or truncated)")
    return decoded


def _check_rgb(rgb: Any, what: str = "RGB image") -> np.ndarray:
    if (not isinstance(rgb, np.ndarray) or rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8
            or rgb.shape[0] == 0 or rgb.shape[1] == 0):
        raise ImageError(f"{what} must be (H, W, 3) uint8 with H, W > 0, got {_describe(rgb)}")
    return rgb


def encode_compressed(rgb: np.ndarray, format: str = "jpeg", quality: int = 90) -> bytes:
    """JPEG (`quality` 1..100) or PNG (lossless; `quality` unused) bytes of an (H, W, 3) uint8 RGB image."""
    codec = _CODEC_EXTENSIONS.get(format.lower() if isinstance(format, str) else None)
    if codec is None:
        raise ImageError(f"unknown compressed format {format!r}; supported: {', '.join(COMPRESSED_FORMATS)}")
    _check_rgb(rgb)
    if isinstance(quality, bool) or not isinstance(quality, (int, np.integer)) or not 1 <= quality <= 100:
        raise ImageError(f"JPEG quality must be an int in [1, 100], got {quality!r}")
    bgr = cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2BGR)
    params = [cv2.IMWRITE_JPEG_QUALITY, int(quality)] if codec == ".jpg" else [cv2.IMWRITE_PNG_COMPRESSION, 1]
    ok, encoded = cv2.imencode(codec, bgr, params)
    if not ok:
        raise ImageError(f"OpenCV could not encode a {rgb.shape} image as {format}")
    return encoded.tobytes()


def _shrink(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """Area-average `image` down to (height, width). Halving steps first: OpenCV's 2x area reduction is vectorised,
    and a 640x480 frame -> 64x64 takes ~0.15 ms instead of ~0.7 ms for one non-integer area resize; the result differs
    from that by about one grey level (a slightly wider box filter, still no aliasing)."""
    while (image.shape[0] % 2 == 0 and image.shape[1] % 2 == 0
           and image.shape[0] >= 2 * height and image.shape[1] >= 2 * width):
        image = cv2.resize(image, (image.shape[1] // 2, image.shape[0] // 2), interpolation=cv2.INTER_AREA)
    if image.shape[:2] == (height, width):
        return image.copy()  # never hand back (a view of) the caller's frame
    return cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)


@dataclasses.dataclass(frozen=True)
class ImageTransform:
    """RGB frame -> (size, size, 3) uint8: cut `roi` [x, y, width, height], then `fit` it to a square of `size`.

    fit "crop": centre-crop to a square, then resize (keeps the aspect ratio); "resize": squash the whole region.
    Shrinking averages pixel areas (no aliasing); enlarging interpolates bilinearly.
    """

    size: int
    fit: str = "crop"
    roi: tuple[int, int, int, int] | None = None

    def __post_init__(self):
        if isinstance(self.size, bool) or not isinstance(self.size, (int, np.integer)) or not 1 <= self.size <= 4096:
            raise ImageError(f"image size must be an int in [1, 4096], got {self.size!r}")
        object.__setattr__(self, "size", int(self.size))
        if self.fit not in FITS:
            raise ImageError(f"image fit must be one of {', '.join(FITS)}, got {self.fit!r}")
        if self.roi is not None:
            roi = self.roi
            if (isinstance(roi, (str, bytes)) or not hasattr(roi, "__len__") or len(roi) != 4
                    or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in roi)):
                raise ImageError(f"image roi must be 4 ints [x, y, width, height], got {roi!r}")
            x, y, width, height = (int(v) for v in roi)
            if x < 0 or y < 0 or width <= 0 or height <= 0:
                raise ImageError(f"image roi [x, y, width, height] needs x, y >= 0 and width, height > 0, got "
                                 f"{[x, y, width, height]}")
            object.__setattr__(self, "roi", (x, y, width, height))

    def __call__(self, rgb: np.ndarray) -> np.ndarray:
        """The transformed image, a new C-contiguous (size, size, 3) uint8 array."""
        image = _check_rgb(rgb, "image to transform")
        if self.roi is not None:
            x, y, width, height = self.roi
            if x + width > image.shape[1] or y + height > image.shape[0]:
                raise ImageError(f"image roi [x, y, width, height] = {list(self.roi)} is outside the "
                                 f"{image.shape[1]}x{image.shape[0]} frame")
            image = image[y:y + height, x:x + width]
        if self.fit == "crop":
            height, width = image.shape[:2]
            side = min(height, width)
            top, left = (height - side) // 2, (width - side) // 2
            image = image[top:top + side, left:left + side]
        # A reversed-channel view (bgr8 frames from to_rgb): resize the underlying BGR and reverse the small result.
        reversed_channels = image.strides[2] < 0
        if reversed_channels:
            image = image[..., ::-1]
        if image.strides[1] != 3 * image.itemsize or image.strides[2] != image.itemsize:
            image = np.ascontiguousarray(image)  # pixels must be packed for OpenCV
        size = self.size
        if image.shape[0] >= size and image.shape[1] >= size:
            out = _shrink(image, size, size)
        else:
            out = cv2.resize(image, (size, size), interpolation=cv2.INTER_LINEAR)
        if reversed_channels:
            out = out[..., ::-1]
        return np.ascontiguousarray(out)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready settings (recorded in dataset attributes)."""
        return {"size": self.size, "fit": self.fit, "roi": None if self.roi is None else list(self.roi)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ImageTransform:
        """The transform `to_json` described; ImageError names a missing or unknown key."""
        if not isinstance(data, Mapping):
            raise ImageError(f"image transform must be a mapping, got {type(data).__name__}")
        unknown = sorted(set(data) - {"size", "fit", "roi"})
        if unknown:
            raise ImageError(f"image transform has unknown keys {unknown}; known: size, fit, roi")
        if "size" not in data:
            raise ImageError("image transform has no 'size'")
        roi = data.get("roi")
        if isinstance(roi, list):
            roi = tuple(roi)
        return cls(size=data["size"], fit=data.get("fit", "crop"), roi=roi)

    @classmethod
    def from_camera(cls, camera: Any, size: int) -> ImageTransform:
        """The transform of a robot file's camera (robot_rl.actor.robot_config.CameraConfig: fit, roi) to `size`."""
        return cls(size=size, fit=camera.fit, roi=None if camera.roi is None else tuple(camera.roi))


def transform_mismatches(recorded: Mapping[str, Any], robot: Any, size: int) -> list[str]:
    """How the image transforms a dataset recorded ({"images/<camera>": ImageTransform.to_json()}) differ from what
    the robot file's cameras make at `size`: one line per camera ([] when they agree). Demos whose images were cut
    or fitted another way than the robot's live frames teach a policy the wrong picture."""
    problems = []
    for key, data in sorted(recorded.items()):
        camera = key[len("images/"):] if key.startswith("images/") else key
        if camera not in robot.camera_names:
            problems.append(f"{key}: the robot file {robot.path or robot.name} has no camera {camera!r}")
            continue
        try:
            was = ImageTransform.from_json(data)
        except ImageError as error:
            problems.append(f"{key}: recorded transform unreadable ({error})")
            continue
        now = ImageTransform.from_camera(robot.camera(camera), size)
        if was != now:
            problems.append(f"{key}: recorded with {was.to_json()}, the robot file's cameras.{camera} makes "
                            f"{now.to_json()}")
    return problems
