"""msgpack codec: round trips of every numeric dtype, clear CodecErrors for malformed input, zero-copy decode."""

import msgpack
import numpy as np
import pytest

from robot_rl.core.codec import NDARRAY_EXT, CodecError, pack, unpack

NUMERIC_DTYPES = ["bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float16",
                  "float32", "float64", "complex64", "complex128", ">f4", ">i8"]


def _assert_same_array(decoded, original):
    assert isinstance(decoded, np.ndarray)
    assert decoded.dtype == original.dtype and decoded.shape == original.shape
    np.testing.assert_array_equal(decoded, original)


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
def test_every_numeric_dtype_round_trips(dtype):
    rng = np.random.default_rng(0)
    array = (rng.uniform(-100, 100, (3, 5)) > 0 if dtype == "bool" else rng.uniform(0, 100, (3, 5))).astype(dtype)
    _assert_same_array(unpack(pack(array)), array)
    original = array[1, 2]
    scalar = unpack(pack(original))
    if isinstance(original, float):  # np.float64 subclasses float: msgpack packs it as a plain float
        assert type(scalar) is float and scalar == original
    else:  # other numpy scalars come back as numpy scalars of the same dtype
        assert isinstance(scalar, np.generic) and scalar.dtype == original.dtype and scalar == original


@pytest.mark.parametrize("array", [
    np.array(3.5), np.array(7, dtype=np.int64), np.zeros((0,), np.float32), np.zeros((2, 0, 3), np.uint8),
    np.arange(24.0).reshape(4, 6)[:, ::2], np.asfortranarray(np.arange(12).reshape(3, 4)),
    np.arange(10, dtype=np.int16)[::-1],
], ids=["0d-float", "0d-int", "empty", "empty-3d", "strided", "fortran", "reversed"])
def test_special_arrays_round_trip(array):
    _assert_same_array(unpack(pack(array)), array)


def test_nested_payload_and_large_images_round_trip():
    images = np.random.default_rng(0).integers(0, 256, (2, 128, 128, 3), dtype=np.uint8)
    payload = {"actor_id": "robot-1", "seq": 2**40, "transitions": [
        {"obs": {"images/front": images, "state": np.ones(14, np.float32)}, "reward": 1.0, "done": False,
         "info": None, "blob": b"\x00\xff", "tags": ["a", "b"], "nested": {"deeper": [np.arange(3), {"x": -1}]}}]}
    decoded = unpack(pack(payload))
    transition = decoded["transitions"][0]
    _assert_same_array(transition["obs"]["images/front"], images)
    _assert_same_array(transition["nested"]["deeper"][0], np.arange(3))
    assert (decoded["actor_id"], decoded["seq"], transition["reward"], transition["done"], transition["info"],
            transition["blob"], transition["tags"], transition["nested"]["deeper"][1]) == (
        "robot-1", 2**40, 1.0, False, None, b"\x00\xff", ["a", "b"], {"x": -1})


def test_decoding_a_megabyte_array_does_not_copy_it_again():
    array = np.random.default_rng(0).random(131072)  # 1 MiB
    decoded = unpack(pack(array))
    _assert_same_array(decoded, array)
    assert not decoded.flags.owndata and decoded.base is not None  # a view into msgpack's ext bytes
    assert not decoded.flags.writeable  # documented: decoded arrays are read-only
    assert decoded.flags.aligned


def test_unsupported_objects_are_refused_when_packing():
    with pytest.raises(CodecError, match="dtype object"):
        pack({"x": np.array([object()])})
    with pytest.raises(CodecError, match="builtins.set"):
        pack({"x": {1, 2}})
    with pytest.raises(CodecError, match="dtype"):
        pack(np.array(["text"]))


def _array_ext(header, raw: bytes, pad: bool = True) -> bytes:
    """Hand-build an array ext payload (to tamper with its header)."""
    header_bytes = msgpack.packb(header)
    offset = -(-(1 + len(header_bytes)) // 16) * 16 if pad else 1 + len(header_bytes)
    data = bytes([len(header_bytes)]) + header_bytes + bytes(offset - 1 - len(header_bytes)) + raw
    return msgpack.packb({"x": msgpack.ExtType(NDARRAY_EXT, data)}, use_bin_type=True)


def test_hand_built_payload_matches_the_codec():
    _assert_same_array(unpack(_array_ext(["<f4", [2]], np.ones(2, np.float32).tobytes()))["x"], np.ones(2, np.float32))


@pytest.mark.parametrize("header,raw,message", [
    (["|O", [1]], bytes(8), "dtype '|O' is not allowed"),
    (["|V8", [1]], bytes(8), "dtype '|V8' is not allowed"),
    (["<U1", [1]], bytes(4), "is not allowed"),
    (["f4,i4", [1]], bytes(8), "is not allowed"),
    (["<f3", [1]], bytes(3), "unknown array dtype"),
    ([{"descr": "O"}, [1]], bytes(8), "must be \\[dtype str, shape list\\]"),
    (["<f4", [3]], bytes(8), "needs 12 bytes, the payload carries 8"),
    (["<f4", [2, -1]], bytes(8), "non-negative ints"),
    (["<f4", [2**62, 2**62]], bytes(8), "needs"),
    (["|b1", [2]], b"\x00\x07", "bool array holds bytes other than 0 and 1"),
    (["<f4"], bytes(4), "must be \\[dtype str, shape list\\]"),
], ids=["object", "void", "unicode", "structured", "bad-size", "dict-dtype", "shape-vs-bytes", "negative-shape",
        "overflowing-shape", "bool-bytes", "short-header"])
def test_tampered_array_headers_raise_codec_error(header, raw, message):
    with pytest.raises(CodecError, match=message):
        unpack(_array_ext(header, raw))


def test_unknown_ext_type_and_missing_padding_raise_codec_error():
    with pytest.raises(CodecError, match="unknown msgpack ext type 9"):
        unpack(msgpack.packb(msgpack.ExtType(9, b"abc")))
    with pytest.raises(CodecError, match="shorter than its"):
        unpack(msgpack.packb(msgpack.ExtType(NDARRAY_EXT, b"\x20abc")))
    with pytest.raises(CodecError, match="empty"):
        unpack(msgpack.packb(msgpack.ExtType(NDARRAY_EXT, b"")))


def test_every_truncation_raises_codec_error():
    payload = pack({"state": np.arange(14, dtype=np.float32), "reward": 0.5, "image": np.zeros((4, 4, 3), np.uint8)})
    for length in range(len(payload)):
        with pytest.raises(CodecError):
            unpack(payload[:length])
    with pytest.raises(CodecError, match="trailing bytes"):
        unpack(payload + b"\x00")


def test_random_garbage_decodes_or_raises_codec_error_only():
    rng = np.random.default_rng(0)
    valid = pack({"a": np.arange(5.0), "b": [1, "x"]})
    for trial in range(3000):
        if trial % 2:
            garbage = rng.integers(0, 256, rng.integers(1, 64), dtype=np.uint8).tobytes()
        else:  # flip a few bytes of a valid payload
            corrupted = bytearray(valid)
            for index in rng.integers(0, len(corrupted), 3):
                corrupted[index] = int(rng.integers(0, 256))
            garbage = bytes(corrupted)
        try:
            unpack(garbage)
        except CodecError as error:
            assert str(error)


def test_non_bytes_input_is_a_codec_error():
    with pytest.raises(CodecError, match="expected bytes"):
        unpack("not bytes")
