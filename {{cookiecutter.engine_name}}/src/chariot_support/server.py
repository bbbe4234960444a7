"""MLServer set up as a Chariot engine: settings, model id, the routes Chariot calls and `{"error"}` bodies."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import os
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import grpc
import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from google.protobuf.unknown_fields import UnknownFieldSet
from grpc import aio
from mlserver.errors import ModelNotFound
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
from mlserver.handlers import DataPlane, ModelRepositoryHandlers
from mlserver.repository import ModelRepository
from mlserver.rest.endpoints import Endpoints
from mlserver.settings import ModelParameters, ModelSettings, Settings
from mlserver.types import (
    InferenceRequest,
    InferenceResponse,
    MetadataModelResponse,
    MetadataServerResponse,
    MetadataTensor,
    RepositoryIndexRequest,
    RepositoryIndexResponse,
)
from mlserver.utils import extract_headers, insert_headers, install_uvloop_event_loop
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from . import chariot_v2
from . import model_id as model_id_rule
from .base import ChariotModel
from .decoding import Request as V2Request
from .decoding import Tensor, plain_parameters, request_from_json
from .errors import BadRequest, ChariotError, ModelLoadFailed, NotFound
from .front import InferenceFront, read_json
from .internals import (
    SERVING_ERRORS,
    EngineServer,
    WorkerWatch,
    call_runtime,
    find_model,
    predict_images,
    response_headers,
    served_inference,
    set_uvicorn_options,
    unwrap_worker_error,
)
from .legacy import install_legacy_routes
from .logs import configure_logging, header_request_id, install_request_log, log_request, note_request_id
from .runtime import engine_limits, import_model_class
from .settings import config
from .traffic import MAX_HEAD_BYTES, BodyLimit, BodyShape, Framing, IdleLimitedProtocol, JSONBodies, ShortErrors

logger = logging.getLogger("chariot_support")

PROTOCOL = "chariot-v2-kserve"

# MLServer's own defaults that an engine changes; an MLSERVER_* environment variable still wins.
ENGINE_DEFAULTS: dict[str, Any] = {
    "debug": False,  # access log and DEBUG logging cost throughput
    "gzip_enabled": False,  # level-9 gzip of every reply costs far more than it saves on loopback and LAN
    "parallel_workers": 0,  # predict runs in this process's thread pool; workers are opt-in
    "host": "0.0.0.0",
    "http_port": 8080,
    "grpc_port": 8081,
    "metrics_port": 8082,
}


def engine_settings() -> Settings:
    """MLServer's settings with the engine's defaults. CHARIOT_MAX_REQUEST_MB is the one limit on a request's
    size: it becomes gRPC's message limit, and the REST body limit is read back from there."""
    defaults = {
        **ENGINE_DEFAULTS,
        "grpc_max_message_length": config().max_request_mb << 20,
    }
    overrides = {k: v for k, v in defaults.items() if f"MLSERVER_{k.upper()}" not in os.environ}
    settings = Settings(**overrides)
    # uvicorn's own limits (MLServer passes these through): connections and requests at once, idle keep-alive
    # seconds, and the most of an unfinished request's headers held per connection. X-Forwarded-* headers are left
    # alone: nothing in an engine reads the client's address, and reading them cost every request.
    set_uvicorn_options(
        settings,
        limit_concurrency=config().max_connections,
        timeout_keep_alive=config().keep_alive,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        http=IdleLimitedProtocol,
        proxy_headers=False,
    )
    return settings


def model_id_from_env(default_model_id: str) -> str:
    model_id = config().model_id.lower() or default_model_id
    wrong = model_id_rule.problem(model_id)
    if wrong:
        raise ValueError(wrong)
    return model_id


def model_settings(model_class: type[ChariotModel], model_id: str) -> ModelSettings:
    if model_class.__module__ == "__main__":
        raise TypeError(
            f"define {model_class.__name__} in an importable module (such as model.py), not in __main__:"
            " parallel workers import it by name"
        )
    image = MetadataTensor(name="image", datatype="BYTES", shape=[1], parameters={"content_type": "base64"})
    result = MetadataTensor(name="image", datatype="BYTES", shape=[1], parameters={"content_type": "json"})
    version = config().model_version
    return ModelSettings(
        name=f"m-{model_id}",
        implementation="chariot_support.runtime.ChariotRuntime",
        platform=f"{PROTOCOL}_{model_class.task_type.name.lower()}",
        versions=[version],
        inputs=[image],
        outputs=[result],
        parameters=ModelParameters(
            version=version,
            extra={"model_class": f"{model_class.__module__}:{model_class.__qualname__}"},
        ),
    )


class ChariotDataPlane:
    """MLServer's data plane with Chariot's model naming, request ids and not-found messages, shared by REST
    and gRPC."""

    def __init__(self, inner: DataPlane, model_registry: Any, *, model_name: str, pinned: bool):
        self._inner = inner
        self.model_registry = model_registry
        self.model_name = model_name
        self._pinned = pinned
        self.workers: WorkerWatch | None = None  # set when the model runs in parallel workers

    async def live(self) -> bool:
        return await self._inner.live()

    async def metadata(self) -> MetadataServerResponse:
        return await self._inner.metadata()

    async def infer_stream(self, payload: Any, name: str, version: str | None = None):
        raise ChariotError(
            "this engine does not stream: send each request to /v2/models/<name>/infer (or gRPC ModelInfer)", 501
        )

    def resolve(self, name: str) -> str:
        """Chariot addresses the model as m-<id> with an id chosen at deploy time; any such name reaches the
        one model this engine serves, unless CHARIOT_MODEL_ID pinned it."""
        if not self._pinned and name.startswith("m-") and model_id_rule.PATTERN.fullmatch(name[2:]):
            return self.model_name
        return name

    @contextmanager
    def named(self, name: str, version: str | None = None) -> Iterator[str]:
        """The registry's name for `name`; a model it cannot find becomes a 404 that says what is served."""
        try:
            yield self.resolve(name)
        except ModelNotFound:
            if self.resolve(name) != self.model_name:
                lowered = name.lower()
                if lowered != name and self.resolve(lowered) == self.model_name:
                    raise NotFound(
                        f"no model named {name!r}: model ids are lowercase in Chariot's URLs; use {lowered!r}"
                    ) from None
                served = self.model_name if self._pinned else f"any m-<id> name (it was started as {self.model_name})"
                raise NotFound(f"no model named {name!r}: this engine serves {served}") from None
            if version:
                raise NotFound(f"model {name!r} has no version {version!r} loaded") from None
            raise ChariotError(
                f"model {name!r} is not loaded: load it with POST /v2/repository/models/{name}/load", 404
            ) from None

    async def infer(self, payload: InferenceRequest, name: str, version: str | None = None) -> InferenceResponse:
        if not payload.id:
            headers = payload.parameters.headers if payload.parameters is not None else None
            payload.id = header_request_id(headers or {})
        with self.named(name, version) as resolved:
            # Names and versions that are not served end here, before MLServer makes metric labels of them.
            await self.model_registry.get_model(resolved, version)
            try:
                response = await self._inner.infer(payload, resolved, version)
            except ModelNotFound:
                raise
            except SERVING_ERRORS as error:
                raise unwrap_worker_error(error) from None
        response.model_name = name
        return response

    async def infer_body(
        self, body: V2Request, name: str, version: str | None, headers: Mapping[str, str]
    ) -> tuple[bytes, dict[str, str]]:
        """The engine's own V2 inference over REST: a request read from JSON in, the response's JSON text and headers
        out, with MLServer's metrics, model context and response headers, and no request or response models."""
        return await self._serve_plain("infer_body", body, name, version, headers)

    async def infer_outputs(
        self, body: V2Request, name: str, version: str | None, headers: Mapping[str, str]
    ) -> tuple[dict, dict[str, str]]:
        """The same for gRPC: the response as a dict whose outputs hold each image's results as JSON bytes."""
        return await self._serve_plain("infer_outputs", body, name, version, headers)

    async def _serve_plain(
        self, method: str, body: V2Request, name: str, version: str | None, headers: Mapping[str, str]
    ) -> tuple[Any, dict[str, str]]:
        request_id = body.id or header_request_id(headers) or str(uuid.uuid4())
        note_request_id(request_id)
        with self.named(name, version) as resolved:
            await self.model_registry.get_model(resolved, version)  # before any metric is labelled with the name
            async with served_inference(self._inner, resolved, version) as model:
                try:
                    answer = await call_runtime(
                        model, method, dataclasses.replace(body, id=request_id), request_id, name
                    )
                except SERVING_ERRORS as error:
                    raise unwrap_worker_error(error) from None
                extra = response_headers(self._inner, model, request_id)
        return answer, extra

    async def ready(self) -> bool:
        # MLServer calls a server with no models ready; an engine is ready only once its model is loaded.
        if self.workers is not None and not self.workers.serving():
            return False
        try:
            return await self.model_ready(self.model_name)
        except SERVING_ERRORS:
            return False

    async def model_ready(self, name: str, version: str | None = None) -> bool:
        with self.named(name, version) as resolved:
            if not await self._inner.model_ready(resolved, version):
                return False
            # A model stuck in a predict past CHARIOT_PREDICT_TIMEOUT cannot serve (see ChariotRuntime.stuck). With
            # parallel workers the runtime lives in another process and only its 503 answers say so.
            model = await self.model_registry.get_model(resolved, version)
        return not getattr(model, "stuck", False)

    async def model_metadata(self, name: str, version: str | None = None) -> MetadataModelResponse:
        with self.named(name, version) as resolved:
            metadata = await self._inner.model_metadata(resolved, version)
        return metadata.model_copy(update={"name": name})


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


def grpc_infer_request(body: dict, model_name: str, *, raw: bool = False):
    """The gRPC ModelInferRequest carrying the same Chariot request as the REST `body`. gRPC parameters hold no
    lists, so list values (prompts) travel JSON-encoded, and BYTES strings travel as their bytes; with `raw`,
    tensor data goes in raw_input_contents. A parameter gRPC cannot hold (an object, null) is a TypeError."""

    def parameter(key: str, value: Any):
        # MLServer's gRPC schema has no double parameter: a number with a fraction travels as its decimal string.
        if isinstance(value, list):
            value = json.dumps(value)
        elif isinstance(value, float):
            value = repr(value)
        kinds = ((bool, "bool_param"), (int, "int64_param"), (str, "string_param"))
        for kind, field in kinds:
            if isinstance(value, kind):
                return pb.InferParameter(**{field: value})
        raise TypeError(f"gRPC parameters cannot hold {key}={value!r}")

    def fill(target, parameters: dict | None) -> None:
        for key, value in (parameters or {}).items():
            target[key].CopyFrom(parameter(key, value))

    def tensor(t: dict) -> dict:
        data = t.get("data")
        if t.get("datatype") == "BYTES" and isinstance(data, list):
            data = [d.encode() if isinstance(d, str) else d for d in data]
        return {**{k: v for k, v in t.items() if k != "parameters"}, "data": data}

    plain = {k: v for k, v in body.items() if k != "parameters" and v is not None}
    request = InferenceRequest.model_validate({**plain, "inputs": [tensor(t) for t in body["inputs"]]})
    message = ModelInferRequestConverter.from_types(request, model_name=model_name, use_raw=raw)
    # MLServer's converter drops float parameters; all are filled in here.
    fill(message.parameters, body.get("parameters"))
    for sent, original in zip(message.inputs, body["inputs"], strict=True):
        fill(sent.parameters, original.get("parameters"))
    return message


def grpc_infer_results(response) -> dict[str, list]:
    """Each output's result list from a gRPC ModelInferResponse, whichever field carries the bytes."""
    answer = ModelInferResponseConverter.to_types(response)
    return {output.name: json.loads(output.data.root[0]) for output in answer.outputs}


class EngineRepository(ModelRepository):
    """The model repository of an engine: the one model it was built to serve, so that repository loads and
    unloads act on it instead of searching the working directory for model-settings.json files."""

    def __init__(self, model: ModelSettings):
        self._model = model

    async def list(self) -> list[ModelSettings]:
        return [self._model]

    async def find(self, name: str) -> list[ModelSettings]:
        if name != self._model.name:
            raise ModelNotFound(name)
        return [self._model]


class ChariotRepositoryHandlers:
    """MLServer's model repository handlers, reached by any of the model's m-<id> names as inference is."""

    def __init__(self, inner: ModelRepositoryHandlers, data_plane: ChariotDataPlane):
        self._inner = inner
        self._data_plane = data_plane

    async def index(self, payload: RepositoryIndexRequest) -> RepositoryIndexResponse:
        return await self._inner.index(payload)

    @staticmethod
    def _check_open(verb: str) -> None:
        # Anyone who reaches the port could unload the model; the control plane is opt-in.
        if not config().repository_api:
            raise ChariotError(f"repository {verb} is turned off on this engine; set CHARIOT_REPOSITORY_API=1", 403)

    async def load(self, name: str) -> bool:
        self._check_open("load")
        with self._data_plane.named(name) as resolved:
            return await self._inner.load(resolved)

    async def unload(self, name: str) -> bool:
        self._check_open("unload")
        with self._data_plane.named(name) as resolved:
            return await self._inner.unload(resolved)


def _error(status_code: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status_code, content={"error": message})


def _validation_message(exc: RequestValidationError, path: str) -> str:
    first = exc.errors()[0]
    loc = [p for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        return f"the request body is not valid JSON: {first.get('ctx', {}).get('error', first['msg'])}"
    if not loc:
        wanted = "a JSON object with an 'inputs' list" if path.rstrip("/").endswith("infer") else "a JSON object"
        return f"the request body must be {wanted} ({first['msg']})"
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return f"{path}: {first['msg']}"


def install_chariot_routes(app: FastAPI, data_plane: ChariotDataPlane, *, max_request_bytes: int) -> None:
    """Add the paths Chariot calls beside MLServer's V2 routes, and make every error body `{"error": ...}`."""
    endpoints = Endpoints(data_plane)
    # Chariot's URL ends in /infer/; MLServer would 307-redirect it to an absolute URL that is wrong behind
    # Chariot's gateway, so the slashed paths are served directly.
    app.router.redirect_slashes = False
    # V2 inference is the engine's own route: the body is read once with orjson into what the runtime takes, and
    # the answer written the same way, where MLServer's route validates and serialises through pydantic models.
    infer_paths = [
        f"/v2/models/{{model_name}}{version}/infer{slash}"
        for version in ("", "/versions/{model_version}")
        for slash in ("", "/")
    ]
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) not in infer_paths]

    async def infer_v2(raw_request: Request, body: bytes, decoded: Any, name: str, version: str | None) -> Response:
        if decoded is None:
            decoded = await asyncio.to_thread(read_json, body) if len(body) > 1 << 20 else read_json(body)
        plain = request_from_json(decoded)
        if plain is None:  # an unusual body: MLServer's request model reads it, with its coercions and messages
            try:
                payload = InferenceRequest.model_validate(decoded)
            except ValidationError as exc:
                raise RequestValidationError(exc.errors()) from None
            raw_response = Response()
            answer = await endpoints.infer(
                raw_request=raw_request,
                raw_response=raw_response,
                payload=payload,
                model_name=name,
                model_version=version,
            )
            content = answer.model_dump_json(exclude_unset=True, exclude_none=True)
            extra = {k: v for k, v in raw_response.headers.items() if k not in ("content-length", "content-type")}
        else:
            content, extra = await data_plane.infer_body(plain, name, version, raw_request.headers)
        return Response(content, media_type="application/json", headers=extra)

    async def infer_route(raw_request: Request) -> Response:
        params = raw_request.path_params
        return await infer_v2(
            raw_request, await raw_request.body(), None, params["model_name"], params.get("model_version")
        )

    # First in the table: inference is what the engine is for, and the router tries routes in order.
    app.router.routes[:0] = [Route(path, infer_route, methods=["POST"]) for path in infer_paths]

    protocol = chariot_v2.protocol_from_env()
    limits = engine_limits()

    async def root_answer(body: bytes, headers: Mapping[str, str]) -> tuple[bytes, str, dict[str, str]] | None:
        """The root /infer's answer, chariot-v2-kserve or chariot-v2 as CHARIOT_INFERENCE_PROTOCOL pins it or the
        request shows it: its body, media type and headers. None for a chariot-v2-kserve body in an unusual shape,
        which MLServer's request model reads. Errors are ChariotErrors, in chariot-v2's words for its requests."""
        content_type = headers.get("content-type")
        form = None
        try:
            chosen, decoded = chariot_v2.choose(protocol, content_type, body)
            if chosen is chariot_v2.Protocol.KSERVE:
                if decoded is None:
                    decoded = await asyncio.to_thread(read_json, body) if len(body) > 1 << 20 else read_json(body)
                plain = request_from_json(decoded)
                if plain is None:
                    return None
                content, extra = await data_plane.infer_body(plain, data_plane.model_name, None, headers)
                return content, "application/json", extra
            form = chariot_v2.form_of(content_type, body, decoded)
            model = await find_model(data_plane, data_plane.model_name, None)
            task = import_model_class(model.settings.parameters.extra["model_class"]).task_type
            request = chariot_v2.parse(
                body, content_type, headers.get(chariot_v2.PARAMETERS_HEADER), task, limits, decoded=decoded
            )
            request_id = header_request_id(headers) or uuid.uuid4().hex
            note_request_id(request_id)
            results, _ = await predict_images(model, request.parsed, request_id, explain=False, as_json=True)
        except SERVING_ERRORS as error:
            error = unwrap_worker_error(error)
            message = chariot_v2.reword(str(error), form) if form is not None else str(error)
            raise ChariotError(message, error.status_code) from None
        content, media_type = chariot_v2.render(results, form)
        return content, media_type, {"x-request-id": request_id}

    async def infer(raw_request: Request) -> Response:
        """The root /infer, when the front (front.py) hands it on: a chariot-v2-kserve body in an unusual shape."""
        body = await raw_request.body()
        answer = await root_answer(body, raw_request.headers)
        if answer is None:
            return await infer_v2(raw_request, body, None, data_plane.model_name, None)
        content, media_type, extra = answer
        return Response(content, media_type=media_type, headers=extra)

    async def ready() -> JSONResponse:
        if await data_plane.ready():
            return JSONResponse({"status": "ready"})
        return _error(503, "the model is not loaded, or is stuck in a predict that overran CHARIOT_PREDICT_TIMEOUT")

    # KServe's clients read the health answers' bodies; MLServer's are empty.
    async def health_live() -> JSONResponse:
        live = await data_plane.live()
        return JSONResponse({"live": live}, status_code=200 if live else 400)

    async def health_ready() -> JSONResponse:
        ready = await data_plane.ready()
        return JSONResponse({"ready": ready}, status_code=200 if ready else 400)

    async def infer_stream(model_name: str, model_version: str | None = None) -> JSONResponse:
        # MLServer would answer 200 and then fail inside the stream; the engine says so before anything is sent.
        with data_plane.named(model_name, model_version) as resolved:
            await data_plane.model_registry.get_model(resolved, model_version)
        return _error(
            501, "this engine does not stream: send each request to /v2/models/<name>/infer (or gRPC ModelInfer)"
        )

    replaced = ("/v2/health/live", "/v2/health/ready")
    app.router.routes[:] = [
        r
        for r in app.router.routes
        if getattr(r, "path", None) not in replaced and not getattr(r, "path", "").endswith("/infer_stream")
    ]
    for path in (
        "/v2/models/{model_name}/infer_stream",
        "/v2/models/{model_name}/versions/{model_version}/infer_stream",
    ):
        app.add_api_route(path, infer_stream, methods=["POST"])
    app.add_api_route("/v2/health/live", health_live, methods=["GET"])
    app.add_api_route("/v2/health/ready", health_ready, methods=["GET"])
    app.add_api_route("/infer", infer, methods=["POST"])
    app.add_api_route("/ready", ready, methods=["GET"])

    async def on_engine_error(request: Request, exc: ChariotError) -> JSONResponse:
        return _error(exc.status_code, str(exc))

    async def on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(400, _validation_message(exc, request.url.path))

    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return _error(404, f"no route for {request.method} {request.url.path}")
        if exc.status_code == 405:
            return _error(405, f"{request.method} is not allowed on {request.url.path}")
        return _error(exc.status_code, str(exc.detail))

    async def on_unhandled(request: Request, exc: Exception) -> JSONResponse:
        logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    app.add_middleware(BodyShape, max_elements=engine_limits().max_elements, max_depth=config().max_json_depth)
    app.add_middleware(JSONBodies)
    app.add_middleware(BodyLimit, max_bytes=max_request_bytes)
    app.add_middleware(ShortErrors, max_chars=config().max_error_chars)
    app.add_middleware(Framing)
    install_request_log(app, data_plane.model_name)
    # Outermost of the engine's middlewares: inference (V2 and the root /infer) answered in one pass (see front.py).
    app.add_middleware(
        InferenceFront,
        data_plane=data_plane,
        root_answer=root_answer,
        max_bytes=max_request_bytes,
        max_elements=engine_limits().max_elements,
        max_depth=config().max_json_depth,
        max_error_chars=config().max_error_chars,
    )
    app.add_exception_handler(ChariotError, on_engine_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unhandled)


class ChariotServer(EngineServer):
    """MLServer serving one Chariot model, with the Chariot data plane, routes and gRPC service."""

    grpc_servicer = ChariotInferenceServicer

    def __init__(self, settings: Settings, *, model: ModelSettings, pinned: bool):
        self._chariot_model = (model, pinned)
        self.grpc_grace = config().grpc_grace
        self.predict_timeout = config().predict_timeout
        super().__init__(settings)

    def engine_parts(self, data_plane: DataPlane, model_registry: Any):
        model, pinned = self._chariot_model
        chariot_plane = ChariotDataPlane(data_plane, model_registry, model_name=model.name, pinned=pinned)
        repository = EngineRepository(model)
        handlers = ChariotRepositoryHandlers(ModelRepositoryHandlers(repository, model_registry), chariot_plane)
        self._chariot_plane = chariot_plane
        return chariot_plane, repository, handlers

    def install_routes(self, rest_app: FastAPI, metrics_app: FastAPI | None) -> None:
        data_plane = self._chariot_plane
        install_chariot_routes(rest_app, data_plane, max_request_bytes=self.settings.grpc_max_message_length)
        install_legacy_routes(rest_app, data_plane)
        close_api_pages(rest_app, metrics_app)


def close_api_pages(app: FastAPI, metrics_app: FastAPI | None) -> None:
    """Take out what an engine does not serve: MLServer's generate routes (it serves no language model), and,
    unless CHARIOT_API_DOCS turns them on, the API docs pages and OpenAPI schemas of both servers."""

    def served(path: str) -> bool:
        if path.endswith(("/generate", "/generate_stream")):
            return False
        return config().api_docs or not (path == "/openapi.json" or "/docs" in path or path == "/redoc")

    for each in (app, metrics_app):
        if each is not None:
            each.router.routes[:] = [r for r in each.router.routes if served(getattr(r, "path", ""))]


async def _serve(model_class: type[ChariotModel], default_model_id: str) -> None:
    settings = engine_settings()
    model_id = model_id_from_env(default_model_id)
    model = model_settings(model_class, model_id)
    server = ChariotServer(settings, model=model, pinned=bool(config().model_id))
    configure_logging()  # after MLServer's constructor has set up its logger, so that one is formatted too
    logger.info(
        "serving %s as %s on REST :%s and gRPC :%s",
        model_class.task_type.value,
        model.name,
        settings.http_port,
        settings.grpc_port,
    )
    await server.start([model])


def serve(model_class: type[ChariotModel], *, default_model_id: str) -> None:
    """Start the engine and serve until SIGTERM/SIGINT; exit with status 1 when the model does not load."""
    install_uvloop_event_loop()
    try:
        asyncio.run(_serve(model_class, default_model_id))
    except ModelLoadFailed as failure:
        logger.critical("the engine stops: %s", failure)
        raise SystemExit(1) from None
