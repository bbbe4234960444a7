"""The engine's REST app, built on MLServer's: the inference front outermost, the request log, the framing check and
the bodies of the other routes, the routes Chariot calls beside MLServer's, and `{"error"}` bodies for every error."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from mlserver.errors import MLServerError
from mlserver.settings import Settings
from starlette.exceptions import HTTPException as StarletteHTTPException

from chariot_support.error_bodies import error_response, json_response
from chariot_support.errors import ChariotError, DoesNotStream, internal_error
from chariot_support.logs.request_lines import install_request_log
from chariot_support.memory.budgets import BodyBudget
from chariot_support.pipeline.data_plane import ChariotDataPlane
from chariot_support.protocols.v2_rest import validation_message
from chariot_support.rest.bodies import ControlBodies, Framing
from chariot_support.rest.inference import InferenceFront

logger = logging.getLogger("chariot_support")

NOT_READY = (
    "the model is not ready: it is still loading, or stuck in a predict that overran CHARIOT_PREDICT_TIMEOUT;"
    " retry later"
)


def install_rest_app(app: FastAPI, data_plane: ChariotDataPlane, settings: Settings, budget: BodyBudget) -> None:
    """Put the inference front (rest/inference.py) before MLServer's REST app, which keeps every other route; add the
    paths Chariot calls beside MLServer's, and make every error body `{"error": ...}`."""
    # Chariot's URLs end in a slash; MLServer would 307-redirect them to an absolute URL that is wrong behind
    # Chariot's gateway.
    app.router.redirect_slashes = False
    # Inference is the front's alone: MLServer's own inference routes go, so that no request can reach the model
    # another way.
    app.router.routes[:] = [r for r in app.router.routes if not _infers(r)]

    # Not ready is the engine's state, not the client's mistake: a 503 (with Retry-After), on every
    # readiness route.
    async def ready() -> Response:
        if await data_plane.ready():
            return json_response({"status": "ready"})
        return error_response(503, NOT_READY)

    # KServe's clients read the health answers' bodies; MLServer's are empty.
    async def health_live() -> Response:
        live = await data_plane.live()
        return json_response({"live": live}, 200 if live else 400)

    async def health_ready() -> Response:
        if await data_plane.ready():
            return json_response({"ready": True})
        return json_response({"ready": False, "error": NOT_READY}, 503)

    async def model_ready(model_name: str, model_version: str | None = None) -> Response:
        if await data_plane.model_ready(model_name, model_version):
            return Response(status_code=200)
        return error_response(503, NOT_READY)

    async def infer_stream(model_name: str, model_version: str | None = None) -> Response:
        # MLServer would answer 200 and then fail inside the stream; the engine says so before anything is sent.
        with data_plane.named(model_name, model_version) as resolved:
            await data_plane.model_registry.get_model(resolved, model_version)
        raise DoesNotStream()

    model_ready_paths = ("/v2/models/{model_name}/ready", "/v2/models/{model_name}/versions/{model_version}/ready")
    replaced = ("/v2/health/live", "/v2/health/ready", *model_ready_paths)
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
    for path in model_ready_paths:
        app.add_api_route(path, model_ready, methods=["GET"])
    app.add_api_route("/ready", ready, methods=["GET"])

    engine = data_plane.engine

    async def on_engine_error(request: Request, exc: ChariotError | MLServerError) -> Response:
        return error_response(exc.status_code, str(exc))

    async def on_validation_error(request: Request, exc: RequestValidationError) -> Response:
        return error_response(400, validation_message(exc.errors(), "a JSON object"))

    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            return error_response(404, f"no route for {request.method} {request.url.path}")
        if exc.status_code == 405:
            return error_response(405, f"{request.method} is not allowed on {request.url.path}")
        return error_response(exc.status_code, str(exc.detail))

    async def on_unhandled(request: Request, exc: Exception) -> Response:
        logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(500, internal_error(exc))

    app.add_middleware(ControlBodies, max_elements=engine.max_elements, max_depth=engine.max_json_depth)
    app.add_middleware(Framing)
    install_request_log(app)
    # Outermost of the engine's middlewares: the one REST transport for inference (rest/inference.py).
    app.add_middleware(
        InferenceFront,
        pipeline=data_plane.pipeline,
        settings=settings,
        engine=engine,
        budget=budget,
    )
    app.add_exception_handler(ChariotError, on_engine_error)
    app.add_exception_handler(MLServerError, on_engine_error)  # MLServer's own errors, written the engine's way
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unhandled)


def _infers(route) -> bool:
    """Whether `route` of MLServer's app answers inference (the front answers all of it)."""
    path, methods = getattr(route, "path", ""), getattr(route, "methods", None) or ()
    return "POST" in methods and (path.endswith(("/infer", "/infer/")) or path.startswith("/v1/models/"))
