"""numpy <-> ROS 2 message conversions, with no per-element Python loops.

Speed rules (measured, see ROS2-NOTES.md): message array fields are ``array.array``; we fill them with
``array.array(typecode).frombytes(<numpy buffer>)`` (one memcpy, and the generated setters accept an ``array.array``
without a second copy when the message is built with ``check_fields=True``; with checks off the setter would copy
again), and read them with ``np.frombuffer`` (zero-copy).
**Arrays returned by the ``*_from_msg`` functions are views into the message**: copy one before mutating it if the
message lives on.

Conventions:
- Time stamps are float seconds (``stamp_to_seconds`` / ``stamp_from_seconds``), non-negative.
- Quaternions are **wxyz** (scalar first) in robot_rl, **xyzw** in ROS ``geometry_msgs/Quaternion``; the pose
  functions take and return ``quaternion_wxyz`` and do the reordering.
- Images are ``(height, width, channels)`` (``(height, width)`` for mono encodings) in the encoding's own channel
  order; ``image_from_msg(..., rgb=True)`` returns bgr8 images as rgb (a reversed-channel view).
- Internal topics carry opaque bytes (msgpack, see robot_rl.core.codec) in ``std_msgs/UInt8MultiArray``.
"""

from __future__ import annotations

import array
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from builtin_interfaces.msg import Duration, Time
from geometry_msgs.msg import PoseStamped, TwistStamped
from sensor_msgs.msg import CompressedImage, Image, JointState, Joy
from std_msgs.msg import Float32MultiArray, Header, UInt8MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from robot_rl.core.vision import ImageError, decode_compressed, encode_compressed

_NANOSECONDS_PER_SECOND = 1_000_000_000
_MAX_STAMP_SECONDS = 2**31 - 1
_QUATERNION_NORM_TOLERANCE = 1e-3


class MessageError(ValueError):
    """A message cannot be converted (malformed, wrong size, unknown encoding); the message names the problem."""


@dataclass(frozen=True)
class ImageEncoding:
    """A supported sensor_msgs/Image encoding: channel count and per-channel unsigned integer size in bytes."""

    name: str
    channels: int
    bytes_per_channel: int

    @property
    def bytes_per_pixel(self) -> int:
        return self.channels * self.bytes_per_channel

    def dtype(self, is_bigendian: bool) -> np.dtype:
        if self.bytes_per_channel == 1:
            return np.dtype(np.uint8)
        return np.dtype(f"{'>' if is_bigendian else '<'}u{self.bytes_per_channel}")


IMAGE_ENCODINGS: dict[str, ImageEncoding] = {
    e.name: e
    for e in (
        ImageEncoding("rgb8", 3, 1),
        ImageEncoding("bgr8", 3, 1),
        ImageEncoding("rgba8", 4, 1),
        ImageEncoding("bgra8", 4, 1),
        ImageEncoding("mono8", 1, 1),
        ImageEncoding("mono16", 1, 2),
        ImageEncoding("yuv422", 2, 1),  # UYVY, two bytes per pixel; robot_rl.core.vision.to_rgb converts it
        ImageEncoding("yuv422_yuy2", 2, 1),  # YUYV
    )
}


@dataclass(frozen=True)
class JointStateArrays:
    """A sensor_msgs/JointState as arrays: names, positions, velocities, efforts (empty when absent), stamp."""

    names: tuple[str, ...]
    positions: np.ndarray
    velocities: np.ndarray
    efforts: np.ndarray
    stamp: float
    frame_id: str = ""


# --------------------------------------------------------------------------------------------------- headers / time


def stamp_from_seconds(seconds: float) -> Time:
    """builtin_interfaces/Time for `seconds` (non-negative, finite), rounded to the nanosecond."""
    if not math.isfinite(seconds) or seconds < 0 or seconds > _MAX_STAMP_SECONDS:
        raise MessageError(f"time stamp must be finite seconds in [0, {_MAX_STAMP_SECONDS}], got {seconds!r}")
    sec, nanosec = divmod(round(seconds * _NANOSECONDS_PER_SECOND), _NANOSECONDS_PER_SECOND)
    return Time(sec=int(sec), nanosec=int(nanosec))


def stamp_to_seconds(stamp: Time) -> float:
    """Float seconds of a builtin_interfaces/Time."""
    return stamp.sec + stamp.nanosec * 1e-9


def make_header(stamp: float = 0.0, frame_id: str = "") -> Header:
    """std_msgs/Header with a stamp in float seconds and a frame id."""
    return Header(stamp=stamp_from_seconds(stamp), frame_id=frame_id)


# --------------------------------------------------------------------------------------------------- buffers


def _array_field(typecode: str, values: np.ndarray | Sequence[float] | None, dtype: np.dtype, what: str) -> array.array:
    """An array.array of `typecode` filled from `values` with one memcpy (no per-element loop)."""
    field = array.array(typecode)
    if values is None:
        return field
    flat = np.asarray(values)
    if flat.ndim != 1:
        raise MessageError(f"{what} must be 1-D, got shape {flat.shape}")
    if flat.dtype != dtype:
        if dtype.kind == "f":
            flat = flat.astype(dtype)
        else:
            if flat.dtype.kind not in "biu":
                raise MessageError(f"{what} must hold integers, got dtype {flat.dtype}")
            info = np.iinfo(dtype)
            if flat.size and (flat.min() < info.min or flat.max() > info.max):
                raise MessageError(f"{what} values must fit {dtype}, got range [{flat.min()}, {flat.max()}]")
            flat = flat.astype(dtype)
    field.frombytes(np.ascontiguousarray(flat).data.cast("B"))
    return field


def _view(field: array.array | Sequence, dtype: np.dtype) -> np.ndarray:
    """Zero-copy numpy view of an array.array message field (a copy for other sequences)."""
    if isinstance(field, array.array):
        return np.frombuffer(field, dtype=dtype) if len(field) else np.empty(0, dtype)
    return np.asarray(field, dtype=dtype)


def _vector(values, size: int, what: str) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float64)
    if vector.shape != (size,):
        raise MessageError(f"{what} must have shape ({size},), got {vector.shape}")
    if not np.all(np.isfinite(vector)):
        raise MessageError(f"{what} must be finite, got {vector.tolist()}")
    return vector


_FLOAT64 = np.dtype(np.float64)
_FLOAT32 = np.dtype(np.float32)
_INT32 = np.dtype(np.int32)

# --------------------------------------------------------------------------------------------------- Image


def image_to_msg(image: np.ndarray, encoding: str = "rgb8", stamp: float = 0.0, frame_id: str = "") -> Image:
    """sensor_msgs/Image from a (H, W, C) or (H, W) array in `encoding`'s channel order (rows packed, no padding)."""
    spec = IMAGE_ENCODINGS.get(encoding)
    if spec is None:
        raise MessageError(f"unknown image encoding {encoding!r}; supported: {sorted(IMAGE_ENCODINGS)}")
    image = np.asarray(image)
    if image.ndim == 3 and spec.channels == 1 and image.shape[2] == 1:
        image = image[:, :, 0]
    expected_ndim = 2 if spec.channels == 1 else 3
    if image.ndim != expected_ndim or (expected_ndim == 3 and image.shape[2] != spec.channels):
        channels = "" if spec.channels == 1 else f", {spec.channels}"
        raise MessageError(f"{encoding} image must have shape (H, W{channels}), got {image.shape}")
    if image.dtype.kind != "u" or image.dtype.itemsize != spec.bytes_per_channel:
        raise MessageError(f"{encoding} image must have dtype uint{8 * spec.bytes_per_channel}, got {image.dtype}")
    height, width = image.shape[:2]
    msg = Image(header=make_header(stamp, frame_id), height=height, width=width, encoding=encoding, check_fields=True)
    byteorder = image.dtype.byteorder
    big_endian = byteorder == ">" or (byteorder == "=" and not np.little_endian)
    msg.is_bigendian = int(spec.bytes_per_channel > 1 and big_endian)
    msg.step = width * spec.bytes_per_pixel
    data = array.array("B")
    data.frombytes(np.ascontiguousarray(image).data.cast("B"))
    msg.data = data
    return msg


def image_from_msg(msg: Image, *, rgb: bool = False) -> np.ndarray:
    """(H, W, C) / (H, W) array viewing msg.data; checks encoding, step and data length. `rgb`: bgr(a)8 -> rgb(a)."""
    spec = IMAGE_ENCODINGS.get(msg.encoding)
    if spec is None:
        raise MessageError(f"unknown image encoding {msg.encoding!r}; supported: {sorted(IMAGE_ENCODINGS)}")
    height, width, step = msg.height, msg.width, msg.step
    row_bytes = width * spec.bytes_per_pixel
    if step < row_bytes:
        raise MessageError(
            f"{msg.encoding} image step {step} is smaller than width*bytes_per_pixel = {width}*{spec.bytes_per_pixel}"
        )
    if len(msg.data) != height * step:
        raise MessageError(
            f"image data has {len(msg.data)} bytes, expected height*step = {height}*{step} = {height * step}"
        )
    if msg.is_bigendian not in (0, 1, True, False):
        raise MessageError(f"image is_bigendian must be 0 or 1, got {msg.is_bigendian}")
    rows = _view(msg.data, np.dtype(np.uint8)).reshape(height, step)
    if step != row_bytes:
        rows = rows[:, :row_bytes]  # drop row padding; still a view
    shape = (height, width) if spec.channels == 1 else (height, width, spec.channels)
    dtype = spec.dtype(bool(msg.is_bigendian))
    if dtype.itemsize == 1:
        image = rows.reshape(shape)
    elif rows.flags.c_contiguous and height and width:
        image = rows.view(dtype).reshape(shape)
    else:  # padded multi-byte rows: one copy to get aligned items
        image = np.ascontiguousarray(rows).view(dtype).reshape(shape)
    if rgb and msg.encoding in ("bgr8", "bgra8"):
        image = image[..., [2, 1, 0, 3]] if spec.channels == 4 else image[..., ::-1]
    return image


# --------------------------------------------------------------------------------------------------- CompressedImage


def compressed_image_to_msg(rgb: np.ndarray, format: str = "jpeg", stamp: float = 0.0, frame_id: str = "",
                            quality: int = 90) -> CompressedImage:
    """sensor_msgs/CompressedImage of an (H, W, 3) uint8 RGB image, JPEG or PNG, with image_transport's format
    string (``rgb8; jpeg compressed bgr8``)."""
    try:
        data = encode_compressed(rgb, format, quality)
    except ImageError as error:
        raise MessageError(str(error)) from None
    msg = CompressedImage(header=make_header(stamp, frame_id), format=f"rgb8; {format.lower()} compressed bgr8",
                          check_fields=True)
    payload = array.array("B")
    payload.frombytes(data)
    msg.data = payload
    return msg


def compressed_image_from_msg(msg: CompressedImage) -> np.ndarray:
    """(H, W, 3) uint8 RGB decoded from a CompressedImage (JPEG / PNG; colour or mono)."""
    data = msg.data
    buffer = memoryview(data) if isinstance(data, array.array) else bytes(data)
    try:
        return decode_compressed(buffer, msg.format)
    except ImageError as error:
        raise MessageError(str(error)) from None


# --------------------------------------------------------------------------------------------------- JointTrajectory


def _names(joint_names: Sequence[str], what: str) -> list[str]:
    if isinstance(joint_names, str):
        raise MessageError(f"{what} must be a list of joint names, got the string {joint_names!r}")
    names = [str(n) for n in joint_names]
    if not names or any(not n for n in names):
        raise MessageError(f"{what} must be non-empty names, got {names}")
    if len(set(names)) != len(names):
        raise MessageError(f"{what} has duplicates: {names}")
    return names


def joint_trajectory_to_msg(joint_names: Sequence[str], positions, time_from_start_s: float,
                            stamp: float = 0.0) -> JointTrajectory:
    """trajectory_msgs/JointTrajectory with one point: reach `positions` `time_from_start_s` seconds after `stamp`
    (stamp 0: as soon as the controller receives it)."""
    names = _names(joint_names, "joint trajectory joint names")
    values = _vector(positions, len(names), "joint trajectory positions")
    if not (math.isfinite(time_from_start_s) and 0 <= time_from_start_s <= _MAX_STAMP_SECONDS):
        raise MessageError(f"time_from_start must be finite non-negative seconds, got {time_from_start_s!r}")
    sec, nanosec = divmod(round(time_from_start_s * _NANOSECONDS_PER_SECOND), _NANOSECONDS_PER_SECOND)
    point = JointTrajectoryPoint(time_from_start=Duration(sec=int(sec), nanosec=int(nanosec)), check_fields=True)
    point.positions = _array_field("d", values, _FLOAT64, "joint trajectory positions")
    return JointTrajectory(header=make_header(stamp), joint_names=names, points=[point])


def joint_trajectory_from_msg(msg: JointTrajectory) -> tuple[tuple[str, ...], np.ndarray, float]:
    """(joint names, positions of the first point (float64), its time_from_start [s]) of a JointTrajectory."""
    names = tuple(_names(msg.joint_names, "joint trajectory joint names"))
    if not msg.points:
        raise MessageError("joint trajectory has no points")
    point = msg.points[0]
    positions = _view(point.positions, _FLOAT64)
    if positions.shape != (len(names),):
        raise MessageError(f"joint trajectory point has {positions.shape[0]} positions for {len(names)} joints")
    if not np.all(np.isfinite(positions)):
        raise MessageError(f"joint trajectory positions must be finite, got {positions.tolist()}")
    duration = point.time_from_start
    seconds = duration.sec + duration.nanosec * 1e-9
    if seconds < 0:
        raise MessageError(f"joint trajectory time_from_start must be non-negative, got {seconds} s")
    return names, positions, seconds


# --------------------------------------------------------------------------------------------------- JointState


def joint_state_to_msg(
    names: Sequence[str],
    positions,
    velocities=None,
    efforts=None,
    stamp: float = 0.0,
    frame_id: str = "",
) -> JointState:
    """sensor_msgs/JointState; velocities / efforts may be omitted (sent empty) but otherwise match names in length."""
    names = [str(n) for n in names]
    msg = JointState(header=make_header(stamp, frame_id), name=names, check_fields=True)
    msg.position = _array_field("d", positions, _FLOAT64, "joint positions")
    msg.velocity = _array_field("d", velocities, _FLOAT64, "joint velocities")
    msg.effort = _array_field("d", efforts, _FLOAT64, "joint efforts")
    _check_joint_lengths(msg)
    return msg


def _check_joint_lengths(msg: JointState) -> None:
    count = len(msg.name)
    for field in ("position", "velocity", "effort"):
        size = len(getattr(msg, field))
        if size not in (0, count):
            raise MessageError(
                f"JointState {field} has {size} values for {count} joint names (must be {count} or empty)"
            )


def joint_state_from_msg(msg: JointState) -> JointStateArrays:
    """JointStateArrays viewing the message's float64 arrays; checks every array matches the names (or is empty)."""
    _check_joint_lengths(msg)
    return JointStateArrays(
        names=tuple(msg.name),
        positions=_view(msg.position, _FLOAT64),
        velocities=_view(msg.velocity, _FLOAT64),
        efforts=_view(msg.effort, _FLOAT64),
        stamp=stamp_to_seconds(msg.header.stamp),
        frame_id=msg.header.frame_id,
    )


# --------------------------------------------------------------------------------------------------- PoseStamped


def _unit_quaternion(quaternion, what: str) -> np.ndarray:
    q = _vector(quaternion, 4, what)
    norm = float(np.linalg.norm(q))
    if abs(norm - 1.0) > _QUATERNION_NORM_TOLERANCE:
        raise MessageError(f"{what} must be a unit quaternion, got norm {norm:.6g}")
    return q


def pose_to_msg(position, quaternion_wxyz, stamp: float = 0.0, frame_id: str = "") -> PoseStamped:
    """geometry_msgs/PoseStamped from position (3,) and a unit quaternion in robot_rl's **wxyz** order."""
    p = _vector(position, 3, "position")
    w, x, y, z = _unit_quaternion(quaternion_wxyz, "quaternion_wxyz")
    msg = PoseStamped(header=make_header(stamp, frame_id))
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = (float(v) for v in p)
    o = msg.pose.orientation  # ROS order is xyzw
    o.x, o.y, o.z, o.w = float(x), float(y), float(z), float(w)
    return msg


def pose_from_msg(msg: PoseStamped) -> tuple[np.ndarray, np.ndarray]:
    """(position (3,), quaternion_wxyz (4,)) from a PoseStamped (ROS xyzw -> wxyz); rejects non-unit quaternions."""
    p, o = msg.pose.position, msg.pose.orientation
    position = _vector((p.x, p.y, p.z), 3, "pose position")
    quaternion_wxyz = _unit_quaternion((o.w, o.x, o.y, o.z), "pose orientation")
    return position, quaternion_wxyz


# --------------------------------------------------------------------------------------------------- TwistStamped


def twist_to_msg(linear, angular, stamp: float = 0.0, frame_id: str = "") -> TwistStamped:
    """geometry_msgs/TwistStamped from linear (3,) and angular (3,) velocities."""
    v, w = _vector(linear, 3, "linear velocity"), _vector(angular, 3, "angular velocity")
    msg = TwistStamped(header=make_header(stamp, frame_id))
    msg.twist.linear.x, msg.twist.linear.y, msg.twist.linear.z = (float(a) for a in v)
    msg.twist.angular.x, msg.twist.angular.y, msg.twist.angular.z = (float(a) for a in w)
    return msg


def twist_from_msg(msg: TwistStamped) -> tuple[np.ndarray, np.ndarray]:
    """(linear (3,), angular (3,)) from a TwistStamped; rejects non-finite values."""
    v, w = msg.twist.linear, msg.twist.angular
    return _vector((v.x, v.y, v.z), 3, "linear velocity"), _vector((w.x, w.y, w.z), 3, "angular velocity")


# --------------------------------------------------------------------------------------------------- Joy


def joy_to_msg(axes, buttons, stamp: float = 0.0, frame_id: str = "") -> Joy:
    """sensor_msgs/Joy from axes (float32) and buttons (int32)."""
    msg = Joy(header=make_header(stamp, frame_id), check_fields=True)
    msg.axes = _array_field("f", axes, _FLOAT32, "joy axes")
    msg.buttons = _array_field("i", buttons, _INT32, "joy buttons")
    return msg


def joy_from_msg(msg: Joy) -> tuple[np.ndarray, np.ndarray]:
    """(axes float32, buttons int32) viewing the Joy message's arrays."""
    return _view(msg.axes, _FLOAT32), _view(msg.buttons, _INT32)


# --------------------------------------------------------------------------------------------------- float vectors


def floats_to_msg(values) -> Float32MultiArray:
    """std_msgs/Float32MultiArray holding a 1-D float vector (layout left empty)."""
    msg = Float32MultiArray(check_fields=True)
    msg.data = _array_field("f", values, _FLOAT32, "float vector")
    return msg


def floats_from_msg(msg: Float32MultiArray, size: int | None = None) -> np.ndarray:
    """The float32 vector of a Float32MultiArray (a view); rejects non-finite values and, if given, a wrong size."""
    vector = _view(msg.data, _FLOAT32)
    if size is not None and vector.shape != (size,):
        raise MessageError(f"float vector must have shape ({size},), got {vector.shape}")
    if not np.all(np.isfinite(vector)):
        raise MessageError(f"float vector must be finite, got {vector.tolist()}")
    return vector


# --------------------------------------------------------------------------------------------------- bytes payloads


def bytes_to_msg(payload: bytes | bytearray | memoryview) -> UInt8MultiArray:
    """std_msgs/UInt8MultiArray carrying `payload` (one memcpy into an array.array; layout left empty)."""
    data = array.array("B")
    try:
        data.frombytes(memoryview(payload).cast("B"))
    except TypeError as error:
        raise MessageError(f"payload must be a bytes-like object, got {type(payload).__name__}") from error
    msg = UInt8MultiArray(check_fields=True)
    msg.data = data
    return msg


def msg_to_bytes(msg: UInt8MultiArray) -> bytes:
    """The payload of a UInt8MultiArray as bytes (one copy; use payload_view for none)."""
    data = msg.data
    return data.tobytes() if isinstance(data, array.array) else bytes(data)


def payload_view(msg: UInt8MultiArray) -> memoryview:
    """Zero-copy read-only memoryview of a UInt8MultiArray payload (valid while the message lives)."""
    data = msg.data
    view = memoryview(data) if isinstance(data, array.array) else memoryview(bytes(data))
    return view.toreadonly()
