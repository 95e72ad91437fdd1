"""msgpack codec for internal payloads (transitions, weights, acks). No pickle: decoding never runs code.

Supported values: nested dicts (str/bytes keys), lists (tuples come back as lists), str, int, float, bool, None, bytes,
numpy arrays of numeric dtypes (bool, signed/unsigned ints, floats, complex; any byte order; 0-d, empty and
non-contiguous arrays; non-contiguous ones are packed in C order) and numpy scalars (``np.float64`` subclasses
``float``, so it comes back as a plain float).

Arrays travel as msgpack ext type ``NDARRAY_EXT`` (scalars: ``NUMPY_SCALAR_EXT``) whose data is::

    [1 byte: header length n][n bytes: msgpack [dtype.str, shape]][zero padding to a 16-byte offset][raw C-order bytes]

Decoding is zero-copy past msgpack itself: msgpack hands each ext payload over as one ``bytes`` object and the array
is an ``np.frombuffer`` view into it (no second copy). **Decoded arrays are read-only**; ``.copy()`` one to write.
"""

from __future__ import annotations

import re
from typing import Any

import msgpack
import numpy as np

NDARRAY_EXT = 1
NUMPY_SCALAR_EXT = 2
_ALIGNMENT = 16
_MAX_DIMS = 32
# byte order + kind (bool, int, uint, float, complex) + item size: nothing else reaches np.dtype()
_DTYPE_PATTERN = re.compile(r"[<>|=][biufc][0-9]{1,2}")


class CodecError(ValueError):
    """A payload cannot be encoded or decoded; the message names the problem."""


def pack(obj: Any) -> bytes:
    """Encode `obj` to msgpack bytes (numpy arrays as raw bytes + dtype + shape)."""
    try:
        return msgpack.packb(obj, default=_encode_numpy, use_bin_type=True)
    except CodecError:
        raise
    except (TypeError, ValueError, OverflowError) as error:
        raise CodecError(f"cannot encode payload: {error}") from error


def unpack(data: bytes | bytearray | memoryview) -> Any:
    """Decode bytes made by `pack`; raises CodecError for malformed, truncated or tampered input."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodecError(f"expected bytes to decode, got {type(data).__name__}")
    try:
        return msgpack.unpackb(data, ext_hook=_decode_ext, raw=False)
    except CodecError:
        raise
    except msgpack.ExtraData as error:
        raise CodecError(f"malformed payload: {len(error.extra)} trailing bytes after the first object") from error
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as error:
        # msgpack reports truncated input as ValueError("Unpack failed: incomplete input")
        raise CodecError(f"malformed or truncated msgpack payload ({len(data)} bytes): "
                         f"{type(error).__name__}: {error}") from error


def _encode_numpy(obj: Any) -> msgpack.ExtType:
    if isinstance(obj, np.ndarray):
        return msgpack.ExtType(NDARRAY_EXT, _array_payload(obj))
    if isinstance(obj, np.generic):
        return msgpack.ExtType(NUMPY_SCALAR_EXT, _array_payload(np.asarray(obj)))
    raise CodecError(f"cannot encode an object of type {type(obj).__module__}.{type(obj).__qualname__}; "
                     "supported: dict, list, tuple, str, int, float, bool, None, bytes, numpy arrays/scalars")


def _array_payload(array: np.ndarray) -> bytes:
    dtype_str = array.dtype.str
    if not _DTYPE_PATTERN.fullmatch(dtype_str):
        raise CodecError(f"cannot encode an array of dtype {array.dtype} ({dtype_str!r}); "
                         "only bool, integer, float and complex dtypes are supported")
    header = msgpack.packb([dtype_str, list(array.shape)])
    offset = _data_offset(len(header))
    # tobytes() gives C order whatever the strides; one copy, which packing needs anyway
    return b"".join((bytes([len(header)]), header, bytes(offset - 1 - len(header)), array.tobytes(order="C")))


def _data_offset(header_length: int) -> int:
    return -(-(1 + header_length) // _ALIGNMENT) * _ALIGNMENT


def _decode_ext(code: int, data: bytes) -> Any:
    if code == NDARRAY_EXT:
        return _decode_array(data)
    if code == NUMPY_SCALAR_EXT:
        array = _decode_array(data)
        if array.ndim != 0:
            raise CodecError(f"numpy scalar payload has shape {array.shape}; expected ()")
        return array[()]
    raise CodecError(f"unknown msgpack ext type {code}; this codec knows {NDARRAY_EXT} (array) and "
                     f"{NUMPY_SCALAR_EXT} (numpy scalar)")


def _decode_array(data: bytes) -> np.ndarray:
    if len(data) < 1:
        raise CodecError("array payload is empty (no header)")
    header_length = data[0]
    offset = _data_offset(header_length)
    if len(data) < offset:
        raise CodecError(f"array payload of {len(data)} bytes is shorter than its {offset}-byte header")
    try:
        header = msgpack.unpackb(data[1:1 + header_length], raw=False)
    except Exception as error:  # noqa: BLE001 - any failure here means a corrupt header
        raise CodecError(f"array header is not valid msgpack: {error}") from error
    if not (isinstance(header, list) and len(header) == 2 and isinstance(header[0], str)
            and isinstance(header[1], list)):
        raise CodecError(f"array header must be [dtype str, shape list], got {header!r:.200}")
    dtype_str, shape = header
    if not _DTYPE_PATTERN.fullmatch(dtype_str):
        raise CodecError(f"array dtype {dtype_str!r:.50} is not allowed; only bool, integer, float and complex "
                         "dtypes (e.g. '<f4', '|u1', '|b1') decode")
    try:
        dtype = np.dtype(dtype_str)
    except TypeError as error:
        raise CodecError(f"unknown array dtype {dtype_str!r}") from error
    if dtype.hasobject or dtype.kind not in "biufc":
        raise CodecError(f"array dtype {dtype_str!r} is not allowed")
    if len(shape) > _MAX_DIMS or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise CodecError(f"array shape {shape!r:.200} must be at most {_MAX_DIMS} non-negative ints")
    expected = dtype.itemsize
    for n in shape:
        expected *= n
    available = len(data) - offset
    if available != expected:
        raise CodecError(f"array of shape {tuple(shape)} and dtype {dtype_str} needs {expected} bytes, "
                         f"the payload carries {available}")
    array = np.frombuffer(memoryview(data)[offset:], dtype=dtype).reshape(shape)
    if dtype.kind == "b" and array.size and array.view(np.uint8).max() > 1:
        raise CodecError("bool array holds bytes other than 0 and 1")
    return array
