"""numpy <-> ROS 2 message conversions: round trips of every type, malformed messages raise MessageError."""

import numpy as np
import pytest

pytest.importorskip("rclpy")
pytest.importorskip("sensor_msgs.msg")
from builtin_interfaces.msg import Time  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from sensor_msgs.msg import CompressedImage  # noqa: E402
from std_msgs.msg import UInt8MultiArray  # noqa: E402
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint  # noqa: E402

from robot_rl.core import codec  # noqa: E402
from robot_rl.ros.convert import (  # noqa: E402
    MessageError,
    bytes_to_msg,
    compressed_image_from_msg,
    compressed_image_to_msg,
    image_from_msg,
    image_to_msg,
    joint_state_from_msg,
    joint_state_to_msg,
    joint_trajectory_from_msg,
    joint_trajectory_to_msg,
    joy_from_msg,
    joy_to_msg,
    make_header,
    msg_to_bytes,
    payload_view,
    pose_from_msg,
    pose_to_msg,
    stamp_from_seconds,
    stamp_to_seconds,
    twist_from_msg,
    twist_to_msg,
)


def _random_image(shape, dtype=np.uint8, seed=0):
    return np.random.default_rng(seed).integers(0, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)


def test_stamps_round_trip_to_the_nanosecond():
    for seconds in (0.0, 1.5, 1_700_000_000.123456789, 0.999999999):
        stamp = stamp_from_seconds(seconds)
        assert isinstance(stamp, Time) and 0 <= stamp.nanosec < 1_000_000_000
        assert stamp_to_seconds(stamp) == pytest.approx(seconds, abs=1e-9 * max(1.0, seconds) * 1e-6 + 1e-9)
    assert stamp_from_seconds(2.9999999999).sec == 3 and stamp_from_seconds(2.9999999999).nanosec == 0
    header = make_header(12.25, "base")
    assert header.frame_id == "base" and stamp_to_seconds(header.stamp) == 12.25
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(MessageError, match="time stamp"):
            stamp_from_seconds(bad)


@pytest.mark.parametrize("encoding,shape", [("rgb8", (480, 640, 3)), ("bgr8", (48, 64, 3)), ("mono8", (48, 64)),
                                            ("rgba8", (5, 7, 4))])
def test_image_round_trip(encoding, shape):
    image = _random_image(shape)
    msg = image_to_msg(image, encoding, stamp=3.5, frame_id="camera_front")
    assert (msg.height, msg.width, msg.encoding, msg.is_bigendian) == (shape[0], shape[1], encoding, 0)
    assert msg.step == shape[1] * (shape[2] if len(shape) == 3 else 1)
    assert msg.header.frame_id == "camera_front" and stamp_to_seconds(msg.header.stamp) == 3.5
    decoded = image_from_msg(msg)
    assert decoded.dtype == np.uint8 and decoded.shape == shape
    np.testing.assert_array_equal(decoded, image)
    assert np.shares_memory(decoded, np.frombuffer(msg.data, np.uint8)), "decoding must be a zero-copy view"


def test_bgr_image_converts_to_rgb_on_request_and_mono_accepts_a_channel_axis():
    image = _random_image((4, 6, 3))
    msg = image_to_msg(image, "bgr8")
    np.testing.assert_array_equal(image_from_msg(msg, rgb=True), image[..., ::-1])
    np.testing.assert_array_equal(image_from_msg(image_to_msg(image, "rgb8"), rgb=True), image)  # already rgb
    mono = _random_image((4, 6, 1))
    np.testing.assert_array_equal(image_from_msg(image_to_msg(mono, "mono8")), mono[:, :, 0])


def test_mono16_respects_byte_order():
    depth = _random_image((6, 5), np.uint16)
    little = image_to_msg(depth.astype("<u2"), "mono16")
    big = image_to_msg(depth.astype(">u2"), "mono16")
    assert (little.is_bigendian, big.is_bigendian) == (0, 1) and little.step == 10
    np.testing.assert_array_equal(image_from_msg(little), depth)
    np.testing.assert_array_equal(image_from_msg(big), depth)


def test_image_rows_with_padding_are_read_through_step():
    image = _random_image((3, 4, 3))
    padded = np.zeros((3, 16), np.uint8)
    padded[:, :12] = image.reshape(3, 12)
    msg = Image(height=3, width=4, encoding="rgb8", step=16)
    msg.data = padded.tobytes()
    np.testing.assert_array_equal(image_from_msg(msg), image)


def _image_msg(height=2, width=3, encoding="rgb8", step=9, data_length=18):
    msg = Image(height=height, width=width, encoding=encoding, step=step)
    msg.data = bytes(data_length)
    return msg


@pytest.mark.parametrize(
    "msg,problem",
    [
        (_image_msg(data_length=17), "17 bytes, expected height\\*step"),
        (_image_msg(data_length=27), "27 bytes"),
        (_image_msg(step=8, data_length=16), "step 8 is smaller"),
        (_image_msg(encoding="bayer_rggb8"), "unknown image encoding 'bayer_rggb8'"),
        (_image_msg(encoding=""), "unknown image encoding ''"),
    ],
)
def test_malformed_images_raise_message_error_naming_the_problem(msg, problem):
    with pytest.raises(MessageError, match=problem):
        image_from_msg(msg)


def test_image_to_msg_rejects_wrong_shapes_dtypes_and_encodings():
    with pytest.raises(MessageError, match="unknown image encoding"):
        image_to_msg(_random_image((2, 2, 3)), "jpeg")
    with pytest.raises(MessageError, match="shape"):
        image_to_msg(_random_image((2, 2, 4)), "rgb8")
    with pytest.raises(MessageError, match="shape"):
        image_to_msg(_random_image((2, 2)), "rgb8")
    with pytest.raises(MessageError, match="dtype uint8"):
        image_to_msg(np.zeros((2, 2, 3), np.float32), "rgb8")


def test_non_contiguous_image_is_packed():
    image = _random_image((8, 8, 3))[::2, ::2]
    np.testing.assert_array_equal(image_from_msg(image_to_msg(image)), image)


def test_joint_state_round_trip_and_length_checks():
    names = ["joint1", "joint2", "joint3"]
    positions, velocities = np.array([0.1, -0.2, 0.3]), np.array([1.0, 2.0, 3.0], np.float32)
    msg = joint_state_to_msg(names, positions, velocities, stamp=2.0, frame_id="base")
    state = joint_state_from_msg(msg)
    assert state.names == tuple(names) and state.stamp == 2.0 and state.frame_id == "base"
    np.testing.assert_array_equal(state.positions, positions)
    np.testing.assert_array_equal(state.velocities, velocities.astype(np.float64))
    assert state.efforts.shape == (0,) and state.positions.dtype == np.float64
    with pytest.raises(MessageError, match="velocity has 2 values for 3 joint names"):
        joint_state_to_msg(names, positions, [1.0, 2.0])
    bad = joint_state_to_msg(names, positions)
    bad.effort = [1.0]
    with pytest.raises(MessageError, match="effort has 1 values for 3 joint names"):
        joint_state_from_msg(bad)
    with pytest.raises(MessageError, match="1-D"):
        joint_state_to_msg(names, np.zeros((3, 1)))


def test_pose_uses_wxyz_here_and_xyzw_in_ros():
    quaternion_wxyz = np.array([0.5, 0.5, -0.5, 0.5])
    msg = pose_to_msg([1.0, 2.0, 3.0], quaternion_wxyz, stamp=1.0, frame_id="base")
    o = msg.pose.orientation
    assert (o.x, o.y, o.z, o.w) == (0.5, -0.5, 0.5, 0.5)
    position, decoded = pose_from_msg(msg)
    np.testing.assert_array_equal(position, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(decoded, quaternion_wxyz)
    assert msg.header.frame_id == "base"
    with pytest.raises(MessageError, match="unit quaternion"):
        pose_to_msg([0, 0, 0], [2.0, 0, 0, 0])
    with pytest.raises(MessageError, match="finite"):
        pose_to_msg([0, float("nan"), 0], [1.0, 0, 0, 0])
    zero = pose_to_msg([0, 0, 0], [1.0, 0, 0, 0])
    zero.pose.orientation.w = 0.0  # all-zero quaternion from a broken driver
    with pytest.raises(MessageError, match="unit quaternion"):
        pose_from_msg(zero)


def test_twist_and_joy_round_trip():
    linear, angular = twist_from_msg(twist_to_msg([0.1, 0.2, 0.3], [-1.0, 0.0, 1.0], stamp=4.0, frame_id="tcp"))
    np.testing.assert_array_equal(linear, [0.1, 0.2, 0.3])
    np.testing.assert_array_equal(angular, [-1.0, 0.0, 1.0])
    with pytest.raises(MessageError, match="shape \\(3,\\)"):
        twist_to_msg([0.0, 0.0], [0.0, 0.0, 0.0])
    axes, buttons = joy_from_msg(joy_to_msg([0.5, -1.0, 0.25], [1, 0, 1, 1]))
    assert axes.dtype == np.float32 and buttons.dtype == np.int32
    np.testing.assert_array_equal(axes, [0.5, -1.0, 0.25])
    np.testing.assert_array_equal(buttons, [1, 0, 1, 1])
    with pytest.raises(MessageError, match="must fit int32"):
        joy_to_msg([], [2**40])


def test_bytes_payload_round_trip_with_a_codec_payload():
    payload = codec.pack({"actor": "a0", "seq": 7, "obs": np.arange(1000, dtype=np.float32).reshape(10, 100)})
    msg = bytes_to_msg(payload)
    assert isinstance(msg, UInt8MultiArray) and len(msg.data) == len(payload)
    assert msg_to_bytes(msg) == payload
    view = payload_view(msg)
    assert view.readonly and view.tobytes() == payload
    decoded = codec.unpack(msg_to_bytes(msg))
    np.testing.assert_array_equal(decoded["obs"], np.arange(1000, dtype=np.float32).reshape(10, 100))
    assert msg_to_bytes(bytes_to_msg(b"")) == b""
    assert msg_to_bytes(bytes_to_msg(bytearray(b"abc"))) == b"abc"
    ints = np.arange(4, dtype=np.int32)
    assert msg_to_bytes(bytes_to_msg(memoryview(ints))) == ints.tobytes()
    with pytest.raises(MessageError, match="bytes-like"):
        bytes_to_msg("text")  # type: ignore[arg-type]


def test_yuv422_images_are_read_and_converted_by_vision():
    import cv2

    from robot_rl.core.vision import to_rgb

    rgb = np.zeros((4, 6, 3), np.uint8)
    rgb[:] = (40, 160, 220)
    for encoding, code in (("yuv422", cv2.COLOR_RGB2YUV_UYVY), ("yuv422_yuy2", cv2.COLOR_RGB2YUV_YUY2)):
        msg = image_to_msg(cv2.cvtColor(rgb, code), encoding)
        assert msg.step == 12
        packed = image_from_msg(msg)
        assert packed.shape == (4, 6, 2)
        assert np.abs(to_rgb(packed, encoding).astype(int) - rgb).max() <= 3


def test_compressed_image_round_trip():
    image = _random_image((48, 64, 3))
    msg = compressed_image_to_msg(image, "png", stamp=2.5, frame_id="camera_front")
    assert isinstance(msg, CompressedImage) and msg.format == "rgb8; png compressed bgr8"
    assert msg.header.frame_id == "camera_front" and stamp_to_seconds(msg.header.stamp) == 2.5
    np.testing.assert_array_equal(compressed_image_from_msg(msg), image)
    y, x = np.mgrid[0:48, 0:64]
    smooth = np.stack([x * 4, y * 5, 255 - x * 4], -1).astype(np.uint8)
    jpeg = compressed_image_to_msg(smooth)
    assert jpeg.format == "rgb8; jpeg compressed bgr8" and bytes(jpeg.data[:2]) == b"\xff\xd8"
    assert np.abs(compressed_image_from_msg(jpeg).astype(int) - smooth).mean() < 3
    # A driver's own message (data as a plain bytes sequence, format "jpeg").
    foreign = CompressedImage(format="jpeg")
    foreign.data = bytes(jpeg.data)
    assert compressed_image_from_msg(foreign).shape == (48, 64, 3)


def _compressed(data, fmt="jpeg"):
    msg = CompressedImage(format=fmt)
    msg.data = data
    return msg


@pytest.mark.parametrize("msg, problem", [
    (_compressed(b""), "has no data"),
    (_compressed(b"garbage bytes"), "cannot decode 13 bytes as jpeg"),
    (_compressed(b"\x89PNG\r\n\x1a\n" + bytes(40), "png"), "cannot decode"),
    (_compressed(b"\x89PNG", "16UC1; compressedDepth png"), "compressedDepth"),
])
def test_malformed_compressed_images_raise_message_error(msg, problem):
    with pytest.raises(MessageError, match=problem):
        compressed_image_from_msg(msg)


def test_compressed_image_to_msg_rejects_bad_input():
    with pytest.raises(MessageError, match="unknown compressed format 'bmp'"):
        compressed_image_to_msg(_random_image((4, 4, 3)), "bmp")
    with pytest.raises(MessageError, match=r"\(H, W, 3\) uint8"):
        compressed_image_to_msg(_random_image((4, 4)))


def test_joint_trajectory_round_trip():
    names = [f"joint{i}" for i in range(1, 8)]
    positions = np.linspace(-1, 1, 7)
    msg = joint_trajectory_to_msg(names, positions, 0.1, stamp=4.25)
    assert isinstance(msg, JointTrajectory) and list(msg.joint_names) == names and len(msg.points) == 1
    assert (msg.points[0].time_from_start.sec, msg.points[0].time_from_start.nanosec) == (0, 100_000_000)
    assert stamp_to_seconds(msg.header.stamp) == 4.25
    got_names, got_positions, time_from_start = joint_trajectory_from_msg(msg)
    assert got_names == tuple(names) and time_from_start == pytest.approx(0.1)
    np.testing.assert_array_equal(got_positions, positions)
    assert joint_trajectory_to_msg(["a"], [0.5], 2.75).points[0].time_from_start.sec == 2
    # Extra points (a driver's longer trajectory) are allowed: the first one is read.
    msg.points.append(JointTrajectoryPoint(positions=[9.0] * 7))
    np.testing.assert_array_equal(joint_trajectory_from_msg(msg)[1], positions)


@pytest.mark.parametrize("args, problem", [
    ((["a", "b"], [0.0], 0.1), r"positions must have shape \(2,\)"),
    ((["a", "b"], [0.0, float("nan")], 0.1), "positions must be finite"),
    (([], [], 0.1), "non-empty names"),
    ((["a", "a"], [0.0, 1.0], 0.1), "duplicates"),
    (("ab", [0.0, 1.0], 0.1), "got the string 'ab'"),
    ((["a"], [0.0], -0.1), "time_from_start must be finite non-negative"),
    ((["a"], [0.0], float("inf")), "time_from_start must be finite non-negative"),
])
def test_joint_trajectory_to_msg_rejects_bad_input(args, problem):
    with pytest.raises(MessageError, match=problem):
        joint_trajectory_to_msg(*args)


def _trajectory(names=("a", "b"), points=((0.0, 1.0),), sec=0):
    msg = JointTrajectory(joint_names=list(names))
    for positions in points:
        point = JointTrajectoryPoint(positions=list(positions))
        point.time_from_start.sec = sec
        msg.points.append(point)
    return msg


@pytest.mark.parametrize("msg, problem", [
    (_trajectory(points=()), "has no points"),
    (_trajectory(points=((0.0,),)), "1 positions for 2 joints"),
    (_trajectory(points=((0.0, float("inf")),)), "positions must be finite"),
    (_trajectory(names=()), "non-empty names"),
    (_trajectory(sec=-1), "time_from_start must be non-negative"),
])
def test_malformed_joint_trajectories_raise_message_error(msg, problem):
    with pytest.raises(MessageError, match=problem):
        joint_trajectory_from_msg(msg)
