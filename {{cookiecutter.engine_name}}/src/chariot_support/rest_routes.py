"""The REST routes Chariot calls beside MLServer's V2 routes, and `{"error"}` bodies for every error."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from mlserver.rest.endpoints import Endpoints
from mlserver.types import (
    InferenceRequest,
)
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from . import chariot_v2
from .data_plane import ChariotDataPlane
from .decoding import request_from_json
from .errors import ChariotError
from .front import InferenceFront, read_json
from .internals import (
    SERVING_ERRORS,
    find_model,
    predict_images,
    unwrap_worker_error,
)
from .logs import header_request_id, install_request_log, note_request_id
from .runtime import engine_limits, import_model_class
from .settings import config
from .traffic import BodyLimit, BodyShape, Framing, JSONBodies, ShortErrors

logger = logging.getLogger("chariot_support")


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
