"""Every place the engine relies on MLServer's private parts, which a new MLServer release may change without notice.

Nothing else in the support package reaches past MLServer's public API. `tests/support/test_internals.py` holds
canaries that use each assumption made here on MLServer's real objects (its CANARIES table names them for each
private name): on an MLServer where one no longer holds, the canary says which in plain words."""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from itertools import cycle
from typing import Any, Protocol

from grpc import aio as grpc_aio
from mlserver import MLServer
from mlserver.context import model_context, model_name_var
from mlserver.grpc import server as mlserver_grpc_server

# MLServer's parts the engine builds on that its documentation does not describe (it documents its types, settings,
# codecs, errors and generated gRPC messages): the rest of the support package imports them from here, and each has
# its canary, as every other use in this module.
from mlserver.grpc.converters import ModelInferRequestConverter as ModelInferRequestConverter
from mlserver.grpc.converters import ModelInferResponseConverter as ModelInferResponseConverter
from mlserver.grpc.converters import ModelMetadataResponseConverter as ModelMetadataResponseConverter
from mlserver.grpc.converters import RepositoryIndexRequestConverter as RepositoryIndexRequestConverter
from mlserver.grpc.converters import ServerMetadataResponseConverter as ServerMetadataResponseConverter
from mlserver.grpc.interceptors import PromServerInterceptor
from mlserver.grpc.server import GRPCServer
from mlserver.grpc.servicers import InferenceServicer
from mlserver.grpc.utils import to_headers as to_headers
from mlserver.grpc.utils import to_metadata as to_metadata
from mlserver.handlers import DataPlane as DataPlane
from mlserver.handlers import ModelRepositoryHandlers as ModelRepositoryHandlers
from mlserver.parallel import pool as mlserver_pool
from mlserver.parallel.errors import WorkerError, WorkerStop
from mlserver.parallel.messages import ModelRequestMessage
from mlserver.parallel.model import ParallelModel
from mlserver.repository import ModelRepository as ModelRepository
from mlserver.settings import ModelSettings, Settings
from mlserver.types import InferenceResponse
from mlserver.utils import extract_headers
from mlserver.utils import install_uvloop_event_loop as install_uvloop_event_loop

from chariot_support.after_answer import afterwards
from chariot_support.errors import ChariotError, ModelLoadFailed, WorkersDown, signal_name
from chariot_support.seams.metrics import GRPCMetrics, StreamingCallsOnly

logger = logging.getLogger("chariot_support")


def unwrap_worker_error(error: BaseException) -> BaseException:
    """A parallel worker's error as the client should see it: the engine's own error rebuilt from the class path
    and message MLServer sends back in its place, and a worker that died as a 503 to retry rather than a 500."""
    if isinstance(error, WorkerStop):
        code = int(str(error).rstrip(".").rsplit(" ", 1)[-1]) if str(error).rstrip(".")[-1:].isdigit() else 0
        return WorkersDown(
            f"the parallel worker serving this request stopped ({signal_name(code)}); a new worker is starting: retry"
        )
    if isinstance(error, WorkerError):
        path, _, message = str(error).partition(": ")
        module, _, name = path.rpartition(".")
        if module.startswith("chariot_support"):
            try:
                kind = getattr(importlib.import_module(module), name)
            except (ImportError, AttributeError):
                kind = None
            if isinstance(kind, type) and issubclass(kind, ChariotError):
                return kind(message)
    return error


def current_model_name() -> str:
    """The model MLServer is serving in this context (its log lines name it), or ''."""
    return model_name_var.get("")


def set_uvicorn_options(settings: Settings, **options: Any) -> None:
    """Options MLServer passes through to uvicorn, which its settings do not otherwise expose."""
    settings._custom_rest_server_settings = options


class EngineServer(MLServer):
    """MLServer with the parts an engine replaces. A subclass gives `engine_parts` (the data plane, repository and
    repository handlers, built on MLServer's), `install_routes` (on the REST and metrics apps), `grpc_servicer`
    (the inference servicer class), `grpc_limits` and `grpc_grace`, and sets `predict_timeout` before starting."""

    grpc_servicer: type = InferenceServicer
    grpc_grace: float = 5.0

    def grpc_limits(self, settings: Settings) -> tuple[Any, list[tuple[str, Any]]]:
        """The interceptor put in front of every gRPC call (None: none), and options added to the gRPC server's."""
        return None, []

    def grpc_handlers(self) -> list[Any]:  # grpc.GenericRpcHandlers of calls MLServer's services do not have
        return []  # gRPC asks them for a method no registered handler serves

    predict_timeout: float = 60.0
    stopping = False  # set by the first stop
    _stopped: asyncio.Event | None = None  # set once that stop is done

    def engine_parts(self, data_plane: DataPlane, model_registry) -> tuple[Any, Any, Any]:
        raise NotImplementedError

    def install_routes(self, rest_app, metrics_app) -> None:
        raise NotImplementedError

    def watch_workers(self, pool_registry) -> Any:
        """Start supervising the parallel workers of `pool_registry`; returns the supervisor."""
        raise NotImplementedError

    @property
    def settings(self) -> Settings:
        return self._settings

    def _create_servers(self) -> None:
        self._data_plane, self._model_repository, self._model_repository_handlers = self.engine_parts(
            self._data_plane, self._model_registry
        )
        super()._create_servers()
        self._grpc_server = _EngineGRPCServer(self, self._data_plane, self._model_repository_handlers)
        self.install_routes(self._rest_server._app, self._metrics_server._app if self._metrics_server else None)

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
            self._data_plane.workers = self.watch_workers(self._inference_pool_registry)
        await super().start(models_settings)
        if self._stopped is not None:
            # The servers have stopped (uvicorn's stop on the signal itself); the workers may still be stopping.
            await self._stopped.wait()
        if failures:
            raise ModelLoadFailed(str(unwrap_worker_error(failures[0]))) from failures[0]

    async def stop(self, sig: int | None = None) -> None:
        # Once is enough. uvicorn (0.29 and later) catches the signals itself while its servers run, and raises each
        # again when they have shut down, which MLServer's handler answers with another stop: three in all.
        if self.stopping:
            return
        self.stopping = True
        self._stopped = asyncio.Event()
        # MLServer's own stop closes the parallel workers first, failing every request still in them. The engine
        # drains instead: it stops taking connections and calls, answers those it took, and stops the workers last.
        try:
            await self.drain(sig)
            if getattr(self._data_plane, "workers", None) is not None:
                self._data_plane.workers.closing = True  # workers that exit now are leaving, not dying
            if self._inference_pool_registry is not None:
                await self._inference_pool_registry.close()
            if self._metrics_server is not None:
                await self._metrics_server.stop(sig)
        finally:
            self._stopped.set()  # start() waits for it: whatever went wrong, the process must not wait for ever

    async def drain(self, sig: int | None) -> None:
        """Stop taking requests and answer those in flight (a subclass says how long it waits for them)."""
        await self._rest_server.stop(sig)
        await self._grpc_server.stop(sig)


class _EngineGRPCServer(GRPCServer):
    """MLServer's gRPC server (its interceptors for access logs, metrics and tracing included) with the engine's
    servicer, its limits (an outermost interceptor, and server options), and the engine's grace for calls in flight
    at SIGTERM in place of MLServer's fixed 5 s."""

    def __init__(self, engine: EngineServer, data_plane, model_repository_handlers):
        super().__init__(engine.settings, data_plane, model_repository_handlers)
        self._engine = engine
        self.limits: Any = None  # the interceptor in front of every call, once the server is built

    def _create_server(self):
        # MLServer builds its servicer and its aio server by these module-level names; for the duration of the call
        # they name the engine's servicer, and aio.server with the engine's interceptor and options added.
        original_servicer, original_aio = mlserver_grpc_server.InferenceServicer, mlserver_grpc_server.aio
        mlserver_grpc_server.InferenceServicer = self._engine.grpc_servicer
        mlserver_grpc_server.aio = _AioWithLimits(self)
        try:
            return super()._create_server()
        finally:
            mlserver_grpc_server.InferenceServicer, mlserver_grpc_server.aio = original_servicer, original_aio

    async def stop(self, sig: int | None = None) -> None:
        logger.info("waiting up to %g s for gRPC calls in flight", self._engine.grpc_grace)
        await self._server.stop(grace=self._engine.grpc_grace)


class _AioWithLimits:
    """grpc.aio as MLServer's gRPC server module sees it while the engine builds its server."""

    def __init__(self, server: _EngineGRPCServer):
        self._server = server

    def __getattr__(self, name: str) -> Any:
        return getattr(grpc_aio, name)

    def server(self, *args: Any, interceptors: Any = (), options: Any = (), **kwargs: Any):
        limits, extra = self._server._engine.grpc_limits(self._server._settings)
        self._server.limits = limits
        chosen = dict(options)  # MLServer's (message size, and any MLSERVER custom options) win over the engine's
        options = [*((key, value) for key, value in extra if key not in chosen), *chosen.items()]
        interceptors = list(interceptors)
        for index, interceptor in enumerate(interceptors if limits is not None else ()):
            if isinstance(interceptor, PromServerInterceptor):  # there when MLServer keeps metrics
                # The engine's interceptor counts unary calls in its counters itself; it keeps streaming calls.
                kept = interceptor._interceptor
                started, handled = kept._metrics["grpc_server_started_counter"], kept._grpc_server_handled_total_counter
                limits.count_calls_in(GRPCMetrics(started, handled, kept._metrics["grpc_server_handled_histogram"]))
                interceptors[index] = StreamingCallsOnly(interceptor)
        interceptors = [limits, *interceptors] if limits is not None else interceptors
        server = grpc_aio.server(*args, interceptors=interceptors, options=options, **kwargs)
        server.add_generic_rpc_handlers(tuple(self._server._engine.grpc_handlers()))  # calls MLServer's service lacks
        return server


@functools.cache
def _inference_metrics(data_plane: DataPlane, name: str, version: str | None) -> tuple[Any, Any, Any]:
    """MLServer's data-plane metrics for one served name, looked up once (the engine serves one model)."""
    labels = {"model": name, "version": version}
    return (
        data_plane._ModelInferRequestDuration.labels(**labels),
        data_plane._ModelInferRequestFailure.labels(**labels),
        data_plane._ModelInferRequestSuccess.labels(**labels),
    )


@asynccontextmanager
async def served_inference(data_plane: DataPlane, model, version: str | None):
    """What MLServer's data plane does around an inference (its private `_infer_contextmanager`), for the engine's
    one inference path: its request metrics (count, failures, duration) under the model's name and `version` (MLServer
    gives the version the request named), and the model's context (which names the model in log lines). Yields the
    model."""
    duration, failures, successes = _inference_metrics(data_plane, model.name, version)
    outcome = None  # the counter it adds to: successes, or failures for an Exception (none when it is cancelled)
    started = time.perf_counter()
    try:
        with model_context(model.settings):
            yield model
        outcome = successes
    except Exception:
        outcome = failures
        raise
    finally:
        # Counted after the answer, by the thread that does requests' work then (after_answer.py).
        afterwards.later(_count_inference, duration, time.perf_counter() - started, outcome)


def _count_inference(duration, seconds: float, outcome) -> None:
    duration.observe(max(seconds, 0))
    if outcome is not None:
        outcome.inc()


async def call_runtime(model, method: str, *args):
    """A method of the served ChariotRuntime, in this process or in the parallel worker it lives in."""
    if isinstance(model, ParallelModel):
        return await model._send(method, *args)
    return await getattr(model, method)(*args)


# The parallel workers (MLSERVER_PARALLEL_WORKERS). MLServer gives no public handle on its inference pools, their
# worker processes or the dispatcher that sends each request to one; the engine's supervisor (server/workers.py) reaches
# them through these functions only.


def worker_pools(pool_registry) -> list:
    """The inference pools of MLServer's InferencePoolRegistry, the default pool (the one serving the engine's model)
    first."""
    return [pool_registry._default_pool, *pool_registry._pools.values()]


def workers_of(pool) -> dict[int, Any]:
    """A pool's worker processes (multiprocessing.Process) by pid: the live mapping MLServer keeps, so copy it to
    iterate while workers are replaced."""
    return pool._workers


async def replace_worker(pool, pid: int, exit_code: int) -> None:
    """What MLServer does for a worker that stopped: its requests in flight fail with WorkerStop, and a new worker
    starts and loads the pool's models. Returns once the new worker is ready."""
    await pool.on_worker_stop(pid, exit_code)


_start_worker: Callable[[Callable[[], Any]], Any] | None = None  # how each worker starts (server/devices.py)


def start_workers_with(start: Callable[[Callable[[], Any]], Any] | None) -> None:
    """Have MLServer start each parallel worker process (at start-up, and each replacement) as `start(spawn)`, where
    `spawn()` starts it and returns it (None: as MLServer does). It inherits the environment `spawn` runs in."""
    global _start_worker
    _start_worker, spawn = start, mlserver_pool._spawn_worker
    if getattr(spawn, "__wrapped__", None) is None:  # not yet routed through _start_worker

        @functools.wraps(spawn)
        def spawn_worker(*args: Any, **kwargs: Any) -> Any:
            launch = functools.partial(spawn, *args, **kwargs)
            return launch() if _start_worker is None else _start_worker(launch)

        mlserver_pool._spawn_worker = spawn_worker


def handle_worker_exits(handler: Callable[[], None]) -> None:
    """Call `handler` on SIGCHLD in place of the handler MLServer's InferencePoolRegistry installed when it was built
    (with signal.signal: uvloop keeps SIGCHLD from add_signal_handler). MLServer puts back the handler from before
    it when the registry closes."""
    signal.signal(signal.SIGCHLD, lambda *_: handler())


class WorkerPolicy(Protocol):
    """What `guard_dispatcher` asks of the engine's supervisor."""

    def in_rotation(self, pid: int) -> bool:
        """Whether the worker may take requests."""

    def starting(self, pid: int) -> None:
        """A new worker was started; it loads the models next."""

    def ready(self, pid: int) -> None:
        """A new worker has loaded the models."""

    def no_worker(self) -> Exception:
        """The error for a request that finds no worker to take it."""

    async def predict(self, answer: Awaitable, pid: int) -> Any:
        """Await a worker's `answer` to a predict (not a model load): the place to bound the wait."""


def guard_dispatcher(pool, policy: WorkerPolicy) -> None:
    """Make the dispatcher of `pool` send requests only to workers `policy` keeps in rotation (MLServer puts every
    worker back when one replacement is ready), tell it of workers starting and ready, raise its error when no
    worker can take a request (MLServer would raise StopIteration, or KeyError for a worker that just went), and
    let it bound the wait for each predict's answer."""
    dispatcher = pool._dispatcher

    def rotation():
        dispatcher._workers_round_robin = cycle([pid for pid in dispatcher._workers if policy.in_rotation(pid)])
        return dispatcher._workers_round_robin

    started, ready = dispatcher.on_worker_start, dispatcher.on_worker_ready

    async def on_worker_start(worker):
        policy.starting(worker.pid)
        await started(worker)

    def on_worker_ready(worker):
        policy.ready(worker.pid)
        ready(worker)

    dispatcher._reset_round_robin = rotation
    dispatcher.on_worker_start = on_worker_start
    dispatcher.on_worker_ready = on_worker_ready
    pick = dispatcher._get_worker

    def get_worker():
        try:
            return pick()
        except (StopIteration, KeyError):
            raise policy.no_worker() from None

    dispatcher._get_worker = get_worker
    responses = dispatcher._async_responses
    wait = responses.schedule_and_wait

    async def bounded_wait(message, worker):
        if not isinstance(message, ModelRequestMessage):  # model loads may take as long as they take
            return await wait(message, worker)
        return await policy.predict(wait(message, worker), worker.pid)

    responses.schedule_and_wait = bounded_wait


_ID_MARK = "\x00request-id\x00"
_HEADERS: dict[int, tuple[ModelSettings, dict[str, str]]] = {}


def response_headers(data_plane: DataPlane, model, request_id: str) -> dict[str, str]:
    """The headers MLServer's response middlewares (CloudEvents) add to an inference response. They depend on the
    model's settings and the request id only: they are built once per model, with a mark where the id goes."""
    cached = _HEADERS.get(id(model.settings))
    if cached is None or cached[0] is not model.settings:
        response = InferenceResponse(model_name=model.name, id=_ID_MARK, outputs=[])
        data_plane._inference_middleware.response_middleware(response, model.settings)
        cached = _HEADERS[id(model.settings)] = (model.settings, extract_headers(response) or {})
    return {key: request_id if value == _ID_MARK else value for key, value in cached[1].items()}
