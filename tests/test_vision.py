"""Camera frames -> policy images: encodings, JPEG / PNG, crop / resize / roi, and malformed input as ImageError."""

import array

import cv2
import numpy as np
import pytest

from robot_rl.actor.robot_config import CameraConfig
from robot_rl.core.vision import ImageError, ImageTransform, decode_compressed, encode_compressed, to_rgb

COMPUTES_ONLY = True  # names robot_rl.ros modules, starts no ROS 2 node (tests/conftest.py)


def _rgb(height=48, width=64, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _smooth(height=480, width=640):
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([(128 + 100 * np.sin(x / 13.0 + y / 29.0)), (128 + 100 * np.cos(x / 7.0)),
                     (x * 255.0 / width)], axis=-1).astype(np.uint8)


# ----- to_rgb -------------------------------------------------------------------------------------------------------


def test_colour_encodings_become_rgb():
    rgb = _rgb()
    assert np.array_equal(to_rgb(rgb, "rgb8"), rgb)
    assert np.array_equal(to_rgb(np.ascontiguousarray(rgb[..., ::-1]), "bgr8"), rgb)
    alpha = np.full(rgb.shape[:2] + (1,), 7, np.uint8)
    assert np.array_equal(to_rgb(np.concatenate([rgb, alpha], -1), "rgba8"), rgb)
    assert np.array_equal(to_rgb(np.concatenate([rgb[..., ::-1], alpha], -1), "bgra8"), rgb)
    for encoding in ("rgb8", "bgr8", "rgba8", "bgra8"):
        out = to_rgb(cv2.cvtColor(rgb, {"rgb8": cv2.COLOR_RGB2RGBA, "bgr8": cv2.COLOR_RGB2BGRA,
                                        "rgba8": cv2.COLOR_RGB2RGBA, "bgra8": cv2.COLOR_RGB2BGRA}[encoding])
                     [..., :3 if encoding in ("rgb8", "bgr8") else 4], encoding)
        assert out.shape == rgb.shape and out.dtype == np.uint8


def test_mono_encodings_become_grey_rgb_and_mono16_keeps_the_high_byte():
    grey = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
    for image in (grey, grey[:, :, None]):
        out = to_rgb(image, "mono8")
        assert out.shape == (3, 4, 3) and all(np.array_equal(out[..., c], grey) for c in range(3))
    deep = np.array([[0x0000, 0x00FF, 0xABCD, 0xFFFF]], dtype=np.uint16)
    out = to_rgb(deep, "mono16")
    assert out.dtype == np.uint8 and out[0, :, 0].tolist() == [0, 0, 0xAB, 0xFF]
    big_endian = deep.astype(">u2")  # a big-endian message's view
    assert np.array_equal(to_rgb(big_endian, "mono16"), out)


@pytest.mark.parametrize("encoding, code", [("yuv422", cv2.COLOR_RGB2YUV_UYVY),
                                            ("yuv422_yuy2", cv2.COLOR_RGB2YUV_YUY2)])
def test_yuv422_encodings_become_rgb(encoding, code):
    rgb = np.zeros((4, 6, 3), np.uint8)
    rgb[:, :, 0] = 200  # a flat orange: 4:2:2 chroma subsampling loses nothing
    rgb[:, :, 1] = 120
    rgb[:, :, 2] = 30
    packed = cv2.cvtColor(rgb, code)
    assert packed.shape == (4, 6, 2)
    assert np.abs(to_rgb(packed, encoding).astype(int) - rgb).max() <= 3
    uyvy_vs_yuyv = to_rgb(packed, "yuv422_yuy2" if encoding == "yuv422" else "yuv422")
    assert np.abs(uyvy_vs_yuyv.astype(int) - rgb).max() > 20  # the two byte orders are told apart


@pytest.mark.parametrize("image, encoding, reason", [
    (np.zeros((4, 4, 3), np.uint8), "yuv420", "unknown image encoding 'yuv420'"),
    (np.zeros((4, 4, 3), np.uint8), None, "unknown image encoding None"),
    (np.zeros((4, 4, 4), np.uint8), "rgb8", r"rgb8 image must have shape \(H, W, 3\)"),
    (np.zeros((4, 4), np.uint8), "bgr8", r"bgr8 image must have shape \(H, W, 3\)"),
    (np.zeros((0, 4, 3), np.uint8), "rgb8", "H, W > 0"),
    (np.zeros((4, 4, 3), np.float32), "rgb8", "dtype uint8, got float32"),
    (np.zeros((4, 4), np.uint8), "mono16", "dtype uint16, got uint8"),
    (np.zeros((4, 4, 3), np.uint8), "mono8", r"mono8 image must have shape \(H, W\)"),
    (np.zeros((4, 5, 2), np.uint8), "yuv422", "width must be even"),
    ([[1, 2, 3]], "rgb8", "must be a numpy array"),
])
def test_malformed_frames_raise_image_error_naming_the_problem(image, encoding, reason):
    with pytest.raises(ImageError, match=reason):
        to_rgb(image, encoding)


# ----- compressed ---------------------------------------------------------------------------------------------------


def test_png_round_trip_is_exact_and_accepts_every_bytes_like_container():
    rgb = _rgb(30, 50)
    data = encode_compressed(rgb, "png")
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    for container in (data, bytearray(data), memoryview(data), array.array("B", data), np.frombuffer(data, np.uint8)):
        assert np.array_equal(decode_compressed(container, "png"), rgb)


def test_jpeg_decodes_to_rgb_whatever_the_format_string_says():
    rgb = _smooth(60, 80)
    rgb[:30] = (220, 30, 40)  # a red top half: a channel swap would show
    data = encode_compressed(rgb, "jpeg", quality=95)
    assert data[:2] == b"\xff\xd8"
    for fmt in ("jpeg", "rgb8; jpeg compressed bgr8", "bgr8; jpeg compressed bgr8", ""):
        decoded = decode_compressed(data, fmt)
        assert decoded.shape == rgb.shape and decoded.dtype == np.uint8
        assert np.abs(decoded.astype(int) - rgb).mean() < 3
        assert decoded[10, 10, 0] > 180 and decoded[10, 10, 2] < 80
    assert len(encode_compressed(rgb, "jpeg", quality=10)) < len(data)


def test_mono_and_16_bit_pngs_decode_to_rgb():
    grey = (np.arange(20, dtype=np.uint8) * 10).reshape(4, 5)
    ok, mono = cv2.imencode(".png", grey)
    out = decode_compressed(mono.tobytes(), "mono8; png compressed mono8")
    assert out.shape == (4, 5, 3) and np.array_equal(out[..., 1], grey)
    ok, deep = cv2.imencode(".png", grey.astype(np.uint16) << 8)
    assert np.array_equal(decode_compressed(deep.tobytes(), "mono16; png compressed mono16")[..., 0], grey)


@pytest.mark.parametrize("data, fmt, reason", [
    (b"", "jpeg", "has no data"),
    (b"this is not an image at all", "jpeg", "cannot decode 27 bytes as jpeg"),
    (b"\xff\xd8\xff\xe0" + bytes(20), "jpeg", "cannot decode"),
    (np.zeros((4, 4), np.uint8), "png", "1-D uint8"),
    (12345, "png", "bytes-like"),
    (b"\x89PNG", 3, "format must be a string"),
    (b"\x89PNG", "16UC1; compressedDepth png", "compressedDepth"),
])
def test_undecodable_data_raises_image_error(data, fmt, reason):
    with pytest.raises(ImageError, match=reason):
        decode_compressed(data, fmt)


def test_truncated_png_raises_image_error():
    data = encode_compressed(_rgb(), "png")
    with pytest.raises(ImageError, match="cannot decode"):
        decode_compressed(data[: len(data) // 2], "png")


@pytest.mark.parametrize("rgb, fmt, quality, reason", [
    (_rgb(), "webm", 90, "unknown compressed format 'webm'"),
    (_rgb(), "jpeg", 0, "quality"),
    (_rgb(), "jpeg", 101, "quality"),
    (np.zeros((4, 4), np.uint8), "png", 90, r"\(H, W, 3\) uint8"),
    (np.zeros((4, 4, 3), np.uint16), "png", 90, r"\(H, W, 3\) uint8"),
])
def test_encode_rejects_bad_input(rgb, fmt, quality, reason):
    with pytest.raises(ImageError, match=reason):
        encode_compressed(rgb, fmt, quality)


# ----- ImageTransform -----------------------------------------------------------------------------------------------


def _bands(height=100, width=200):
    """Green square in the centre, red left and blue right margins."""
    image = np.zeros((height, width, 3), np.uint8)
    margin = (width - height) // 2
    image[:, :margin] = (255, 0, 0)
    image[:, margin:margin + height] = (0, 255, 0)
    image[:, margin + height:] = (0, 0, 255)
    return image


def test_crop_keeps_the_centre_square_and_resize_squashes_the_whole_frame():
    image = _bands()
    cropped = ImageTransform(20, "crop")(image)
    assert cropped.shape == (20, 20, 3) and cropped.dtype == np.uint8 and cropped.flags.c_contiguous
    assert np.all(cropped == (0, 255, 0))
    squashed = ImageTransform(20, "resize")(image)
    assert np.all(squashed[:, :4] == (255, 0, 0)) and np.all(squashed[:, 6:14] == (0, 255, 0))
    assert np.all(squashed[:, 16:] == (0, 0, 255))
    tall = np.ascontiguousarray(image.transpose(1, 0, 2))  # portrait frames crop top and bottom
    assert np.all(ImageTransform(20, "crop")(tall) == (0, 255, 0))


def test_roi_is_cut_before_the_fit_and_must_lie_inside_the_frame():
    image = _bands()
    left = ImageTransform(10, "resize", roi=(0, 0, 50, 100))(image)
    assert np.all(left == (255, 0, 0))
    right = ImageTransform(10, "crop", roi=[150, 20, 50, 60])(image)
    assert np.all(right == (0, 0, 255))
    with pytest.raises(ImageError, match=r"roi \[x, y, width, height\] = \[150, 20, 60, 60\] is outside the 200x100"):
        ImageTransform(10, roi=(150, 20, 60, 60))(image)


def test_shrinking_averages_areas_like_opencv_inter_area():
    image = _smooth()
    for size in (64, 84, 96, 128):
        out = ImageTransform(size, "crop")(image)
        reference = cv2.resize(image[:, 80:560], (size, size), interpolation=cv2.INTER_AREA)
        assert np.abs(out.astype(int) - reference).mean() < 1.5
    stripes = np.zeros((480, 480, 3), np.uint8)
    stripes[:, ::2] = 255  # one-pixel stripes: area averaging gives flat grey, point sampling would alias
    out = ImageTransform(64)(stripes)
    assert np.abs(out.astype(int) - 127).max() <= 2


def test_bgr_view_from_to_rgb_transforms_like_a_converted_copy():
    frame = _smooth()[..., ::-1].copy()  # what a bgr8 driver sends
    view = to_rgb(frame, "bgr8")
    for transform in (ImageTransform(64), ImageTransform(100, "resize"), ImageTransform(32, roi=(10, 20, 300, 200))):
        out = transform(view)
        assert out.flags.c_contiguous and out.shape[2] == 3
        assert np.array_equal(out, transform(np.ascontiguousarray(view)))


def test_output_is_a_new_array_even_when_no_resize_is_needed():
    image = _rgb(32, 32)
    out = ImageTransform(32)(image)
    assert np.array_equal(out, image) and not np.shares_memory(out, image)
    out[:] = 0
    assert image.any()


def test_small_frames_are_enlarged():
    out = ImageTransform(64)(_rgb(16, 24))
    assert out.shape == (64, 64, 3) and out.dtype == np.uint8


@pytest.mark.parametrize("kwargs, reason", [
    (dict(size=0), "size must be an int"),
    (dict(size=64.0), "size must be an int"),
    (dict(size=True), "size must be an int"),
    (dict(size=64, fit="pad"), "fit must be one of crop, resize"),
    (dict(size=64, roi=(0, 0, 10)), "roi must be 4 ints"),
    (dict(size=64, roi=(0, 0, 10.5, 10)), "roi must be 4 ints"),
    (dict(size=64, roi=(-1, 0, 10, 10)), "x, y >= 0"),
    (dict(size=64, roi=(0, 0, 0, 10)), "width, height > 0"),
])
def test_bad_transform_settings_raise_image_error(kwargs, reason):
    with pytest.raises(ImageError, match=reason):
        ImageTransform(**kwargs)


@pytest.mark.parametrize("image", [np.zeros((4, 4), np.uint8), np.zeros((4, 4, 4), np.uint8),
                                   np.zeros((4, 4, 3), np.float64), np.zeros((0, 4, 3), np.uint8), None])
def test_transform_rejects_non_rgb_input(image):
    with pytest.raises(ImageError, match=r"image to transform must be \(H, W, 3\) uint8"):
        ImageTransform(8)(image)


def test_json_round_trip_and_camera_config():
    for transform in (ImageTransform(64), ImageTransform(96, "resize", roi=(1, 2, 30, 40))):
        data = transform.to_json()
        assert ImageTransform.from_json(data) == transform
        assert set(data) == {"size", "fit", "roi"}
    assert ImageTransform.from_json({"size": 64, "fit": "resize", "roi": [1, 2, 3, 4]}).roi == (1, 2, 3, 4)
    for bad, reason in (({"fit": "crop"}, "no 'size'"), ({"size": 64, "zoom": 2}, r"unknown keys \['zoom'\]"),
                        ([64], "must be a mapping"), ({"size": "64"}, "size must be an int")):
        with pytest.raises(ImageError, match=reason):
            ImageTransform.from_json(bad)
    camera = CameraConfig(topic="camera/front", fit="resize", roi=(10, 0, 400, 300))
    assert ImageTransform.from_camera(camera, 84) == ImageTransform(84, "resize", (10, 0, 400, 300))
    assert ImageTransform.from_camera(CameraConfig(topic="t"), 64) == ImageTransform(64, "crop", None)


def test_fuzzed_frames_only_ever_raise_image_error():
    rng = np.random.default_rng(1)
    encodings = ["rgb8", "bgr8", "rgba8", "bgra8", "mono8", "mono16", "yuv422", "yuv422_yuy2", "jpeg", "", "8UC3"]
    transforms = (ImageTransform(16), ImageTransform(4, "resize", roi=(2, 2, 8, 8)))
    converted = 0
    for _ in range(300):
        height, width = (int(v) for v in rng.integers(0, 14, 2))
        shape = [(height, width), (height, width, int(rng.integers(1, 5))), (height,), (1, height, width, 3)][
            int(rng.choice(4, p=[0.3, 0.6, 0.05, 0.05]))]
        dtype = rng.choice([np.uint8, np.uint8, np.uint16, np.int8, np.float32, np.bool_])
        image = rng.integers(0, 255, shape).astype(dtype)
        try:
            rgb = to_rgb(image, str(rng.choice(encodings)))
            converted += 1
            for transform in transforms:
                out = transform(rgb)
                assert out.shape == (transform.size, transform.size, 3) and out.dtype == np.uint8
        except ImageError:
            pass
        blob = rng.integers(0, 256, int(rng.integers(0, 64)), dtype=np.uint8).tobytes()
        for data in (blob, b"\xff\xd8\xff" + blob, b"\x89PNG\r\n\x1a\n" + blob):
            with pytest.raises(ImageError):
                decode_compressed(data, "jpeg")
    assert converted > 0


def test_recorded_transforms_are_compared_with_the_robot_files_cameras(tmp_path):
    """Demos cut or fitted another way than the robot's live frames are named, camera by camera; the learner node
    refuses such a demo dataset in one line."""
    import zarr

    from robot_rl.actor.robot_config import load_robot_config
    from robot_rl.ros.nodes.learner_params import check_demo_images
    from robot_rl.ros.node_util import NodeStartupError
    from robot_rl.core.vision import transform_mismatches

    robot = load_robot_config("sim_panda_driver")
    same = {"images/front": {"size": 64, "fit": "crop", "roi": None}, "images/wrist": {"size": 64, "fit": "crop",
                                                                                         "roi": None}}
    assert transform_mismatches(same, robot, 64) == []
    squashed = {**same, "images/front": {"size": 64, "fit": "resize", "roi": None}}
    (problem,) = transform_mismatches(squashed, robot, 64)
    assert problem.startswith("images/front: recorded with") and "cameras.front" in problem
    assert len(transform_mismatches(same, robot, 96)) == 2
    assert "no camera 'top'" in transform_mismatches({"images/top": same["images/front"]}, robot, 64)[0]
    group = zarr.open_group(str(tmp_path / "demos.zarr"), mode="w")
    group.attrs["image_transforms"] = squashed
    with pytest.raises(NodeStartupError, match="images differ .* images/front: recorded with"):
        check_demo_images(tmp_path / "demos.zarr", "sim_panda_driver", 64)
    group.attrs["image_transforms"] = same
    check_demo_images(tmp_path / "demos.zarr", "sim_panda_driver", 64)
