"""The Open Inference Protocol's binary tensor data extension over REST: a V2 body whose first
Inference-Header-Content-Length bytes are its JSON, then the bytes of each input that gives its
`parameters.binary_data_size`, in input order (numbers little-endian and row-major, BOOL one byte, each BYTES element
a 4-byte little-endian length and its bytes). Read into the same request as a JSON body, every size checked against
the body and the input's shape before a byte of it is copied; answered the same way when the request asks for binary
outputs (`binary_data` on a requested output, `binary_data_output` for all), else as JSON (protocols/v2_rest.py)."""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from chariot_support.errors import BadRequest
from chariot_support.protocols import v2_rest as v2
from chariot_support.protocols.request import Answer, Request
from chariot_support.protocols.tensors import NUMERIC_DTYPES, check_shape, too_many_elements

EXTENSION = "binary_tensor_data"  # its name in the server metadata's extensions
HEADER = "inference-header-content-length"
MEDIA_TYPE = "application/octet-stream"
SIZE = "binary_data_size"
_HEADER = "the Inference-Header-Content-Length header"
_DIGITS = re.compile(r"[0-9]{1,20}")
_LENGTH = struct.Struct("<I")  # a BYTES element's length
_DTYPES = {name: np.dtype(dtype).newbyteorder("<") for name, dtype in NUMERIC_DTYPES.items()}


def head_length(value: str | None, body_size: int) -> int | None:
    """How many of the body's first bytes are its JSON, as the Inference-Header-Content-Length header says; None
    without the header (the body is all JSON)."""
    if value is None:
        return None
    text = value.strip()
    if not _DIGITS.fullmatch(text):
        raise BadRequest(f"{_HEADER} must be the length in bytes of the JSON the body starts with, got {_shown(text)}")
    length = int(text)
    if length > body_size:
        raise BadRequest(f"{_HEADER} says the body starts with {length:,} bytes of JSON, but the body is {body_size:,}")
    if length == 0:
        raise BadRequest(f"{_HEADER} is 0: it gives the length in bytes of the JSON the body starts with")
    return length


@dataclass(frozen=True)
class Outputs:
    """Which outputs the request asks to get as binary data: those it names with `binary_data`, and the others as
    `binary_data_output` says."""

    every: bool = False
    named: Mapping[str, bool] = field(default_factory=dict)

    def binary(self, name: str) -> bool:
        return self.named.get(name, self.every)


JSON_OUTPUTS = Outputs()


def requested_outputs(decoded: Any) -> tuple[Any, Outputs]:
    """The outputs a V2 request object asks for as binary data, and the object without what says so (its `outputs`
    and `parameters.binary_data_output`, which are the transport's, not settings for the model)."""
    if not isinstance(decoded, dict):
        return decoded, JSON_OUTPUTS
    rest, every = decoded, False
    parameters = decoded.get("parameters")
    if isinstance(parameters, dict) and "binary_data_output" in parameters:
        every = parameters["binary_data_output"]
        if not isinstance(every, bool):
            raise BadRequest(f"parameters.binary_data_output must be true or false, got {_shown(every)}")
        rest = {**decoded, "parameters": {k: v for k, v in parameters.items() if k != "binary_data_output"}}
    if "outputs" not in decoded:
        return rest, Outputs(every)
    rest = {k: v for k, v in rest.items() if k != "outputs"}
    requested = decoded["outputs"]
    if requested is None:
        return rest, Outputs(every)
    if not isinstance(requested, list):
        raise BadRequest(f'outputs must be a list of the outputs wanted, each {{"name": ...}}, got {_shown(requested)}')
    named = {}
    for index, output in enumerate(requested):
        if not isinstance(output, dict) or not isinstance(output.get("name"), str):
            raise BadRequest(f"outputs[{index}] must be an object with the output's name, got {_shown(output)}")
        own = output.get("parameters") or {}
        if not isinstance(own, dict):
            raise BadRequest(f"outputs[{index}].parameters must be a JSON object, got {_shown(own)}")
        if "binary_data" in own:
            if not isinstance(own["binary_data"], bool):
                raise BadRequest(
                    f"outputs[{index}].parameters.binary_data must be true or false, got {_shown(own['binary_data'])}"
                )
            named[output["name"]] = own["binary_data"]
    return rest, Outputs(every, named)


def parse(body: bytes, head: int, max_elements: int) -> tuple[Request, Outputs]:
    """The request a body of `head` bytes of JSON and then binary tensor data carries, and the outputs it asks for
    as binary data. BadRequest naming the input and the numbers at fault; TooLarge for a tensor of more elements than
    CHARIOT_MAX_ELEMENTS."""
    try:
        decoded = orjson.loads(memoryview(body)[:head])
    except ValueError as exc:
        raise BadRequest(f"the body's first {head:,} bytes ({_HEADER}) are not valid JSON: {exc}") from None
    decoded, outputs = requested_outputs(decoded)
    inputs = decoded.get("inputs") if isinstance(decoded, dict) else None
    if isinstance(inputs, list):
        spans = _spans(inputs, body, head, max_elements)  # every size checked before anything is copied
        filled = list(inputs)
        for index, start, end in spans:
            tensor = inputs[index]
            parameters = {k: v for k, v in tensor["parameters"].items() if k != SIZE}
            filled[index] = {**tensor, "data": _values(tensor["datatype"], body, start, end), "parameters": parameters}
        decoded = {**decoded, "inputs": filled}
    return v2.parse(decoded), outputs


def _spans(inputs: list, body: bytes, head: int, max_elements: int) -> list[tuple[int, int, int]]:
    """Where each binary input's bytes are in the body, as (input index, start, end), each checked against what is
    left of the body, its datatype and its shape; the body must hold nothing after the last."""
    spans, at = [], head
    for index, tensor in enumerate(inputs):
        if not isinstance(tensor, dict):
            continue  # the V2 parser names it
        name = tensor.get("name")
        where = f"input '{name}'" if isinstance(name, str) and name else f"inputs[{index}]"
        parameters = tensor.get("parameters")
        if not isinstance(parameters, dict) or SIZE not in parameters:
            if "data" not in tensor:
                raise BadRequest(
                    f"{where} has neither data nor parameters.binary_data_size: give its values in data, or the"
                    " length of its bytes after the JSON in binary_data_size"
                )
            continue
        size = parameters[SIZE]
        if "data" in tensor:
            raise BadRequest(f"{where} has both data and parameters.binary_data_size: send its values one way")
        if type(size) is not int:
            raise BadRequest(
                f"{where}: parameters.binary_data_size must be a whole number of bytes, got {_shown(size)}"
            )
        if size < 0:
            raise BadRequest(f"{where}: parameters.binary_data_size is {size}; a size is 0 bytes or more")
        left = len(body) - at
        if size > left:
            raise BadRequest(
                f"{where}: parameters.binary_data_size is {size:,} bytes, but the body holds {left:,} after the JSON"
                " and the inputs before it"
            )
        _check(tensor, where, body, at, size, max_elements)
        spans.append((index, at, at + size))
        at += size
    if at < len(body):
        raise BadRequest(
            f"the body holds {len(body) - at:,} bytes after its JSON ({head:,} bytes) and its inputs' binary data"
            f" ({at - head:,} bytes, the sum of their binary_data_size): give each binary input's length in its"
            " parameters.binary_data_size"
        )
    return spans


def _check(tensor: dict, where: str, body: bytes, start: int, size: int, max_elements: int) -> None:
    """`size` bytes at `start` against the input's datatype and shape, without copying them."""
    datatype, shape = tensor.get("datatype"), tensor.get("shape")
    if datatype != "BYTES" and (not isinstance(datatype, str) or datatype not in _DTYPES):
        known = ", ".join([*_DTYPES, "BYTES"])
        raise BadRequest(f"{where}: datatype {_shown(datatype)} has no binary form; the datatypes are {known}")
    if not isinstance(shape, list) or not all(type(d) is int for d in shape):
        raise BadRequest(f"{where}: shape must be a list of whole numbers, got {_shown(shape)}")
    if datatype == "BYTES":
        check_shape(shape, _count_elements(body, start, size, where, max_elements), where)
        return
    dtype = _DTYPES[datatype]
    if size % dtype.itemsize:
        raise BadRequest(
            f"{where}: parameters.binary_data_size is {size:,} bytes, not a whole number of {datatype} elements"
            f" ({dtype.itemsize} bytes each)"
        )
    count = size // dtype.itemsize
    if count > max_elements:
        raise too_many_elements(where, max_elements)
    if shape and all(d > 0 for d in shape) and math.prod(shape) != count:
        wanted = math.prod(shape)
        raise BadRequest(
            f"{where}: shape {shape} of {datatype} takes {wanted * dtype.itemsize:,} bytes ({wanted:,} elements of"
            f" {dtype.itemsize}), but parameters.binary_data_size is {size:,}"
        )
    check_shape(shape, count, where)  # a dimension that is not one, or a variable one that does not fit
    if datatype == "BOOL":
        values = np.frombuffer(body, np.uint8, count=count, offset=start)
        if count and int(values.max()) > 1:
            raise BadRequest(f"{where}: BOOL data must be bytes of 0 (false) or 1 (true), got {int(values.max())}")


def _count_elements(body: bytes, start: int, size: int, where: str, max_elements: int) -> int:
    """The BYTES elements in `size` bytes at `start`, each a 4-byte length and that many bytes, which must end where
    the size does."""
    at, end, count = start, start + size, 0
    while at < end:
        if count == max_elements:
            raise too_many_elements(where, max_elements)
        if end - at < 4:
            raise BadRequest(
                f"{where}: element {count} starts {end - at} bytes before the end of its binary_data_size ({size:,});"
                " each BYTES element is a 4-byte little-endian length, then that many bytes"
            )
        (length,) = _LENGTH.unpack_from(body, at)
        if length > end - at - 4:
            raise BadRequest(
                f"{where}: element {count} is {length:,} bytes long by its length prefix, but {end - at - 4:,} bytes"
                f" of its binary_data_size ({size:,}) are left"
            )
        at += 4 + length
        count += 1
    return count


def _values(datatype: str, body: bytes, start: int, end: int) -> list[bytes] | np.ndarray:
    """The checked bytes from `start` to `end` as the input's values: each BYTES element's bytes, or the numbers
    as an array of their datatype."""
    if datatype == "BYTES":
        items, at = [], start
        while at < end:
            (length,) = _LENGTH.unpack_from(body, at)
            items.append(body[at + 4 : at + 4 + length])
            at += 4 + length
        return items
    dtype = _DTYPES[datatype]
    values = np.frombuffer(body, dtype, count=(end - start) // dtype.itemsize, offset=start)
    return values.astype(dtype.newbyteorder("="))  # a copy of its own, writable, in the machine's byte order


def _shown(value: Any) -> str:
    """A client's value in a message: short strings as they are, long ones cut, lists and objects by kind."""
    if isinstance(value, str):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    return repr(value)


def render(answer: Answer, outputs: Outputs) -> tuple[bytes, str, dict[str, str]]:
    """The body, its media type and its own headers: JSON (v2_rest.render) when no output is asked for as binary
    data; else the response's JSON, then each binary output's element (a 4-byte little-endian length and the
    image's results as JSON text) in output order, with the JSON's length in the Inference-Header-Content-Length
    header."""
    answered = answer.answered
    images = list(zip(answered.names, answered.results, answered.image_metadata, strict=True))
    if not any(outputs.binary(name) for name, _, _ in images):
        return v2.render(answer), "application/json", {}
    listed, tail = [], []
    for name, results, metadata in images:
        if not outputs.binary(name):
            listed.append(v2.json_output(name, results, metadata))
            continue
        parameters: dict[str, Any] = {SIZE: 4 + len(results)}
        if metadata is not None:
            parameters["metadata"] = metadata
        listed.append({"name": name, "shape": [1], "datatype": "BYTES", "parameters": parameters})
        tail += [_LENGTH.pack(len(results)), results]
    json_head = orjson.dumps(v2.response(answer, listed))
    return b"".join([json_head, *tail]), MEDIA_TYPE, {HEADER: str(len(json_head))}
