"""MLServer set up as a Chariot engine: settings, model id, the routes Chariot calls and `{"error"}` bodies."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from mlserver import MLServer
from mlserver.errors import MLServerError, ModelNotFound
from mlserver.handlers import DataPlane, ModelRepositoryHandlers
from mlserver.repository import ModelRepository
from mlserver.rest.endpoints import Endpoints
from mlserver.settings import ModelParameters, ModelSettings, Settings
from mlserver.types import (
    InferenceRequest,
    InferenceResponse,
    MetadataModelResponse,
    MetadataTensor,
    RepositoryIndexRequest,
    RepositoryIndexResponse,
)
from mlserver.utils import install_uvloop_event_loop
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import chariot_v2
from .admission import guards
from .base import ChariotModel
from .errors import ChariotError, ModelLoadFailed, NotFound
from .grpc_api import ChariotGRPCServer
from .internals import WorkerWatch, unwrap_worker_error
from .legacy import find_model, install_legacy_routes, predict_images
from .logs import GRPCRequestLog, configure_logging, header_request_id, install_request_log, note_request_id
from .runtime import engine_limits, env_int, env_seconds, import_model_class
from .traffic import BodyShape, Framing, IdleLimitedProtocol, ShortErrors

logger = logging.getLogger("chariot_support")

MODEL_ID_PATTERN = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
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
DEFAULT_MAX_REQUEST_MB = 64  # eight 12-megapixel JPEGs in base64, with room to spare


def engine_settings() -> Settings:
    """MLServer's settings with the engine's defaults. CHARIOT_MAX_REQUEST_MB is the one limit on a request's
    size: it becomes gRPC's message limit, and the REST body limit is read back from there."""
    defaults = {
        **ENGINE_DEFAULTS,
        "grpc_max_message_length": env_int("CHARIOT_MAX_REQUEST_MB", DEFAULT_MAX_REQUEST_MB) << 20,
    }
    overrides = {k: v for k, v in defaults.items() if f"MLSERVER_{k.upper()}" not in os.environ}
    settings = Settings(**overrides)
    # uvicorn's own limits (MLServer passes these through): connections and requests at once, idle keep-alive
    # seconds, and the most of an unfinished request's headers held per connection.
    settings._custom_rest_server_settings = {
        "limit_concurrency": guards().max_connections,
        "timeout_keep_alive": guards().keep_alive,
        "h11_max_incomplete_event_size": 64 << 10,
        "http": IdleLimitedProtocol,
    }
    return settings


def model_id_from_env(default_model_id: str) -> str:
    model_id = os.environ.get("CHARIOT_MODEL_ID", "").strip().lower() or default_model_id
    if not MODEL_ID_PATTERN.fullmatch(model_id):
        raise ValueError(
            f"model id {model_id!r} cannot stand in /v2/models/m-<id>: use lowercase letters, digits and dashes"
        )
    return model_id


def model_settings(model_class: type[ChariotModel], model_id: str) -> ModelSettings:
    if model_class.__module__ == "__main__":
        raise TypeError(
            f"define {model_class.__name__} in an importable module (such as model.py), not in __main__:"
            " parallel workers import it by name"
        )
    image = MetadataTensor(name="image", datatype="BYTES", shape=[1], parameters={"content_type": "base64"})
    result = MetadataTensor(name="image", datatype="BYTES", shape=[1], parameters={"content_type": "json"})
    version = os.environ.get("CHARIOT_MODEL_VERSION", "1")
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

    def __init__(self, inner: DataPlane, *, model_name: str, pinned: bool):
        self._inner = inner
        self.model_name = model_name
        self._pinned = pinned
        self.workers: WorkerWatch | None = None  # set when the model runs in parallel workers

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def resolve(self, name: str) -> str:
        """Chariot addresses the model as m-<id> with an id chosen at deploy time; any such name reaches the
        one model this engine serves, unless CHARIOT_MODEL_ID pinned it."""
        if not self._pinned and name.startswith("m-") and MODEL_ID_PATTERN.fullmatch(name[2:]):
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
            await self._inner._model_registry.get_model(resolved, version)
            try:
                response = await self._inner.infer(payload, resolved, version)
            except ModelNotFound:
                raise
            except MLServerError as error:
                raise unwrap_worker_error(error) from None
        response.model_name = name
        return response

    async def ready(self) -> bool:
        # MLServer calls a server with no models ready; an engine is ready only once its model is loaded.
        if self.workers is not None and not self.workers.serving():
            return False
        try:
            return await self.model_ready(self.model_name)
        except MLServerError:
            return False

    async def model_ready(self, name: str, version: str | None = None) -> bool:
        with self.named(name, version) as resolved:
            if not await self._inner.model_ready(resolved, version):
                return False
            # A model stuck in a predict past CHARIOT_PREDICT_TIMEOUT cannot serve (see ChariotRuntime.stuck). With
            # parallel workers the runtime lives in another process and only its 503 answers say so.
            model = await self._inner._model_registry.get_model(resolved, version)
        return not getattr(model, "stuck", False)

    async def model_metadata(self, name: str, version: str | None = None) -> MetadataModelResponse:
        with self.named(name, version) as resolved:
            metadata = await self._inner.model_metadata(resolved, version)
        return metadata.model_copy(update={"name": name})


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
        if not guards().repository_api:
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


class JSONBodies:
    """Read every POST body but the root /infer's as JSON whatever its Content-Type (`curl -d` labels it form data,
    and those routes take nothing but JSON), and an empty body as `{}` where no body is needed, as tritonclient sends a
    repository index."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"].rstrip("/") == "/infer":
            # The root /infer reads its own body: it may be an image file or JSONL as well as JSON.
            return await self.app(scope, receive, send)
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
        scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        # An empty inference body is refused as such; elsewhere (a repository index) it means no options.
        first = not scope["path"].rstrip("/").endswith("infer")

        async def empty_is_an_object():
            nonlocal first
            message = await receive()
            if first and message["type"] == "http.request" and not message.get("body") and not message.get("more_body"):
                message = {**message, "body": b"{}"}
            first = False
            return message

        await self.app(scope, empty_is_an_object, send)


class BodyLimit:
    """Refuse a request body over the size limit with 413, before reading it when Content-Length says so and
    as soon as the limit is passed when it does not, so an oversize upload never sits whole in memory."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    def _message(self, size: str) -> str:
        return (
            f"the request body is {size}, more than this engine's limit of {self.max_bytes:,} bytes:"
            " send fewer or smaller images per request, or raise CHARIOT_MAX_REQUEST_MB"
        )

    async def _refuse(self, send, size: str) -> None:
        response = _error(413, self._message(size))
        await send({"type": "http.response.start", "status": 413, "headers": response.raw_headers})
        await send({"type": "http.response.body", "body": response.body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(send, f"{int(declared):,} bytes")
        received = 0
        too_large = False

        async def counted_receive():
            nonlocal received, too_large
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                # End the body here, so the app stops reading; its answer to the cut body is replaced below.
                too_large = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return message

        async def guarded_send(message):
            if not too_large:
                await send(message)

        await self.app(scope, counted_receive, guarded_send)
        if too_large:
            await self._refuse(send, f"over {self.max_bytes:,} bytes")


def install_chariot_routes(app: FastAPI, data_plane: ChariotDataPlane, *, max_request_bytes: int) -> None:
    """Add the paths Chariot calls beside MLServer's V2 routes, and make every error body `{"error": ...}`."""
    endpoints = Endpoints(data_plane)
    # Chariot's URL ends in /infer/; MLServer would 307-redirect it to an absolute URL that is wrong behind
    # Chariot's gateway, so the slashed paths are served directly.
    app.router.redirect_slashes = False
    # FastAPI's add_api_route would override MLServer's route defaults; keep unset and None fields out.
    lean = {"response_model_exclude_unset": True, "response_model_exclude_none": True}
    for path in ("/v2/models/{model_name}/infer/", "/v2/models/{model_name}/versions/{model_version}/infer/"):
        app.add_api_route(path, endpoints.infer, methods=["POST"], **lean)

    protocol = chariot_v2.protocol_from_env()
    limits = engine_limits()

    async def infer(raw_request: Request, raw_response: Response) -> Response:
        """chariot-v2-kserve or chariot-v2, as CHARIOT_INFERENCE_PROTOCOL pins it or the request shows it."""
        body = await raw_request.body()
        content_type = raw_request.headers.get("content-type")
        form = None
        try:
            chosen, decoded = chariot_v2.choose(protocol, content_type, body)
            if chosen is chariot_v2.Protocol.KSERVE:
                return await _infer_kserve(raw_request, raw_response, body, decoded)
            form = chariot_v2.form_of(content_type, body, decoded)
            model = await find_model(data_plane, data_plane.model_name, None)
            task = import_model_class(model.settings.parameters.extra["model_class"]).task_type
            request = chariot_v2.parse(
                body, content_type, raw_request.headers.get(chariot_v2.PARAMETERS_HEADER), task, limits, decoded=decoded
            )
            request_id = header_request_id(raw_request.headers) or uuid.uuid4().hex
            note_request_id(request_id)
            results, _ = await predict_images(model, request.parsed, request_id, explain=False)
        except MLServerError as error:
            error = unwrap_worker_error(error)
            message = chariot_v2.reword(str(error), form) if form is not None else str(error)
            return _error(error.status_code, message)
        content, media_type = chariot_v2.render(results, form)
        return Response(content, media_type=media_type, headers={"x-request-id": request_id})

    async def _infer_kserve(raw_request: Request, raw_response: Response, body: bytes, decoded) -> Response:
        try:
            if decoded is not None:
                payload = InferenceRequest.model_validate(decoded)
            else:
                payload = InferenceRequest.model_validate_json(body)
        except ValidationError as exc:
            raise RequestValidationError(exc.errors()) from None
        answer = await endpoints.infer(raw_request, raw_response, payload, data_plane.model_name)
        response = Response(
            answer.model_dump_json(exclude_unset=True, exclude_none=True), media_type="application/json"
        )
        for key, value in raw_response.headers.items():
            if key not in ("content-length", "content-type"):
                response.headers[key] = value
        return response

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

    app.router.routes[:] = [
        r for r in app.router.routes if getattr(r, "path", None) not in ("/v2/health/live", "/v2/health/ready")
    ]
    app.add_api_route("/v2/health/live", health_live, methods=["GET"])
    app.add_api_route("/v2/health/ready", health_ready, methods=["GET"])
    app.add_api_route("/infer", infer, methods=["POST"])
    app.add_api_route("/ready", ready, methods=["GET"])

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

    app.add_middleware(BodyShape, max_elements=engine_limits().max_elements, max_depth=guards().max_json_depth)
    app.add_middleware(JSONBodies)
    app.add_middleware(BodyLimit, max_bytes=max_request_bytes)
    app.add_middleware(ShortErrors, max_chars=guards().max_error_chars)
    app.add_middleware(Framing)
    install_request_log(app, data_plane.model_name)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unhandled)


class ChariotServer(MLServer):
    """MLServer serving one Chariot model, with the Chariot data plane, routes and gRPC service."""

    def __init__(self, settings: Settings, *, model: ModelSettings, pinned: bool):
        self._chariot_model = (model, pinned)
        super().__init__(settings)

    async def start(self, models_settings: list[ModelSettings]) -> None:
        """Serve until stopped. MLServer only logs a model that fails to load and shuts down as if asked to; the
        engine raises ModelLoadFailed instead, so that the process exits non-zero."""
        failures: list[BaseException] = []
        load = self._model_registry.load

        async def load_or_record(settings: ModelSettings):
            try:
                return await load(settings)
            except Exception as exc:
                failures.append(exc)
                raise

        self._model_registry.load = load_or_record
        if self._inference_pool_registry is not None:
            self._data_plane.workers = WorkerWatch(
                self._inference_pool_registry, env_seconds("CHARIOT_PREDICT_TIMEOUT", 60.0)
            )
            self._data_plane.workers.install()
        await super().start(models_settings)
        if failures:
            raise ModelLoadFailed(str(unwrap_worker_error(failures[0]))) from failures[0]

    async def stop(self, sig: int | None = None) -> None:
        if self._data_plane.workers is not None:
            self._data_plane.workers.closing = True  # workers that exit now are leaving, not dying
        await super().stop(sig)

    def _create_servers(self) -> None:
        model, pinned = self._chariot_model
        self._data_plane = ChariotDataPlane(self._data_plane, model_name=model.name, pinned=pinned)
        self._model_repository = EngineRepository(model)
        self._model_repository_handlers = ChariotRepositoryHandlers(
            ModelRepositoryHandlers(self._model_repository, self._model_registry), self._data_plane
        )
        super()._create_servers()
        self._grpc_server = ChariotGRPCServer(
            self._settings, GRPCRequestLog(self._data_plane), self._model_repository_handlers
        )
        install_chariot_routes(
            self._rest_server._app, self._data_plane, max_request_bytes=self._settings.grpc_max_message_length
        )
        install_legacy_routes(self._rest_server._app, self._data_plane)
        close_api_pages(self._rest_server._app, self._metrics_server._app if self._metrics_server else None)


def close_api_pages(app: FastAPI, metrics_app: FastAPI | None) -> None:
    """Take out what an engine does not serve: MLServer's generate routes (it serves no language model), and,
    unless CHARIOT_API_DOCS turns them on, the API docs pages and OpenAPI schemas of both servers."""

    def served(path: str) -> bool:
        if path.endswith(("/generate", "/generate_stream")):
            return False
        return guards().api_docs or not (path == "/openapi.json" or "/docs" in path or path == "/redoc")

    for each in (app, metrics_app):
        if each is not None:
            each.router.routes[:] = [r for r in each.router.routes if served(getattr(r, "path", ""))]


async def _serve(model_class: type[ChariotModel], default_model_id: str) -> None:
    settings = engine_settings()
    model_id = model_id_from_env(default_model_id)
    model = model_settings(model_class, model_id)
    server = ChariotServer(settings, model=model, pinned=bool(os.environ.get("CHARIOT_MODEL_ID")))
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
