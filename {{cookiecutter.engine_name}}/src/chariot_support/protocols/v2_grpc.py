"""The Open Inference Protocol (V2) over gRPC: a ModelInferRequest read into the engine's request, and the answer
written as a ModelInferResponse. A request in the plain shape image clients send (BYTES inputs, plain parameters) is
read straight from the message; any other is read by MLServer's converter, with its coercions, into the same
request."""

from __future__ import annotations

import functools
import struct
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.unknown_fields import UnknownFieldSet
from mlserver.grpc import dataplane_pb2 as pb

from chariot_support.errors import BadRequest
from chariot_support.protocols import v2_rest as v2
from chariot_support.protocols.chariot_v2_kserve import plain_parameters
from chariot_support.protocols.request import Answer, Request, Tensor
from chariot_support.protocols.tensors import too_many_elements
from chariot_support.seams.mlserver import ModelInferRequestConverter


def parse(request: pb.ModelInferRequest, most: int) -> Request:
    """The request a ModelInferRequest carries, with at most `most` elements in any tensor (CHARIOT_MAX_ELEMENTS)."""
    _wider_parameters(request.parameters)
    for tensor in request.inputs:
        _wider_parameters(tensor.parameters)
        # Counted before any is read: ten million one-byte elements become ten million Python objects.
        if sum(len(values) for _, values in tensor.contents.ListFields()) > most:
            raise too_many_elements(f"input {tensor.name!r}", most)
    return plain_grpc_request(request, most) or _converted(request)


def fields_past(raw: bytes, most: int, descriptor: Descriptor = pb.ModelInferRequest.DESCRIPTOR) -> bool:
    """Whether a serialized message holds more than `most` fields at every depth (inputs, parameters, each element
    of bytes or unpacked contents), read from its wire format without building it: protobuf's parse holds about 90
    bytes for each, so ten million one-byte elements in a 30 MiB message took 900 MB before they could be counted.
    False for a message that is not well formed, which the parse then refuses."""
    count, stack = 0, [(0, len(raw), descriptor)]
    while stack:
        at, end, kind = stack.pop()
        inner = _message_fields(kind)
        while at < end:
            key, at = _varint(raw, at)
            count += 1
            if key is None or count > most:
                return key is not None
            wire = key & 7
            if wire == 0:
                _, at = _varint(raw, at)
            elif wire == 1 or wire == 5:
                at += 8 if wire == 1 else 4
            elif wire == 2:
                size, at = _varint(raw, at)
                if size is None:
                    return False
                if (key >> 3) in inner:
                    stack.append((at, min(at + size, end), inner[key >> 3]))
                at += size
            else:
                return False
            if at is None:
                return False
    return False


@functools.cache
def _message_fields(descriptor: Descriptor) -> dict[int, Descriptor]:
    """The fields of a message type that hold messages, by number, with their types."""
    return {f.number: f.message_type for f in descriptor.fields if f.type == FieldDescriptor.TYPE_MESSAGE}


def _varint(raw: bytes, at: int) -> tuple[int | None, int | None]:
    value = shift = 0
    while at < len(raw) and shift < 64:
        byte = raw[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7
    return None, None


def _wider_parameters(parameters) -> None:
    """MLServer's gRPC schema knows bool, int64 and string parameters; clients built on the full Open Inference
    Protocol (tritonclient) also send double and uint64 ones, which arrive as unknown fields and would be lost.
    They are read here: a double becomes its decimal string (as a JSON client's number reads), a uint64 an int64."""
    for key in list(parameters):
        parameter = parameters[key]
        if parameter.WhichOneof("parameter_choice") is not None:
            continue
        for field in UnknownFieldSet(parameter):
            if field.field_number == 4 and field.wire_type == 1:  # double_param
                parameters[key].string_param = repr(struct.unpack("<d", struct.pack("<Q", field.data))[0])
            elif field.field_number == 5 and field.wire_type == 0 and field.data < 2**63:  # uint64_param
                parameters[key].int64_param = field.data


def _grpc_parameters(parameters) -> dict[str, Any] | None:
    """gRPC parameters as plain values; None when one holds a kind MLServer's parameters model reads its own way."""
    values = {}
    for key, parameter in parameters.items():
        kind = parameter.WhichOneof("parameter_choice")
        if kind is None:
            return None
        values[key] = getattr(parameter, kind)
    return values if plain_parameters(values) else None


def _unpack_bytes(raw: bytes, name: str, most: int) -> list[bytes] | None:
    """A BYTES tensor's raw contents: each element a 4-byte little-endian length, then its bytes; None if cut short,
    TooLarge past CHARIOT_MAX_ELEMENTS (60 MiB of zero lengths are 15 million elements, 12 s of unpacking)."""
    items, at = [], 0
    while at < len(raw):
        if len(items) == most:
            raise too_many_elements(f"input {name!r}", most)
        size = int.from_bytes(raw[at : at + 4], "little")
        if at + 4 + size > len(raw):
            return None
        items.append(raw[at + 4 : at + 4 + size])
        at += 4 + size
    return items


def plain_grpc_request(request: pb.ModelInferRequest, most: int) -> Request | None:
    """The request read straight into the runtime's request when it has the plain shape image clients send (BYTES
    inputs, in their contents or well-formed raw contents, and plain parameters), else None: MLServer's converter
    then reads it, with its coercions and errors. Call after `_wider_parameters`."""
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        return None
    inputs = []
    for index, tensor in enumerate(request.inputs):
        parameters = _grpc_parameters(tensor.parameters)
        if tensor.datatype != "BYTES" or parameters is None:
            return None
        data = _unpack_bytes(raw[index], tensor.name, most) if raw else list(tensor.contents.bytes_contents)
        if data is None:
            return None
        inputs.append(Tensor(name=tensor.name, data=data, shape=list(tensor.shape), parameters=parameters or None))
    parameters = _grpc_parameters(request.parameters)
    if parameters is None:
        return None
    return Request(inputs=inputs, parameters=parameters or None, id=request.id or None)


def render(answer: Answer, *, raw: bool) -> pb.ModelInferResponse:
    """The answer as a ModelInferResponse: each image's results as one JSON-encoded BYTES element (in the raw
    contents when the request came that way), the metadata passed back as string parameters."""
    answered = answer.answered
    response = pb.ModelInferResponse(model_name=answer.model_name, id=answer.request_id)
    if answer.model_version is not None:
        response.model_version = answer.model_version
    if answered.metadata is not None:
        response.parameters["metadata"].string_param = answered.metadata
    for name, results, metadata in zip(answered.names, answered.results, answered.image_metadata, strict=True):
        tensor = response.outputs.add(name=name, datatype="BYTES", shape=[1])
        if metadata is not None:
            tensor.parameters["metadata"].string_param = metadata
        if raw:
            response.raw_output_contents.append(len(results).to_bytes(4, "little") + results)
        else:
            tensor.contents.bytes_contents.append(results)
    return response


def _converted(request: pb.ModelInferRequest) -> Request:
    """A request in any other shape, read by MLServer's converter with its coercions; a malformed
    `raw_input_contents` is the client's mistake."""
    if request.raw_input_contents and len(request.raw_input_contents) != len(request.inputs):
        raise BadRequest(
            f"raw_input_contents has {len(request.raw_input_contents)} entries for {len(request.inputs)} inputs:"
            " send one entry per input, in input order"
        )
    try:
        return v2.request_from_model(ModelInferRequestConverter.to_types(request))
    except Exception as error:  # noqa: BLE001 - the converter raises struct and index errors on bad raw bytes
        raise BadRequest(
            f"raw_input_contents could not be read ({type(error).__name__}: {error}): each BYTES element must be"
            " a 4-byte little-endian length followed by that many bytes"
        ) from None
