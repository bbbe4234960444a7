"""The gRPC inference service: every call answers with a status code a client can act on, and inference returns each
image's results as one JSON-encoded BYTES element."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable

import grpc
from grpc import aio
from mlserver.grpc import dataplane_pb2 as pb
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceServicer

from chariot_support.after_answer import afterwards
from chariot_support.errors import internal_error
from chariot_support.grpc.limits import call_received, off_loop_if_large, refused_calls
from chariot_support.logs.request_lines import log_request, request_entry
from chariot_support.pipeline.data_plane import ChariotDataPlane, ChariotRepositoryHandlers
from chariot_support.pipeline.pipeline import SERVING_ERRORS
from chariot_support.protocols import v2_grpc
from chariot_support.seams.mlserver import (
    ModelMetadataResponseConverter,
    RepositoryIndexRequestConverter,
    ServerMetadataResponseConverter,
    to_headers,
    to_metadata,
)
from chariot_support.stages.timing import stage_times
from chariot_support.triton import messages

SERVICE = "inference.GRPCInferenceService"

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

    logs_itself = method.__name__ == "ModelInfer"

    @functools.wraps(method)
    async def call(self, request, context):
        started, status = time.perf_counter(), 500
        try:
            answer = await method(self, request, context)
            status = 200
            return answer
        except aio.AbortError:
            raise
        except SERVING_ERRORS as error:
            if error.status_code >= 500:
                logger.error("%s failed: %s", method.__name__, error)
            status = error.status_code
            code, message = grpc_status(error.status_code), str(error)
        except Exception as error:
            logger.exception("%s failed", method.__name__)
            code, message = grpc.StatusCode.INTERNAL, internal_error(error)
        finally:
            if not logs_itself:  # one log line per call, as REST writes one per request (health quietly)
                model = getattr(request, "name", None) or None
                log_request(
                    protocol="grpc",
                    method=method.__name__,
                    path="",
                    status=status,
                    started=started,
                    request_id=None,
                    model=model,
                )
        # Aborted after the except block, so that the abort's exception does not carry the error as its context:
        # gRPC keeps it past the call, and the error's traceback holds the request (up to CHARIOT_MAX_REQUEST_MB).
        await context.abort(code, message)

    return call


# The engine counts a call's deadline from when the call arrived; its client, from when it sent it. So a client that
# gives up at its deadline is heard here a little before the engine's own deadline: 1-3 ms, measured with the
# two cores busy. Its call, cancelled with this much or less left, is counted as its deadline passing.
CLIENT_CLOCK_LEAD_S = 0.25


def _past_deadline(context, lead: float = 0.0) -> bool:
    remaining = context.time_remaining()
    return remaining is not None and remaining <= lead


class ChariotInferenceServicer(GRPCInferenceServiceServicer):
    """Every call answers with a status code a client can act on (MLServer leaves some errors UNKNOWN), and
    inference returns each image's results as one JSON-encoded BYTES element."""

    def __init__(self, data_plane: ChariotDataPlane, model_repository_handlers: ChariotRepositoryHandlers):
        super().__init__()
        self._data_plane = data_plane
        self._pipeline = data_plane.pipeline
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
    async def ModelConfig(self, request, context):
        """Triton's model configuration extension (triton/config.py), which MLServer's service lacks."""
        config = await self._data_plane.model_configuration(request.name, request.version or None)
        return messages.from_json(messages.ModelConfigResponse, {"config": config})

    @_aborts_with_status
    async def ModelStatistics(self, request, context):
        """Triton's statistics extension (triton/statistics.py), which MLServer's service lacks."""
        stats = await self._data_plane.model_statistics(request.name or None, request.version or None)
        return messages.from_json(messages.ModelStatisticsResponse, stats)

    def extension_handler(self) -> grpc.GenericRpcHandler:
        """The calls of Triton's extensions in the V2 service, beside those MLServer's generated service registers."""
        handlers = {
            "ModelConfig": grpc.unary_unary_rpc_method_handler(
                self.ModelConfig,
                request_deserializer=messages.ModelConfigRequest.FromString,
                response_serializer=messages.ModelConfigResponse.SerializeToString,
            ),
            "ModelStatistics": grpc.unary_unary_rpc_method_handler(
                self.ModelStatistics,
                request_deserializer=messages.ModelStatisticsRequest.FromString,
                response_serializer=messages.ModelStatisticsResponse.SerializeToString,
            ),
        }
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    @_aborts_with_status
    async def ModelInfer(self, request: pb.ModelInferRequest, context) -> pb.ModelInferResponse:
        # The message's admission and arrival, as the call limits measured them (none measured: all at once).
        received = call_received() or (now := time.perf_counter(), 0.0, 0.0, now)
        started, status, answer = received[0], 500, None
        name = request.model_name
        with request_entry() as entry:
            try:
                if _past_deadline(context):  # its caller has given up: not parsed, queued or predicted
                    status = 504
                    refused_calls().labels("deadline_exceeded").inc()
                    await context.abort(
                        grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed before it was served"
                    )
                headers = to_headers(context)
                parsed = await off_loop_if_large(v2_grpc.parse, request, self._data_plane.engine.max_elements)
                answer = await self._pipeline.answer(parsed, headers, name, request.model_version or None)
                response = v2_grpc.render(answer, raw=bool(request.raw_input_contents))
                status = 200
            except SERVING_ERRORS as error:
                status = error.status_code
                raise
            except asyncio.CancelledError:
                # gRPC cancels a call whose deadline passes (its work is dropped if it has not started) or whose
                # client went away: counted and logged as such, not as the engine's failure.
                if _past_deadline(context, CLIENT_CLOCK_LEAD_S):
                    status = 504
                    refused_calls().labels("deadline_exceeded").inc()
                else:
                    status = 499
                raise
            finally:
                ended = time.perf_counter()
                stages = None if answer is None else stage_times(received, answer, ended)
                # One log line per inference, as REST writes; gRPC has no path, and the status is REST's for it.
                log_request(
                    protocol="grpc",
                    method="ModelInfer",
                    path=f"/v2/models/{name}/infer",
                    status=status,
                    started=started,
                    ended=ended,
                    request_id=entry.get("request_id"),
                    model=name,
                    stages=stages,
                )
                if status == 200 and stages is not None:  # Triton's statistics, and the stage histograms
                    self._pipeline.statistics.answered((stages, ended - started, ended, answer.answered.stages))
                else:
                    afterwards.later(self._pipeline.statistics.failed, name, ended - started, ended)
        if answer.headers:  # the request id and CloudEvents headers, which REST sends as response headers
            context.set_trailing_metadata(to_metadata(answer.headers))
        return response

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
