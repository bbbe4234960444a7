"""The gRPC inference service: every call answers with a status code a client can act on, and inference returns each
image's results as one JSON-encoded BYTES element."""

from __future__ import annotations

import dataclasses
import functools
import logging
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

import grpc
import orjson
from google.protobuf.unknown_fields import UnknownFieldSet
from grpc import aio
from mlserver.grpc import dataplane_pb2 as pb
from mlserver.grpc.converters import (
    ModelInferRequestConverter,
    ModelInferResponseConverter,
    ModelMetadataResponseConverter,
    RepositoryIndexRequestConverter,
    ServerMetadataResponseConverter,
)
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceServicer
from mlserver.grpc.utils import to_headers, to_metadata
from mlserver.types import (
    InferenceRequest,
    InferenceResponse,
)
from mlserver.utils import extract_headers, insert_headers

from .data_plane import ChariotDataPlane, ChariotRepositoryHandlers
from .decoding import Request as V2Request
from .decoding import Tensor, plain_parameters
from .errors import BadRequest
from .internals import (
    SERVING_ERRORS,
)
from .logs import header_request_id, log_request

logger = logging.getLogger("chariot_support")


# The HTTP status each error carries, as the gRPC code that means the same thing to a client.
GRPC_STATUS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ALREADY_EXISTS,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    422: grpc.StatusCode.FAILED_PRECONDITION,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def grpc_status(http_status: int) -> grpc.StatusCode:
    if http_status in GRPC_STATUS:
        return GRPC_STATUS[http_status]
    return grpc.StatusCode.INVALID_ARGUMENT if 400 <= http_status < 500 else grpc.StatusCode.INTERNAL


def _aborts_with_status(method: Callable) -> Callable:
    """Turn an error into the gRPC status matching its HTTP status, with the message REST would give."""

    @functools.wraps(method)
    async def call(self, request, context):
        try:
            return await method(self, request, context)
        except aio.AbortError:
            raise
        except SERVING_ERRORS as error:
            if error.status_code >= 500:
                logger.error("%s failed: %s", method.__name__, error)
            code, message = grpc_status(error.status_code), str(error)
        except Exception as error:
            logger.exception("%s failed", method.__name__)
            code, message = grpc.StatusCode.INTERNAL, f"internal error: {type(error).__name__}: {error}"
        # Aborted after the except block, so that the abort's exception does not carry the error as its context:
        # gRPC keeps it past the call, and the error's traceback holds the request (up to CHARIOT_MAX_REQUEST_MB).
        await context.abort(code, message)

    return call


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


def _unpack_bytes(raw: bytes) -> list[bytes] | None:
    """A BYTES tensor's raw contents: each element a 4-byte little-endian length, then its bytes; None if cut short."""
    items, at = [], 0
    while at < len(raw):
        size = int.from_bytes(raw[at : at + 4], "little")
        if at + 4 + size > len(raw):
            return None
        items.append(raw[at + 4 : at + 4 + size])
        at += 4 + size
    return items


def plain_grpc_request(request: pb.ModelInferRequest) -> V2Request | None:
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
        data = _unpack_bytes(raw[index]) if raw else list(tensor.contents.bytes_contents)
        if data is None:
            return None
        inputs.append(Tensor(name=tensor.name, data=data, shape=list(tensor.shape), parameters=parameters or None))
    parameters = _grpc_parameters(request.parameters)
    if parameters is None:
        return None
    return V2Request(inputs=inputs, parameters=parameters or None, id=request.id or None)


def grpc_response(answer: dict, *, raw: bool) -> pb.ModelInferResponse:
    """The runtime's answer as a ModelInferResponse: each image's results as one JSON-encoded BYTES element (in the
    raw contents when the request came that way), the metadata passed back as string parameters."""
    response = pb.ModelInferResponse(model_name=answer["model_name"], id=answer["id"])
    if answer["model_version"] is not None:
        response.model_version = answer["model_version"]
    for key, value in answer["parameters"].items():
        response.parameters[key].string_param = value
    for output in answer["outputs"]:
        tensor = response.outputs.add(name=output["name"], datatype="BYTES", shape=[1])
        for key, value in output.get("parameters", {}).items():
            tensor.parameters[key].string_param = value
        (results,) = output["data"]
        if raw:
            response.raw_output_contents.append(len(results).to_bytes(4, "little") + results)
        else:
            tensor.contents.bytes_contents.append(results)
    return response


def parse_infer_request(request: pb.ModelInferRequest) -> InferenceRequest:
    """The request as the data plane takes it; a malformed `raw_input_contents` is the client's mistake."""
    if request.raw_input_contents and len(request.raw_input_contents) != len(request.inputs):
        raise BadRequest(
            f"raw_input_contents has {len(request.raw_input_contents)} entries for {len(request.inputs)} inputs:"
            " send one entry per input, in input order"
        )
    try:
        return ModelInferRequestConverter.to_types(request)
    except Exception as error:  # noqa: BLE001 - the converter raises struct and index errors on bad raw bytes
        raise BadRequest(
            f"raw_input_contents could not be read ({type(error).__name__}: {error}): each BYTES element must be"
            " a 4-byte little-endian length followed by that many bytes"
        ) from None


class ChariotInferenceServicer(GRPCInferenceServiceServicer):
    """Every call answers with a status code a client can act on (MLServer leaves some errors UNKNOWN), and
    inference returns each image's results as one JSON-encoded BYTES element."""

    def __init__(self, data_plane: ChariotDataPlane, model_repository_handlers: ChariotRepositoryHandlers):
        super().__init__()
        self._data_plane = data_plane
        self._model_repository_handlers = model_repository_handlers

    @_aborts_with_status
    async def ServerLive(self, request, context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=await self._data_plane.live())

    @_aborts_with_status
    async def ServerReady(self, request, context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=await self._data_plane.ready())

    @_aborts_with_status
    async def ModelReady(self, request, context) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=await self._data_plane.model_ready(request.name, request.version))

    @_aborts_with_status
    async def ServerMetadata(self, request, context) -> pb.ServerMetadataResponse:
        return ServerMetadataResponseConverter.from_types(await self._data_plane.metadata())

    @_aborts_with_status
    async def ModelMetadata(self, request, context) -> pb.ModelMetadataResponse:
        metadata = await self._data_plane.model_metadata(request.name, request.version)
        return ModelMetadataResponseConverter.from_types(metadata)

    @_aborts_with_status
    async def ModelInfer(self, request: pb.ModelInferRequest, context) -> pb.ModelInferResponse:
        started, status, request_id = time.perf_counter(), 500, None
        name, version = request.model_name, request.model_version or None
        raw = bool(request.raw_input_contents)
        try:
            _wider_parameters(request.parameters)
            for tensor in request.inputs:
                _wider_parameters(tensor.parameters)
            plain = plain_grpc_request(request)
            if plain is not None:  # read straight into the runtime's request, answered without response models
                headers = to_headers(context)
                request_id = plain.id or header_request_id(headers) or str(uuid.uuid4())
                plain = dataclasses.replace(plain, id=request_id)
                answer, extra = await self._data_plane.infer_outputs(plain, name, version, headers)
                response = grpc_response(answer, raw=raw)
            else:
                payload = parse_infer_request(request)
                insert_headers(payload, to_headers(context))
                answered = await self._data_plane.infer(payload, name, version)
                request_id = payload.id
                response, extra = self._converted(answered, raw=raw)
            status = 200
        except SERVING_ERRORS as error:
            status = error.status_code
            raise
        finally:
            # One log line per inference, as REST writes; gRPC has no path, and the status is REST's for the outcome.
            log_request(
                protocol="grpc",
                method="ModelInfer",
                path=f"/v2/models/{request.model_name}/infer",
                status=status,
                started=started,
                request_id=request_id,
                model=name,
            )
        if extra:  # the request id, as REST sends it in its response headers
            context.set_trailing_metadata(to_metadata(extra))
        return response

    @staticmethod
    def _converted(response: InferenceResponse, *, raw: bool) -> tuple[pb.ModelInferResponse, dict[str, str]]:
        # gRPC carries bytes where REST carries JSON values: each result list travels JSON-encoded.
        for output in response.outputs:
            output.data.root = [orjson.dumps(results) for results in output.data.root]
        headers = extract_headers(response) or {}
        return ModelInferResponseConverter.from_types(response, use_raw=raw), headers

    async def ModelStreamInfer(self, requests_stream, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this engine serves ModelInfer; streaming is not served")
        yield  # never reached: the yield makes this the async generator a streaming handler must be

    @_aborts_with_status
    async def RepositoryIndex(self, request, context) -> pb.RepositoryIndexResponse:
        index = await self._model_repository_handlers.index(RepositoryIndexRequestConverter.to_types(request))
        # MLServer's converter writes the state as "State.READY"; REST and the protocol say "READY".
        return pb.RepositoryIndexResponse(
            models=[
                pb.RepositoryIndexResponse.ModelIndex(
                    name=item.name, version=item.version or "", state=item.state.value, reason=item.reason or ""
                )
                for item in index.root
            ]
        )

    @_aborts_with_status
    async def RepositoryModelLoad(self, request, context) -> pb.RepositoryModelLoadResponse:
        await self._model_repository_handlers.load(request.model_name)
        return pb.RepositoryModelLoadResponse()

    @_aborts_with_status
    async def RepositoryModelUnload(self, request, context) -> pb.RepositoryModelUnloadResponse:
        await self._model_repository_handlers.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()
