"""MLServer set up as a Chariot engine: settings, model id, the routes Chariot calls and `{"error"}` bodies."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from typing import Any, Optional

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from mlserver import MLServer
from mlserver.errors import MLServerError
from mlserver.handlers import DataPlane
from mlserver.parallel.errors import WorkerError
from mlserver.rest.endpoints import Endpoints
from mlserver.settings import ModelParameters, ModelSettings, Settings
from mlserver.types import InferenceRequest, InferenceResponse, MetadataModelResponse, MetadataTensor
from mlserver.utils import install_uvloop_event_loop
from starlette.exceptions import HTTPException as StarletteHTTPException

from .base import ChariotModel
from .errors import ChariotError
from .logs import GRPCRequestLog, configure_logging, install_request_log

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


def engine_settings() -> Settings:
    overrides = {k: v for k, v in ENGINE_DEFAULTS.items() if f"MLSERVER_{k.upper()}" not in os.environ}
    return Settings(**overrides)


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


def _unwrap(error: MLServerError) -> MLServerError:
    """Parallel workers prefix an error's message with its class path; the client only needs the message."""
    if isinstance(error, WorkerError):
        message = str(error)
        prefix = f"{ChariotError.__module__}."
        if message.startswith(prefix) and ": " in message:
            return ChariotError(message.split(": ", 1)[1], error.status_code)
    return error


class ChariotDataPlane:
    """MLServer's data plane with Chariot's model naming and request ids, shared by REST and gRPC."""

    def __init__(self, inner: DataPlane, *, model_name: str, pinned: bool):
        self._inner = inner
        self.model_name = model_name
        self._pinned = pinned

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def resolve(self, name: str) -> str:
        """Chariot addresses the model as m-<id> with an id chosen at deploy time; any such name reaches the
        one model this engine serves, unless CHARIOT_MODEL_ID pinned it."""
        if not self._pinned and name.startswith("m-") and MODEL_ID_PATTERN.fullmatch(name[2:]):
            return self.model_name
        return name

    async def infer(self, payload: InferenceRequest, name: str, version: Optional[str] = None) -> InferenceResponse:
        if payload.id is None and payload.parameters is not None and payload.parameters.headers:
            payload.id = payload.parameters.headers.get("x-request-id")
        try:
            response = await self._inner.infer(payload, self.resolve(name), version)
        except MLServerError as error:
            raise _unwrap(error) from None
        response.model_name = name
        return response

    async def ready(self) -> bool:
        # MLServer calls a server with no models ready; an engine is ready only once its model is loaded.
        try:
            return await self._inner.model_ready(self.model_name)
        except MLServerError:
            return False

    async def model_ready(self, name: str, version: Optional[str] = None) -> bool:
        return await self._inner.model_ready(self.resolve(name), version)

    async def model_metadata(self, name: str, version: Optional[str] = None) -> MetadataModelResponse:
        metadata = await self._inner.model_metadata(self.resolve(name), version)
        return metadata.model_copy(update={"name": name})


class _JSONResultsDataPlane:
    """The gRPC view of the data plane: a BYTES element holds the JSON-encoded result list, as gRPC can
    carry only bytes where REST carries JSON values."""

    def __init__(self, data_plane: ChariotDataPlane):
        self._data_plane = data_plane

    def __getattr__(self, name: str) -> Any:
        return getattr(self._data_plane, name)

    async def infer(self, payload: InferenceRequest, name: str, version: Optional[str] = None) -> InferenceResponse:
        response = await self._data_plane.infer(payload, name, version)
        for output in response.outputs:
            output.data.root = [json.dumps(results).encode() for results in output.data.root]
        return response


def _error(status_code: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status_code, content={"error": message})


def _validation_message(exc: RequestValidationError) -> str:
    first = exc.errors()[0]
    loc = [p for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        return f"the request body is not valid JSON: {first.get('ctx', {}).get('error', first['msg'])}"
    if not loc:
        return f"the request body must be a JSON object with an 'inputs' list ({first['msg']})"
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return f"{path}: {first['msg']}"


class JSONBodies:
    """Read every POST body as JSON whatever its Content-Type: `curl -d` labels it form data, and the engine's
    POST routes take nothing but JSON."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, receive, send)


def install_chariot_routes(app: FastAPI, data_plane: ChariotDataPlane) -> None:
    """Add the paths Chariot calls beside MLServer's V2 routes, and make every error body `{"error": ...}`."""
    endpoints = Endpoints(data_plane)
    # Chariot's URL ends in /infer/; MLServer would 307-redirect it to an absolute URL that is wrong behind
    # Chariot's gateway, so the slashed paths are served directly.
    app.router.redirect_slashes = False
    # FastAPI's add_api_route would override MLServer's route defaults; keep unset and None fields out.
    lean = {"response_model_exclude_unset": True, "response_model_exclude_none": True}
    for path in ("/v2/models/{model_name}/infer/", "/v2/models/{model_name}/versions/{model_version}/infer/"):
        app.add_api_route(path, endpoints.infer, methods=["POST"], **lean)

    async def infer(raw_request: Request, raw_response: Response, payload: InferenceRequest) -> InferenceResponse:
        return await endpoints.infer(raw_request, raw_response, payload, data_plane.model_name)

    async def ready() -> JSONResponse:
        if await data_plane.ready():
            return JSONResponse({"status": "ready"})
        return _error(503, "the model is still loading")

    app.add_api_route("/infer", infer, methods=["POST"], **lean)
    app.add_api_route("/ready", ready, methods=["GET"])

    async def on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(400, _validation_message(exc))

    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return _error(404, f"no route for {request.method} {request.url.path}")
        if exc.status_code == 405:
            return _error(405, f"{request.method} is not allowed on {request.url.path}")
        return _error(exc.status_code, str(exc.detail))

    async def on_unhandled(request: Request, exc: Exception) -> JSONResponse:
        logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    app.add_middleware(JSONBodies)
    install_request_log(app, data_plane.model_name)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unhandled)


class ChariotServer(MLServer):
    """MLServer with the Chariot data plane and routes."""

    def __init__(self, settings: Settings, *, model_name: str, pinned: bool):
        self._chariot_model = (model_name, pinned)
        super().__init__(settings)

    def _create_servers(self) -> None:
        model_name, pinned = self._chariot_model
        self._data_plane = ChariotDataPlane(self._data_plane, model_name=model_name, pinned=pinned)
        super()._create_servers()
        self._grpc_server._data_plane = GRPCRequestLog(_JSONResultsDataPlane(self._data_plane))
        install_chariot_routes(self._rest_server._app, self._data_plane)


async def _serve(model_class: type[ChariotModel], default_model_id: str) -> None:
    settings = engine_settings()
    model_id = model_id_from_env(default_model_id)
    model = model_settings(model_class, model_id)
    server = ChariotServer(settings, model_name=model.name, pinned=bool(os.environ.get("CHARIOT_MODEL_ID")))
    configure_logging()  # after MLServer's constructor has set up its logger, so that one is formatted too
    logger.info("serving %s as %s on REST :%s and gRPC :%s", model_class.task_type.value, model.name,
                settings.http_port, settings.grpc_port)
    await server.start([model])


def serve(model_class: type[ChariotModel], *, default_model_id: str) -> None:
    """Start the engine and serve until SIGTERM/SIGINT."""
    install_uvloop_event_loop()
    asyncio.run(_serve(model_class, default_model_id))
