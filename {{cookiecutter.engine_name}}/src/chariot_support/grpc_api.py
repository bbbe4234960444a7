"""The engine's gRPC service: MLServer's Open Inference Protocol servicer with Chariot's results, messages and
status codes, so a gRPC client learns exactly what a REST client learns."""

from __future__ import annotations

import functools
import json
import logging
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from google.protobuf.unknown_fields import UnknownFieldSet
from grpc import aio
from mlserver.errors import MLServerError
from mlserver.grpc import dataplane_pb2 as pb
from mlserver.grpc.converters import (
    ModelInferRequestConverter,
    ModelInferResponseConverter,
    ModelMetadataResponseConverter,
    RepositoryIndexRequestConverter,
    ServerMetadataResponseConverter,
)
from mlserver.grpc.dataplane_pb2_grpc import add_GRPCInferenceServiceServicer_to_server
from mlserver.grpc.interceptors import LoggingInterceptor, PromServerInterceptor
from mlserver.grpc.model_repository import ModelRepositoryServicer
from mlserver.grpc.model_repository_pb2_grpc import add_ModelRepositoryServiceServicer_to_server
from mlserver.grpc.server import DefaultGrpcWorkers, GRPCServer
from mlserver.grpc.servicers import InferenceServicer
from mlserver.grpc.utils import to_headers
from mlserver.types import InferenceRequest
from mlserver.utils import insert_headers

from .admission import guards
from .errors import BadRequest

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
        except MLServerError as error:
            if error.status_code >= 500:
                logger.error("%s failed: %s", method.__name__, error)
            await context.abort(grpc_status(error.status_code), str(error))
        except Exception as error:
            logger.exception("%s failed", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(error).__name__}: {error}")

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


def parse_infer_request(request: pb.ModelInferRequest) -> InferenceRequest:
    """The request as the data plane takes it; a malformed `raw_input_contents` is the client's mistake."""
    _wider_parameters(request.parameters)
    for tensor in request.inputs:
        _wider_parameters(tensor.parameters)
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


class ChariotInferenceServicer(InferenceServicer):
    """Every call answers with a status code a client can act on (MLServer leaves some errors UNKNOWN), and
    inference returns each image's results as one JSON-encoded BYTES element."""

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
        payload = parse_infer_request(request)
        insert_headers(payload, to_headers(context))
        response = await self._data_plane.infer(payload, request.model_name, request.model_version or None)
        # gRPC carries bytes where REST carries JSON values: each result list travels JSON-encoded.
        for output in response.outputs:
            output.data.root = [json.dumps(results).encode() for results in output.data.root]
        self._SetTrailingMetadata(response, context)
        return ModelInferResponseConverter.from_types(response, use_raw=bool(request.raw_input_contents))

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


class ChariotGRPCServer(GRPCServer):
    """MLServer's gRPC server with the Chariot servicer and one message size limit for both directions."""

    def _create_server(self) -> aio.Server:
        self._inference_servicer = ChariotInferenceServicer(self._data_plane, self._model_repository_handlers)
        self._model_repository_servicer = ModelRepositoryServicer(self._model_repository_handlers)
        interceptors: list[Any] = [LoggingInterceptor()] if self._settings.debug else []
        if self._settings.metrics_endpoint:
            interceptors.append(PromServerInterceptor(enable_handling_time_histogram=True))
        self._interceptors = interceptors
        self._server = aio.server(
            ThreadPoolExecutor(max_workers=DefaultGrpcWorkers), interceptors=interceptors, options=self._get_options()
        )
        add_GRPCInferenceServiceServicer_to_server(self._inference_servicer, self._server)
        add_ModelRepositoryServiceServicer_to_server(self._model_repository_servicer, self._server)
        self._server.add_insecure_port(f"{self._settings.host}:{self._settings.grpc_port}")
        return self._server

    async def stop(self, sig: int | None = None) -> None:
        # MLServer gives calls in flight a fixed 5 s; an engine gives them CHARIOT_GRPC_GRACE, as REST waits for its own.
        logger.info("waiting up to %g s for gRPC calls in flight", guards().grpc_grace)
        await self._server.stop(grace=guards().grpc_grace)
