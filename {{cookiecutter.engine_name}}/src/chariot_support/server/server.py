"""MLServer set up as a Chariot engine: its settings, the model it serves, the server that assembles the pipeline,
the REST and gRPC transports and the parallel workers' supervisor (`ChariotServer`), start-up and shutdown."""

from __future__ import annotations

import asyncio
import logging
import logging.config
import os
import time
from typing import Any

from fastapi import FastAPI
from mlserver.settings import ModelParameters, ModelSettings, Settings
from mlserver.types import (
    MetadataTensor,
)

from chariot_support import model_id as model_id_rule
from chariot_support.after_answer import FlushedBeforeScrape, afterwards
from chariot_support.errors import BadSettings, ModelLoadFailed
from chariot_support.grpc.limits import CallLimits
from chariot_support.grpc.service import ChariotInferenceServicer
from chariot_support.logs.model_output import capture_output
from chariot_support.logs.native_output import capture_native_output, finish_native_output
from chariot_support.logs.request_lines import HANDLER_NAME, logging_config
from chariot_support.memory.budgets import BodyBudget
from chariot_support.model.base import ChariotModel, has_explain
from chariot_support.pipeline.data_plane import ChariotDataPlane, ChariotRepositoryHandlers, EngineRepository
from chariot_support.rest.app import install_rest_app
from chariot_support.rest.extensions import install_extension_routes
from chariot_support.rest.legacy_routes import install_legacy_routes
from chariot_support.rest.page import install_page
from chariot_support.runtime.plan import ServingPlan
from chariot_support.runtime.runtime import import_model_class
from chariot_support.runtime.threads import threads_still_stuck
from chariot_support.seams.mlserver import (
    DataPlane,
    EngineServer,
    ModelRepositoryHandlers,
    install_uvloop_event_loop,
    set_uvicorn_options,
    start_workers_with,
)
from chariot_support.seams.uvicorn import IdleLimitedProtocol
from chariot_support.server.devices import WorkerDevices, visible_gpus
from chariot_support.server.workers import WORKER_GRACE, WorkerWatch
from chariot_support.settings import EngineSettings, config
from chariot_support.stages.histograms import WithStageHistograms
from chariot_support.triton.config import model_config

logger = logging.getLogger("chariot_support")

PROTOCOL = "chariot-v2-kserve"
GRPC_WAITING_CALLS = 20_000
# The bytes a gRPC client may send on a call before the engine reads it: a camera image's message, base64 included.
GRPC_STREAM_WINDOW = 256 << 10

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


def engine_settings(engine: EngineSettings) -> Settings:
    """MLServer's settings with the engine's defaults. CHARIOT_MAX_REQUEST_MB limits a request's size: the REST body,
    and gRPC's messages unless MLSERVER_GRPC_MAX_MESSAGE_LENGTH sets those apart. MLServer's response cache is
    refused: every request is answered by the model (a cache would answer a repeated photo from memory, skipping
    the engine's checks and metrics)."""
    defaults = {
        **ENGINE_DEFAULTS,
        "grpc_max_message_length": engine.max_request_mb << 20,
    }
    overrides = {k: v for k, v in defaults.items() if f"MLSERVER_{k.upper()}" not in os.environ}
    settings = Settings(**overrides)
    if engine_logs():
        # MLServer applies it here, in each parallel worker, and to uvicorn's loggers: JSON lines from every process.
        settings.logging_settings = logging_config(engine.log_level, mlserver_debug=settings.debug)
    if settings.cache_enabled:
        raise ValueError(
            "MLSERVER_CACHE_ENABLED is not supported by this engine: each request is answered by the model; unset it"
            " (a cache in front of the engine can answer repeated requests)"
        )
    # uvicorn's options (MLServer passes these through): idle keep-alive seconds, and the engine's protocol, which
    # bounds connections and requests in flight itself (CHARIOT_MAX_CONNECTIONS). uvicorn's `limit_concurrency` stays
    # off: it also answers 503 while the connections reach it, which refused health checks among slow clients.
    # X-Forwarded-* headers are left alone: nothing in an engine reads the client's address, and reading them cost
    # every request.
    set_uvicorn_options(
        settings,
        timeout_keep_alive=engine.keep_alive,
        http=IdleLimitedProtocol.bound(engine),
        # An engine serves no WebSockets; left on when a model's dependencies install a WebSocket library, an upgrade
        # would take connections out of the bounded protocol's hands.
        ws="none",
        proxy_headers=False,
    )
    return settings


def engine_logs() -> bool:
    """Whether the engine sets logging up (its JSON lines), rather than MLSERVER_LOGGING_SETTINGS."""
    return "MLSERVER_LOGGING_SETTINGS" not in os.environ


def model_id_from_env(default_model_id: str, engine: EngineSettings) -> str:
    model_id = engine.model_id.lower() or default_model_id
    wrong = model_id_rule.problem(model_id)
    if wrong:
        raise ValueError(wrong)
    if engine.model_alias and not model_id_rule.PATTERN.fullmatch(engine.model_alias):
        raise ValueError(
            f"CHARIOT_MODEL_ALIAS {engine.model_alias[:80]!r} is not a name the engine can answer to: use a Kubernetes"
            " name (lowercase letters, digits and dashes, at most 63), such as the InferenceService's"
        )
    return model_id


def model_settings(model_class: type[ChariotModel], model_id: str, engine: EngineSettings) -> ModelSettings:
    if model_class.__module__ == "__main__":
        raise TypeError(
            f"define {model_class.__name__} in an importable module (such as model.py), not in __main__:"
            " parallel workers import it by name"
        )
    image = MetadataTensor(name="image", datatype="BYTES", shape=[1], parameters={"content_type": "base64"})
    result = MetadataTensor(name="image", datatype="BYTES", shape=[1], parameters={"content_type": "json"})
    version = engine.model_version
    return ModelSettings(
        name=f"m-{model_id}",
        implementation="chariot_support.runtime.runtime.ChariotRuntime",
        platform=f"{PROTOCOL}_{model_class.task_type.name.lower()}",
        versions=[version],
        inputs=[image],
        outputs=[result],
        parameters=ModelParameters(
            version=version,
            # The runtime is handed the engine's settings with the model, in this process or a parallel worker.
            extra={
                "model_class": f"{model_class.__module__}:{model_class.__qualname__}",
                "task_type": model_class.task_type.value,  # the pipeline checks requests by it, without the model
                "explains": has_explain(model_class),
                "copies": ServingPlan.of(model_class, engine).copies,  # in each process, for the model configuration
                "engine_settings": engine.to_json(),
            },
        ),
    )


class ChariotServer(EngineServer):
    """MLServer serving one Chariot model, with the Chariot data plane, routes and gRPC service."""

    grpc_servicer = ChariotInferenceServicer

    def __init__(self, settings: Settings, *, model: ModelSettings, engine: EngineSettings):
        self.model = model
        self.engine = engine
        # Bytes of every request body in flight, REST and gRPC alike.
        self.body_budget = BodyBudget(engine.body_budget_mb << 20, engine.admission_wait)
        self.grpc_grace = engine.grpc_grace
        self.predict_timeout = engine.predict_timeout
        # Each parallel worker starts (in MLServer's __init__, and as a replacement) with its share of the GPUs.
        self.devices = WorkerDevices.detect(settings.parallel_workers)
        start_workers_with(self.devices.start if settings.parallel_workers else None)
        super().__init__(settings)

    def grpc_limits(self, settings: Settings) -> tuple[CallLimits, list[tuple[str, Any]]]:
        # gRPC core cancels calls that arrive faster than the event loop takes them once 3,000 wait (5,000 calls at
        # once: 2,100 CANCELLED, unlogged). Waiting calls cost only their headers; taken, those past
        # CHARIOT_GRPC_MAX_CALLS are refused before their message is read, with a status that says why.
        # A per-connection stream limit is not set: gRPC clients open their streams before they learn it, and
        # the streams past it are reset (UNAVAILABLE, "Stream removed"). Bandwidth probing is off: it widens each
        # stream's window, so gRPC took in the messages of calls still waiting their turn (forty 60 MiB calls
        # peaked at 2.0-3.0 GB with it, 1.3-1.5 GB without); a message being read still gets the window it needs.
        # Each stream's window is GRPC_STREAM_WINDOW from the start instead: with HTTP/2's 64 KiB, a client stopped
        # part way through every 640x480 image's message until the engine read the call and opened the window (a
        # round trip through the event loop: 3 sendmsg and 4.8 recvmsg a call, against 1.1 and 2.3 with it).
        waiting = ("grpc.server.max_pending_requests", "grpc.server.max_pending_requests_hard_limit")
        return CallLimits(self.engine, self.body_budget), [
            *((option, GRPC_WAITING_CALLS) for option in waiting),
            ("grpc.http2.bdp_probe", 0),
            ("grpc.http2.lookahead_bytes", GRPC_STREAM_WINDOW),
        ]

    def engine_parts(self, data_plane: DataPlane, model_registry: Any):
        model = self.model
        chariot_plane = ChariotDataPlane(data_plane, model_registry, model_name=model.name, engine=self.engine)
        repository = EngineRepository(model)
        handlers = ChariotRepositoryHandlers(ModelRepositoryHandlers(repository, model_registry), chariot_plane)
        self._chariot_plane, self._chariot_handlers = chariot_plane, handlers
        workers = self.settings.parallel_workers
        chariot_plane.model_config = model_config(
            model,
            self.engine,
            copies=model.parameters.extra["copies"],
            workers=workers,
            gpus=self.devices.shares if workers else [visible_gpus(os.environ)],
        )
        return chariot_plane, repository, handlers

    def grpc_handlers(self) -> list[Any]:
        # Triton's model configuration and statistics calls, answered by the engine's servicer.
        return [ChariotInferenceServicer(self._chariot_plane, self._chariot_handlers).extension_handler()]

    async def drain(self, sig: int | None) -> None:
        """On SIGTERM: refuse new requests (503, the engine is stopping), stop taking connections and calls, and
        answer every request in flight, waiting for them at most CHARIOT_PREDICT_TIMEOUT (and a parallel worker's
        grace); the workers stop after."""
        pipeline = self._chariot_plane.pipeline
        pipeline.stopping = True
        started = time.monotonic()
        await self._rest_server.stop(sig)
        grpc_stopped = asyncio.create_task(self._grpc_server.stop(sig))  # its calls in flight get CHARIOT_GRPC_GRACE
        left = await pipeline.drain(self.predict_timeout + WORKER_GRACE)
        await grpc_stopped
        if left:
            logger.error("stopping with %d requests still unanswered after %.1f s", left, time.monotonic() - started)
        else:
            logger.info("every request in flight was answered (%.1f s); stopping", time.monotonic() - started)

    def watch_workers(self, pool_registry) -> WorkerWatch:
        watch = WorkerWatch(pool_registry, self.predict_timeout)
        watch.install()
        return watch

    def install_routes(self, rest_app: FastAPI, metrics_app: FastAPI | None) -> None:
        data_plane = self._chariot_plane
        install_rest_app(rest_app, data_plane, self.settings, self.body_budget)
        install_extension_routes(rest_app, data_plane)
        install_legacy_routes(rest_app, data_plane.pipeline)
        if self.engine.page:
            install_page(rest_app)
        close_api_pages(rest_app, metrics_app, api_docs=self.engine.api_docs)
        if metrics_app is not None:
            histograms, path = data_plane.pipeline.histograms, self.settings.metrics_endpoint
            metrics_app.add_middleware(WithStageHistograms, histograms=histograms, path=path)
            # Requests' metrics are counted after their answers: all of them before a scrape (outermost).
            metrics_app.add_middleware(FlushedBeforeScrape)


def close_api_pages(app: FastAPI, metrics_app: FastAPI | None, *, api_docs: bool) -> None:
    """Take out what an engine does not serve: MLServer's generate routes (it serves no language model), and,
    unless CHARIOT_API_DOCS turns them on, the API docs pages and OpenAPI schemas of both servers."""

    def served(path: str) -> bool:
        if path.endswith(("/generate", "/generate_stream")):
            return False
        return api_docs or not (path == "/openapi.json" or "/docs" in path or path == "/redoc")

    for each in (app, metrics_app):
        if each is not None:
            each.router.routes[:] = [r for r in each.router.routes if served(getattr(r, "path", ""))]


def log_settings(
    settings: Settings, engine: EngineSettings, plan: ServingPlan, devices: WorkerDevices | None = None
) -> None:
    """One line saying how the engine serves, as its settings and the model's class work out: processes, threads,
    copies, batching, limits and each parallel worker's GPUs, in words and, for log tools, as the `settings` field."""
    batching = plan.batching
    fields = {
        "workers": settings.parallel_workers,
        "worker_gpus": devices.by_worker() if devices is not None and devices.shares else None,
        "warmup": engine.warmup,
        "threads": plan.threads,
        "copies": plan.copies,
        "thread_safe": plan.thread_safe,
        "predict_inline": plan.inline,
        "max_batch_size": batching.max_size if batching else 1,
        "max_batch_wait_ms": batching.max_wait * 1000 if batching else None,
        "predict_timeout_s": None if plan.inline else engine.predict_timeout,  # an inline predict cannot be stopped
        "max_request_mb": engine.max_request_mb,
        "max_inputs": engine.max_inputs,
        "max_image_pixels": engine.max_image_pixels,
        "max_request_pixels": engine.max_request_pixels,
        "max_connections": engine.max_connections,
        "body_budget_mb": engine.body_budget_mb,
        "decode_budget_mb": engine.decode_budget_mb,
    }
    message = settings_message(settings.parallel_workers, engine, plan, devices.description if devices else "")
    logger.info("%s", message, extra={"fields": {"settings": fields}})


def settings_message(workers: int, engine: EngineSettings, plan: ServingPlan, devices: str = "") -> str:
    """The settings line in words: "settings: one process with 4 threads and one thread-safe model; ..."."""
    batching = plan.batching
    processes = f"{workers} worker process{'' if workers == 1 else 'es'}, each" if workers else "one process"
    if plan.inline:  # decode and predict on the event loop: the threads are not used, and no timeout can stop it
        runs = "predicting inline on the event loop with"
        timeout = "no predict timeout (an inline predict cannot be stopped)"
    else:
        runs = f"with {plan.threads} thread{'' if plan.threads == 1 else 's'} and"
        timeout = f"predict timeout {engine.predict_timeout:g} s"
    model = "one thread-safe model" if plan.thread_safe else f"{plan.copies} cop{'y' if plan.copies == 1 else 'ies'}"
    gathered = (
        f"batches of up to {batching.max_size} images within {batching.max_wait * 1000:g} ms"
        if batching
        else "no batching"
    )
    return (
        f"settings: {processes} {runs} {model}; {gathered}; {timeout}; requests up to {engine.max_request_mb} MiB"
        f" and {engine.max_inputs} inputs, images up to {engine.max_image_pixels:,} pixels;"
        f" {engine.max_connections} connections at most"
        + ("" if engine.warmup else "; no warm-up (CHARIOT_WARMUP=0)")
        + (f"; {devices}" if devices else "")
    )


def build_server(model_class: type[ChariotModel], model_id: str, engine: EngineSettings) -> ChariotServer:
    """The engine's server for `model_class`, answering as m-<model_id>, with `engine`'s settings (build it on the
    event loop it will serve on: MLServer sets signal handlers there)."""
    return ChariotServer(engine_settings(engine), model=model_settings(model_class, model_id, engine), engine=engine)


async def _serve(model: type[ChariotModel] | str, default_model_id: str) -> None:
    try:
        engine = config()  # read from the environment here, once, and handed to every part from here on
    except ValueError as problem:
        raise BadSettings(str(problem)) from None
    if engine_logs():  # before the model's libraries are imported, and MLServer starts the workers that inherit it
        capture_native_output(engine.log_level)
    model_class = import_model_class(model) if isinstance(model, str) else model
    try:
        server = build_server(model_class, model_id_from_env(default_model_id, engine), engine)
    except ValueError as problem:
        raise BadSettings(str(problem)) from None
    settings, model = server.settings, server.model
    logger.info(
        "serving %s as %s on REST :%s and gRPC :%s",
        model_class.task_type.value,
        model.name,
        settings.http_port,
        settings.grpc_port,
    )
    log_settings(settings, engine, ServingPlan.of(model_class, engine), server.devices)
    capture_output(HANDLER_NAME)  # this process's print and stderr lines as JSON lines too
    await server.start([model])


def serve(model: type[ChariotModel] | str, *, default_model_id: str) -> None:
    """Start the engine and serve `model`, a ChariotModel class or its "module:Class" path, until SIGTERM/SIGINT; exit
    with status 1 when the model does not load. A path is imported once the engine's log takes in what native code
    writes, so that what the model's libraries write as they are imported comes out as JSON lines too."""
    install_uvloop_event_loop()
    try:
        asyncio.run(_serve(model, default_model_id))
    except ModelLoadFailed as failure:
        logger.critical("the engine stops: %s", failure)
        raise SystemExit(1) from None
    except BadSettings as problem:
        logging.config.dictConfig(logging_config("INFO"))  # one JSON line, as every other line the engine writes
        logger.critical("the engine cannot start: %s", problem)
        raise SystemExit(2) from None
    # Stopped cleanly. A predict that overran CHARIOT_PREDICT_TIMEOUT may still run in a written-off thread, inside
    # native code (ONNX Runtime, torch): the interpreter's own exit would tear down the libraries under it, and C++
    # ends such a process with abort (exit 134). Everything is answered by now: flushed, leave at once, with 0.
    if threads_still_stuck():
        logger.warning("%d predicts that overran CHARIOT_PREDICT_TIMEOUT are left running", threads_still_stuck())
        afterwards.flush()
        logging.shutdown()
        finish_native_output()
        os._exit(0)
