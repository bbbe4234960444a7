"""Numeric tensors as V2 requests carry them: data checked against the datatype and the shape, decoded to numpy."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from chariot_support.errors import BadRequest, TooLarge

NUMERIC_DTYPES = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}
# What an HTTP header value may hold (Latin-1 text without line breaks): ids are echoed in response headers.


def too_many_elements(where: str, most: int) -> TooLarge:
    """The one answer to a request past CHARIOT_MAX_ELEMENTS, whatever its protocol: a 413 naming the input."""
    return TooLarge(
        f"{where} holds more than {most:,} elements, more than this engine reads in one request"
        " (CHARIOT_MAX_ELEMENTS): send each image as one element holding the whole file"
    )


def datatype_of(tensor: Any) -> str:
    return getattr(tensor.datatype, "value", tensor.datatype)


def flat_data(tensor: Any) -> list:
    data = tensor.data.root if hasattr(tensor.data, "root") else tensor.data
    if not isinstance(data, list):
        data = [data]
    if any(isinstance(v, list) for v in data):
        flat: list = []
        stack = [iter(data)]
        while stack:
            for item in stack[-1]:
                if isinstance(item, list):
                    stack.append(iter(item))
                    break
                flat.append(item)
            else:
                stack.pop()
        data = flat
    return data


def check_shape(shape: list[int], count: int, where: str) -> tuple[int, ...]:
    """Check `shape` against the element count and return it with any -1 filled in."""
    if not shape:
        raise BadRequest(f"{where}: shape is empty; give the tensor's dimensions, e.g. [1]")
    if shape.count(-1) > 1:
        raise BadRequest(f"{where}: shape {shape} has more than one variable (-1) dimension")
    bad = [d for d in shape if d == 0 or d < -1 or d >= 2**63]
    if bad:
        raise BadRequest(
            f"{where}: shape {shape} has an invalid dimension {bad[0]}; dimensions are positive, or -1 for variable"
        )
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if count == 0 or count % known:
            raise BadRequest(f"{where}: {count} data elements do not fit shape {shape}")
        return tuple(count // known if d == -1 else d for d in shape)
    if known != count:
        raise BadRequest(f"{where}: shape {shape} holds {known} elements but data has {count}")
    return tuple(shape)


def decode_tensor(tensor: Any, where: str) -> np.ndarray:
    """Decode a non-image input to a numpy array of its datatype and shape, checking every value fits."""
    data = tensor.data.root if hasattr(tensor.data, "root") else tensor.data
    if isinstance(data, np.ndarray):  # binary tensor data (protocols/v2_binary.py), read as its datatype
        return data.reshape(check_shape(list(tensor.shape), data.size, where))
    values = flat_data(tensor)
    shape = check_shape(tensor.shape, len(values), where)
    datatype = datatype_of(tensor)
    if datatype == "BYTES":
        if not all(isinstance(v, (str, bytes)) for v in values):
            raise BadRequest(f"{where}: BYTES data must be strings")
        return np.array(values, dtype=object).reshape(shape)
    target = np.dtype(NUMERIC_DTYPES[datatype])
    if any(isinstance(v, (str, bytes, dict)) or v is None for v in values):
        expected = "true/false" if datatype == "BOOL" else "numbers"
        wrong = next(v for v in values if not isinstance(v, (int, float)))
        raise BadRequest(f"{where}: {datatype} data must be {expected}, got {wrong!r}")
    array = np.asarray(values)
    kind = array.dtype.kind
    if target.kind == "b":
        if kind == "b" or (kind in "iu" and np.isin(array, (0, 1)).all()):
            return array.astype(target).reshape(shape)
        raise BadRequest(f"{where}: BOOL data must be true/false")
    if target.kind in "iu":
        info = np.iinfo(target)
        if kind in "fO":
            # Floats, or ints beyond int64 (numpy holds them as objects, or rounds them to float64 beside other ints):
            # check and convert each value exactly, as Python compares ints with floats exactly.
            fraction = next((v for v in values if isinstance(v, float) and not v.is_integer()), None)
            if fraction is not None:
                raise BadRequest(f"{where}: {datatype} data must be whole numbers, got {fraction!r}")
            if not all(info.min <= v <= info.max for v in values):
                raise BadRequest(f"{where}: a value is out of range for {datatype} ({info.min}..{info.max})")
            return np.array([int(v) for v in values], dtype=target).reshape(shape)
        # Compared as Python ints: numpy cannot compare its booleans with UINT64's maximum.
        if array.size and (int(array.min()) < info.min or int(array.max()) > info.max):
            raise BadRequest(f"{where}: a value is out of range for {datatype} ({info.min}..{info.max})")
        return array.astype(target).reshape(shape)
    if kind == "b" or any(isinstance(v, (bool, np.bool_)) for v in values):
        raise BadRequest(f"{where}: {datatype} data must be numbers, got booleans")
    try:
        wide = array.astype(np.float64)
    except OverflowError:  # a Python int beyond any float
        raise BadRequest(f"{where}: a value is out of range for {datatype}") from None
    with np.errstate(over="ignore"):
        cast = wide.astype(target)
    if (np.isinf(cast) & ~np.isinf(wide)).any():
        raise BadRequest(f"{where}: a value is out of range for {datatype}")
    return cast.reshape(shape)
