"""Canaries: each assumption `chariot_support.seams.mlserver` makes about MLServer's private parts, checked by using it
on the installed MLServer's real objects (pools with in-process workers, a data plane with a model loaded, an engine
server whose servers do not serve). On a release where one no longer holds, its test fails saying which in plain
words; CANARIES, at the end, names the canaries of each private name, and a test keeps it complete."""

import ast
import asyncio
import itertools
import multiprocessing
import os
import signal
import time
import types
from pathlib import Path

import pytest
from mlserver import MLModel
from mlserver.grpc.servicers import InferenceServicer
from mlserver.settings import ModelSettings, Settings
from mlserver.types import InferenceRequest, InferenceResponse

from chariot_support.after_answer import afterwards
from chariot_support.errors import ModelLoadFailed
from chariot_support.seams import mlserver as internals
from chariot_support.seams.metrics import HTTPMetrics


def holds(condition: bool, what: str) -> None:
    if not condition:
        pytest.fail(f"MLServer changed: {what}. Update chariot_support/seams/mlserver.py for this MLServer release.")


def test_parallel_errors_are_where_the_engine_reads_them():
    from mlserver.parallel.errors import WorkerError, WorkerStop

    stop = WorkerStop(-9)
    holds(str(stop).rstrip(".").endswith("-9"), "WorkerStop's message no longer ends with the exit code")
    unwrapped = internals.unwrap_worker_error(stop)
    holds(unwrapped.status_code == 503 and "SIGKILL" in str(unwrapped), "a dead worker is no longer read as one")
    error = WorkerError(ValueError("x"))
    holds(str(error).startswith("builtins.ValueError: "), "WorkerError no longer prefixes the class path")


class InProcessWorker:
    """Stands in for MLServer's worker process: it answers each message at once through the pool's own response
    queue, so that MLServer's dispatcher reads the answer as it reads a process's; while `hung`, it answers no request."""

    pids = itertools.count(1 << 23)  # above Linux's highest pid: no real process has one

    def __init__(self, settings, responses, env=None):
        self.pid = next(self.pids)
        self.exitcode = None
        self.hung = False
        self.requests: list = []
        self.updates: list = []
        self._responses = responses

    def send_update(self, message) -> None:
        self.updates.append(message)
        self._answer(message)

    def send_request(self, message) -> None:
        self.requests.append(message)
        if not self.hung:
            self._answer(message, return_value=(message.method_name, *message.method_args))

    def _answer(self, message, **answer) -> None:
        from mlserver.parallel.messages import ModelResponseMessage

        self._responses.put(ModelResponseMessage(id=message.id, **answer))

    async def stop(self) -> None:
        self.exitcode = 0

    def join(self, timeout=None) -> None:
        pass

    def kill(self) -> None:
        self.exitcode = -9


@pytest.fixture
def no_worker_processes(monkeypatch):
    """MLServer's inference pools get InProcessWorkers in place of processes."""
    from mlserver.parallel import pool

    holds(
        callable(getattr(pool, "_spawn_worker", None)),
        "mlserver.parallel.pool._spawn_worker, which the canaries replace to build pools without processes, is gone",
    )
    monkeypatch.setattr(pool, "_spawn_worker", InProcessWorker)
    method = multiprocessing.get_start_method(allow_none=True)  # a pool sets 'spawn' for the whole process
    yield
    multiprocessing.set_start_method(method, force=True)


def model_settings(name: str, implementation: type = MLModel, **parameters) -> ModelSettings:
    return ModelSettings(name=name, implementation=implementation, parameters=parameters or None)


async def error_of(awaitable) -> BaseException | None:
    try:
        await awaitable
    except Exception as error:
        return error
    return None


def test_worker_pools_are_the_registrys_pools_and_their_workers(no_worker_processes, tmp_path):
    """The supervisor finds every pool MLServer's registry serves models from, and each pool's workers, and its
    SIGCHLD handler takes the place of the registry's."""
    from mlserver.parallel.registry import InferencePoolRegistry

    async def check():
        before = signal.getsignal(signal.SIGCHLD)
        registry = InferencePoolRegistry(Settings(parallel_workers=2, environments_dir=str(tmp_path / "envs")))
        try:
            holds(
                signal.getsignal(signal.SIGCHLD) is not before,
                "InferencePoolRegistry no longer installs its SIGCHLD handler when it is built, where the engine's"
                " replaces it",
            )
            noticed = []
            internals.handle_worker_exits(lambda: noticed.append(True))
            os.kill(os.getpid(), signal.SIGCHLD)
            await asyncio.sleep(0)
            holds(noticed == [True], "a SIGCHLD no longer reaches the engine's handler")

            pools = internals.worker_pools(registry)
            holds(
                len(pools) == 1 and len(internals.workers_of(pools[0])) == 2,
                "InferencePoolRegistry no longer keeps its default pool as _default_pool, or InferencePool its"
                " workers by pid as _workers",
            )
            plain = await registry.load_model(MLModel(model_settings("canary-plain")))
            apart = await registry.load_model(MLModel(model_settings("canary-apart", inference_pool_gid="canary")))
            pools = internals.worker_pools(registry)
            holds(
                len(pools) == 2,
                "InferencePoolRegistry no longer keeps the pool of a model with its own inference_pool_gid in _pools",
            )
            for pool, model in zip(pools, (plain, apart), strict=True):
                await internals.call_runtime(model, "answer", 1)
                holds(
                    [m.model_name for w in internals.workers_of(pool).values() for m in w.requests] == [model.name],
                    f"{model.name}'s requests no longer go to the workers of the pool worker_pools names for it",
                )
        finally:
            await registry.close()
            signal.signal(signal.SIGCHLD, before)

    asyncio.run(check())


def test_replace_worker_fails_a_stopped_workers_requests_and_starts_one_with_the_models(no_worker_processes):
    from mlserver.parallel.errors import WorkerStop
    from mlserver.parallel.pool import InferencePool

    async def check():
        pool = InferencePool(Settings(parallel_workers=2))
        try:
            model = await pool.load_model(MLModel(model_settings("canary")))
            workers = internals.workers_of(pool)
            stopped_pid, stopped = next(iter(workers.items()))
            stopped.hung = True
            in_flight = [asyncio.create_task(internals.call_runtime(model, "answer", i)) for i in range(2)]
            for _ in range(500):  # the first request goes to the first worker
                if stopped.requests:
                    break
                await asyncio.sleep(0.01)
            holds(stopped.requests != [], "Dispatcher no longer sends the first request to the first worker")
            await internals.replace_worker(pool, stopped_pid, 9)
            answers = await asyncio.gather(*in_flight, return_exceptions=True)
            holds(
                isinstance(answers[0], WorkerStop) and answers[1] == ("answer", 1),
                f"InferencePool.on_worker_stop(pid, exit_code) no longer fails the stopped worker's requests with"
                f" WorkerStop (the requests got {answers!r})",
            )
            (new,) = [w for pid, w in workers.items() if w.requests == []]
            holds(
                stopped_pid not in workers and len(workers) == 2,
                "InferencePool.on_worker_stop no longer replaces the stopped worker in _workers",
            )
            holds(
                [u.model_settings.name for u in new.updates] == ["canary"],
                "InferencePool.on_worker_stop no longer has the new worker load the pool's models",
            )
        finally:
            await pool.close()

    asyncio.run(check())


def test_every_worker_mlserver_starts_goes_through_the_engines_start(no_worker_processes):
    """server/devices.py gives each parallel worker its GPUs in the environment MLServer starts it with."""
    from mlserver.parallel.pool import InferencePool

    started = []

    def start(spawn):
        worker = spawn()
        started.append(worker.pid)
        return worker

    async def check():
        pool = InferencePool(Settings(parallel_workers=2))
        try:
            holds(
                started == list(internals.workers_of(pool)),
                "InferencePool no longer starts its workers through mlserver.parallel.pool._spawn_worker",
            )
            await internals.replace_worker(pool, started[0], 9)
            holds(
                len(started) == 3 and started[2] in internals.workers_of(pool),
                "InferencePool.on_worker_stop no longer starts the replacement through _spawn_worker",
            )
        finally:
            await pool.close()

    internals.start_workers_with(start)
    try:
        asyncio.run(check())
    finally:
        internals.start_workers_with(None)


class CanaryPolicy:
    """A WorkerPolicy that records what the guarded dispatcher asks of it, and bounds a predict's wait by 0.2 s."""

    def __init__(self):
        self.out: set[int] = set()
        self.all_out = False
        self.events: list[tuple[str, int]] = []
        self.waited: list[int] = []

    def in_rotation(self, pid: int) -> bool:
        return not self.all_out and pid not in self.out

    def starting(self, pid: int) -> None:
        self.events.append(("starting", pid))

    def ready(self, pid: int) -> None:
        self.events.append(("ready", pid))

    def no_worker(self) -> Exception:
        return LookupError("no worker in the rotation")

    async def predict(self, answer, pid: int):
        self.waited.append(pid)
        return await asyncio.wait_for(answer, 0.2)


def test_a_guarded_dispatcher_rotates_over_the_policys_workers_and_bounds_each_predict(no_worker_processes):
    from mlserver.parallel.pool import InferencePool

    async def check():
        pool = InferencePool(Settings(parallel_workers=3))
        policy = CanaryPolicy()
        try:
            internals.guard_dispatcher(pool, policy)
            model = await pool.load_model(MLModel(model_settings("canary")))
            holds(
                policy.waited == [],
                "a model load now travels as a ModelRequestMessage, and would be cut off like a predict",
            )
            workers = internals.workers_of(pool)
            first, second, third = list(workers)
            policy.out = {second}
            await internals.replace_worker(pool, first, 9)  # MLServer rebuilds the rotation when the new one is ready
            (new,) = set(workers) - {second, third}
            holds(
                policy.events == [("starting", new), ("ready", new)],
                "Dispatcher.on_worker_start and on_worker_ready are no longer called for a replacement worker",
            )
            answers = [await internals.call_runtime(model, "answer", i) for i in range(6)]
            holds(
                {pid for pid, w in workers.items() if w.requests} == {third, new},
                "Dispatcher no longer sends requests to the workers of the rotation its _reset_round_robin builds"
                " (from _workers, kept as _workers_round_robin, picked by _get_worker)",
            )
            holds(
                answers == [("answer", i) for i in range(6)] and sorted(set(policy.waited)) == sorted({third, new}),
                "Dispatcher._async_responses.schedule_and_wait(message, worker) no longer carries a predict's answer",
            )
            for pid in (third, new):
                workers[pid].hung = True
            started = time.monotonic()
            error = await error_of(internals.call_runtime(model, "answer", "late"))
            holds(
                isinstance(error, TimeoutError) and time.monotonic() - started < 5,
                f"a predict's wait for a worker that does not answer is no longer the policy's to bound ({error!r})",
            )
            policy.all_out = True
            await internals.replace_worker(pool, third, 9)
            error = await error_of(internals.call_runtime(model, "answer", "none"))
            holds(
                isinstance(error, LookupError) and str(error) == "no worker in the rotation",
                f"Dispatcher._get_worker no longer fails with StopIteration on an empty rotation ({error!r})",
            )
        finally:
            await pool.close()

    asyncio.run(check())


def test_call_runtime_reaches_a_parallel_model_through_its_dispatcher():
    from mlserver.parallel.messages import ModelRequestMessage, ModelResponseMessage
    from mlserver.parallel.model import ParallelModel

    sent = []

    class Dispatcher:
        async def dispatch_request(self, message):
            sent.append(message)
            return ModelResponseMessage(id=message.id, return_value="answered")

    model = ParallelModel(MLModel(model_settings("canary")), Dispatcher())
    answer = asyncio.run(internals.call_runtime(model, "answer", "request", "id-1", False))
    holds(
        answer == "answered"
        and len(sent) == 1
        and isinstance(sent[0], ModelRequestMessage)
        and (sent[0].model_name, sent[0].method_name, sent[0].method_args)
        == ("canary", "answer", ["request", "id-1", False]),
        "ParallelModel._send(method, *args) no longer sends its dispatcher a ModelRequestMessage naming the model,"
        " the method and its arguments",
    )


class EchoModel(MLModel):
    """Answers with no outputs, noting the model name MLServer's context gives while it predicts."""

    seen: list[str] = []

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        EchoModel.seen.append(internals.current_model_name())
        return InferenceResponse(model_name=self.name, outputs=[])


def test_served_inference_does_what_mlservers_data_plane_does_around_an_inference(released_metrics):
    """The engine's inference counts in MLServer's own metrics, names the model in MLServer's context, and carries
    the headers MLServer's data plane would give the same answer (CloudEvents)."""
    from mlserver.handlers import DataPlane
    from mlserver.registry import MultiModelRegistry
    from mlserver.utils import extract_headers
    from prometheus_client import REGISTRY

    async def check():
        registry = MultiModelRegistry()
        data_plane = DataPlane(settings=Settings(), model_registry=registry)
        await registry.load(model_settings("canary-served", EchoModel))
        model = await registry.get_model("canary-served")
        own = await data_plane.infer(InferenceRequest(id="req-1", inputs=[]), "canary-served")

        async with internals.served_inference(data_plane, model, None) as served:
            holds(served is model, "served_inference no longer yields the model")
            EchoModel.seen.append(internals.current_model_name())
        with pytest.raises(ValueError):
            async with internals.served_inference(data_plane, model, None):
                raise ValueError("canary")
        return own, model, data_plane

    EchoModel.seen.clear()
    own, model, data_plane = asyncio.run(check())
    afterwards.flush()  # the engine counts an inference after its answer (after_answer.py)
    labels = {"model": "canary-served", "version": "None"}

    def count(name: str) -> float | None:
        return REGISTRY.get_sample_value(name, labels)

    holds(
        count("model_infer_request_success_total") == 2.0,
        "DataPlane no longer counts inferences MLServer answers in _ModelInferRequestSuccess, as the engine does",
    )
    holds(
        count("model_infer_request_failure_total") == 1.0,
        "DataPlane no longer counts failed inferences in _ModelInferRequestFailure",
    )
    holds(
        count("model_infer_request_duration_count") == 3.0,
        "DataPlane no longer times inferences in _ModelInferRequestDuration",
    )
    holds(
        EchoModel.seen == ["canary-served", "canary-served"] and internals.current_model_name() == "",
        "mlserver.context.model_context no longer names the model in model_name_var while MLServer predicts",
    )
    headers = extract_headers(own)
    holds(
        headers.get("Ce-Id") == "req-1",
        f"MLServer's data plane no longer gives an answer CloudEvents headers with its id as Ce-Id ({headers})",
    )
    holds(
        internals.response_headers(data_plane, model, "req-1") == headers
        and internals.response_headers(data_plane, model, "req-2")["Ce-Id"] == "req-2",
        "DataPlane._inference_middleware.response_middleware no longer gives the headers MLServer's own answer has",
    )


class UnloadableModel(MLModel):
    async def load(self) -> bool:
        raise RuntimeError("canary weights missing")


class RecordingServicer(InferenceServicer):
    built: list = []

    def __init__(self, *args):
        super().__init__(*args)
        RecordingServicer.built.append(self)


class CanaryEngine(internals.EngineServer):
    """An engine whose parts note what MLServer does with them."""

    grpc_servicer = RecordingServicer
    grpc_grace = 0.0
    given = apps = (None, None)  # what MLServer hands the engine, once it does
    watched = None
    noted: list[str] = []

    @classmethod
    def build(cls, settings: Settings) -> "CanaryEngine":
        try:
            return cls(settings)
        except Exception as error:
            holds(
                False,
                "MLServer's constructor no longer builds its servers from the parts the engine replaces (_data_plane,"
                f" _model_registry, _model_repository, _model_repository_handlers in _create_servers): {error!r}",
            )

    def engine_parts(self, data_plane, model_registry):
        from mlserver.handlers import ModelRepositoryHandlers
        from mlserver.repository import ModelRepository

        engine = self

        class Repository(ModelRepository):
            async def list(self):
                engine.noted.append("index")
                return []

            async def find(self, name):
                return []

        class Plane:
            def __getattr__(self, name):  # all but `live` is MLServer's
                return getattr(data_plane, name)

            async def live(self):
                engine.noted.append("live")
                return True

        self.noted = []
        self.given = (data_plane, model_registry)
        return Plane(), Repository(), ModelRepositoryHandlers(Repository(), model_registry)

    def install_routes(self, rest_app, metrics_app) -> None:
        self.apps = (rest_app, metrics_app)

    def watch_workers(self, pool_registry):
        self.watched = pool_registry
        return types.SimpleNamespace(closing=False)


async def asgi_call(app, method: str, path: str, body: bytes = b"") -> int:
    """The status `app` answers a request with, called in this process."""
    statuses = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    return statuses[0]


@pytest.fixture
def uvicorn_configs(monkeypatch) -> list:
    """The uvicorn configurations servers are started with; none serves."""
    import uvicorn

    configs = []

    async def serve(server, sockets=None):
        configs.append(server.config)

    monkeypatch.setattr(uvicorn.Server, "serve", serve)
    return configs


def test_the_engine_server_builds_and_starts_mlservers_servers_from_its_parts(released_metrics, uvicorn_configs):
    """EngineServer gives MLServer its data plane, repository and handlers, the apps MLServer serves, the gRPC
    servicer, uvicorn's options, and a model load that fails as an error."""
    from mlserver.grpc import server as grpc_server
    from mlserver.handlers import DataPlane
    from mlserver.registry import MultiModelRegistry

    settings = Settings(host="127.0.0.1", grpc_port=0, parallel_workers=0, metrics_endpoint="/metrics")
    internals.set_uvicorn_options(settings, limit_concurrency=7, timeout_keep_alive=3, proxy_headers=False)
    RecordingServicer.built.clear()

    async def check():
        engine = CanaryEngine.build(settings)
        holds(engine.settings is settings, "MLServer no longer keeps its settings as _settings")
        holds(
            isinstance(engine.given[0], DataPlane) and isinstance(engine.given[1], MultiModelRegistry),
            "MLServer no longer has its _data_plane and _model_registry built when it calls _create_servers",
        )
        rest_app, metrics_app = engine.apps
        holds(
            await asgi_call(rest_app, "GET", "/v2/health/live") == 200 and engine.noted == ["live"],
            "MLServer's REST server (_rest_server, its app _app) no longer answers from the engine's data plane",
        )
        holds(
            await asgi_call(rest_app, "POST", "/v2/repository/index", b"{}") == 200 and engine.noted[-1] == "index",
            "MLServer's REST server no longer answers from the engine's _model_repository_handlers",
        )
        holds(
            HTTPMetrics.find(rest_app.build_middleware_stack()) is not None,
            "MLServer's REST app no longer counts requests with starlette_exporter's PrometheusMiddleware, in which the"
            " engine counts the requests it answers before that middleware",
        )
        failure = await error_of(engine.start([model_settings("canary-unloadable", UnloadableModel)]))
        return rest_app, metrics_app, failure

    rest_app, metrics_app, failure = asyncio.run(check())
    holds(
        isinstance(failure, ModelLoadFailed) and "canary weights missing" in str(failure),
        "MLServer.start no longer loads models through _model_registry.load, where the engine notes a failure, or"
        f" no longer stops its servers (_grpc_server's _server among them) after it ({failure!r})",
    )
    served = {id(config.app): config for config in uvicorn_configs}
    holds(
        set(served) == {id(rest_app), id(metrics_app)},
        "MLServer no longer serves the apps of its _rest_server and _metrics_server (their _app) with uvicorn",
    )
    rest = served[id(rest_app)]
    holds(
        (rest.limit_concurrency, rest.timeout_keep_alive, rest.proxy_headers) == (7, 3, False),
        "RESTServer no longer passes Settings._custom_rest_server_settings to uvicorn's Config",
    )
    holds(
        len(RecordingServicer.built) == 1 and grpc_server.InferenceServicer is InferenceServicer,
        "GRPCServer.start no longer builds its servicer in _create_server by the module-level name InferenceServicer",
    )


def test_the_engine_server_gives_its_parallel_workers_to_the_supervisor(
    released_metrics, uvicorn_configs, no_worker_processes, tmp_path
):
    """With MLSERVER_PARALLEL_WORKERS, the engine's supervisor watches the pools its model is served from."""
    settings = Settings(
        host="127.0.0.1", grpc_port=0, parallel_workers=2, metrics_endpoint=None, environments_dir=str(tmp_path)
    )

    async def check():
        engine = CanaryEngine.build(settings)
        serving = asyncio.create_task(engine.start([model_settings("canary-parallel")]))
        try:
            registry = engine.given[1]
            for _ in range(500):
                if serving.done() or "canary-parallel" in [m.name for m in await registry.get_models() if m.ready]:
                    break
                await asyncio.sleep(0.01)
            holds(
                engine.watched is not None and not serving.done(),
                "the engine no longer starts with parallel workers from MLServer's _inference_pool_registry"
                f" ({serving.exception() if serving.done() else 'no InferencePoolRegistry was watched'!r})",
            )
            model = await registry.get_model("canary-parallel")
            await internals.call_runtime(model, "answer", 1)
            pools = internals.worker_pools(engine.watched)
            requests = [m.model_name for w in internals.workers_of(pools[0]).values() for m in w.requests]
            holds(
                requests == ["canary-parallel"],
                "MLServer no longer serves its models from the workers of the InferencePoolRegistry it keeps as"
                " _inference_pool_registry",
            )
        finally:
            await error_of(engine.stop())  # closes the pools, whose dispatcher threads would keep the process alive
            await asyncio.gather(serving, return_exceptions=True)

    asyncio.run(check())


def test_the_grpc_server_keeps_mlservers_interceptors_tracing_included(monkeypatch, released_metrics):
    """The engine's gRPC server is MLServer's: with MLSERVER_TRACING_SERVER set, gRPC calls are traced as REST."""
    from chariot_support.model.demo import DEMO_MODELS
    from chariot_support.server.server import build_server
    from chariot_support.settings import EngineSettings

    monkeypatch.setenv("MLSERVER_TRACING_SERVER", "127.0.0.1:4317")
    model_class = DEMO_MODELS[next(iter(DEMO_MODELS))]

    async def build():  # MLServer's constructor sets signal handlers on the running loop
        built = build_server(model_class, "x", EngineSettings())
        built._grpc_server._create_server()
        return built

    server = asyncio.run(build())
    kinds = [type(i).__module__ for i in server._grpc_server._interceptors]
    assert any("opentelemetry" in kind for kind in kinds), kinds
    assert type(server._grpc_server._inference_servicer).__name__ == "ChariotInferenceServicer"


def test_mlservers_grpc_metrics_are_where_the_engines_interceptor_counts_unary_calls(released_metrics, monkeypatch):
    """MLServer keeps gRPC metrics with py-grpc-prometheus's interceptor; the engine's own interceptor counts unary
    calls in its counters (seams/metrics.py's GRPCMetrics), and MLServer's is left streaming calls only."""
    from grpc import aio
    from mlserver.grpc.interceptors import PromServerInterceptor
    from prometheus_client import REGISTRY

    from chariot_support.model.demo import DEMO_MODELS
    from chariot_support.seams.metrics import StreamingCallsOnly
    from chariot_support.server.server import build_server
    from chariot_support.settings import EngineSettings

    given, real = [], aio.server
    monkeypatch.setattr(aio, "server", lambda *args, interceptors=(), **kwargs: given.extend(interceptors) or real())

    async def build():  # MLServer's constructor sets signal handlers on the running loop
        built = build_server(DEMO_MODELS[next(iter(DEMO_MODELS))], "x", EngineSettings())
        built._grpc_server._create_server()
        return built

    server = asyncio.run(build())
    mlservers = [i for i in server._grpc_server._interceptors if isinstance(i, PromServerInterceptor)]
    holds(len(mlservers) == 1, "MLServer's gRPC server no longer keeps its metrics with PromServerInterceptor")
    counters = mlservers[0]._interceptor
    holds(
        {"grpc_server_started_counter", "grpc_server_handled_histogram"} <= set(counters._metrics)
        and counters._grpc_server_handled_total_counter is not None,
        "py-grpc-prometheus's interceptor no longer holds its counters as _metrics and"
        " _grpc_server_handled_total_counter",
    )
    limits = server._grpc_server.limits
    limits._metrics.started("inference.GRPCInferenceService", "ModelInfer")
    limits._metrics.finished("inference.GRPCInferenceService", "ModelInfer", "NOT_FOUND", 0.25)
    afterwards.flush()  # counted after the answer (after_answer.py)
    labels = {"grpc_type": "UNARY", "grpc_service": "inference.GRPCInferenceService", "grpc_method": "ModelInfer"}
    holds(
        REGISTRY.get_sample_value("grpc_server_started_total", labels) == 1.0
        and REGISTRY.get_sample_value("grpc_server_handled_total", {**labels, "grpc_code": "NOT_FOUND"}) == 1.0
        and REGISTRY.get_sample_value("grpc_server_handling_seconds_sum", labels) == 0.25,
        "py-grpc-prometheus's counters no longer take (grpc_type, grpc_service, grpc_method[, grpc_code])",
    )
    assert given[0] is limits and any(isinstance(i, StreamingCallsOnly) for i in given), given
    assert not any(isinstance(i, PromServerInterceptor) for i in given), "unary calls would be counted twice"


def test_the_grpc_server_is_built_by_the_aio_name_the_engine_swaps(released_metrics, monkeypatch):
    """The engine's gRPC limits reach gRPC only if MLServer builds its server with its module's `aio.server(...)`,
    passing interceptors= and options=."""
    from mlserver.grpc import server as grpc_server

    from chariot_support.grpc.limits import CallLimits
    from chariot_support.model.demo import DEMO_MODELS
    from chariot_support.server.server import build_server
    from chariot_support.settings import EngineSettings

    built_with = {}
    real = grpc_server.aio.server

    def recording(*args, **kwargs):
        built_with.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(grpc_server.aio, "server", recording)

    async def build():  # MLServer's constructor sets signal handlers on the running loop
        built = build_server(DEMO_MODELS[next(iter(DEMO_MODELS))], "x", EngineSettings())
        built._grpc_server._create_server()
        return built

    server = asyncio.run(build())
    holds(
        isinstance(server._grpc_server.limits, CallLimits),
        "GRPCServer._create_server no longer builds its server with mlserver.grpc.server's `aio.server(...)`, so the"
        " engine's gRPC limits (CHARIOT_GRPC_MAX_CALLS, the body budget) are not installed",
    )
    holds(
        built_with.get("interceptors", [None])[0] is server._grpc_server.limits
        and ("grpc.http2.bdp_probe", 0) in built_with.get("options", []),
        "GRPCServer._create_server no longer passes interceptors= and options= to aio.server, so the engine's"
        " interceptor and server options are not installed",
    )
    holds(grpc_server.aio.server is recording, "the engine left mlserver.grpc.server's `aio` swapped after the build")


# MLServer's modules the support package may use outside seams/mlserver.py: its documented API (types, settings,
# errors, the data plane and repository handlers, the gRPC messages and their converters).
# MLServer's documented surface: the runtime base class, its types, settings, codecs and errors, and the messages and
# service generated from the V2 gRPC .proto. Everything else of MLServer's is reached through seams/mlserver.py.
PUBLIC_MLSERVER = {
    "mlserver.MLModel",
    "mlserver.codecs",
    "mlserver.errors",
    "mlserver.grpc.dataplane_pb2",
    "mlserver.grpc.dataplane_pb2_grpc",
    "mlserver.settings",
    "mlserver.types",
}


def is_public_mlserver(module: str, names: list[str]) -> bool:
    return module in PUBLIC_MLSERVER or all(f"{module}.{name}" in PUBLIC_MLSERVER for name in names)


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


# The standard library's documented names that start with an underscore.
DOCUMENTED_UNDERSCORES = {"os._exit"}


def test_only_the_seams_reach_past_mlservers_documented_surface():
    """Outside seams/ the support package imports MLServer's documented surface only, and reads no private
    attribute of an object other than its own."""
    import chariot_support

    package = Path(chariot_support.__file__).parent
    reached = []
    for path in sorted(package.rglob("*.py")):
        if path.parent.name == "seams":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("mlserver"):
                names = [a.name for a in node.names]
                if not is_public_mlserver(node.module, names) or any(map(is_private, names)):
                    reached.append(f"{path.relative_to(package)}: from {node.module} import {', '.join(names)}")
            elif isinstance(node, ast.Import) and any(a.name.startswith("mlserver.") for a in node.names):
                reached.append(f"{path.relative_to(package)}: import {', '.join(a.name for a in node.names)}")
            elif isinstance(node, ast.Attribute) and is_private(node.attr) and not is_self(node.value):
                if ast.unparse(node) in DOCUMENTED_UNDERSCORES:
                    continue
                reached.append(f"{path.relative_to(package)}:{node.lineno}: {ast.unparse(node)}")
    assert not reached, "move these into seams/mlserver.py, with a canary each:\n" + "\n".join(reached)


def is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


# What seams/mlserver.py relies on that its walk below cannot see by name: a public-looking method of MLServer's private
# pool class, and the signal MLServer's registry handles.
UNNAMED_ASSUMPTIONS = {"on_worker_stop", "SIGCHLD"}

# Names seams/mlserver.py uses that the walk would take for MLServer's, but are the engine's own.
ENGINE_OWN = {
    "_engine",  # _EngineGRPCServer's link to the engine it serves
    "workers",  # the supervisor (server/workers.py) the engine's data plane holds
    "closing",  # the supervisor's flag that the engine is stopping
    "limits",  # _EngineGRPCServer's interceptor in front of every gRPC call, set as its server is built
    "_stopped",  # EngineServer's event: its stop is done (the workers too)
}


def mlserver_uses() -> set[str]:
    """What seams/mlserver.py uses of MLServer beyond its public API: private attributes (on MLServer's objects, and on
    its own self where its class is built on one of MLServer's), attributes it sets on objects other than itself
    (patch points), and names from MLServer's modules outside PUBLIC_MLSERVER."""
    tree = ast.parse(Path(internals.__file__).read_text())
    from_mlserver = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mlserver")
        for alias in node.names
    }
    own_self = set()  # self.<attribute> nodes of classes not built on MLServer's
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            if any(isinstance(base, ast.Name) and base.id in from_mlserver for base in node.bases):
                from_mlserver.add(node.name)  # a class built on this one is built on MLServer's too
            else:
                own_self |= {id(n) for n in ast.walk(node) if isinstance(n, ast.Attribute) and is_self(n.value)}
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr) and id(node) not in own_self:
            used.add(node.attr)
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for each in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(each, ast.Attribute) and not is_self(each.value):
                        used.add(each.attr)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mlserver"):
            names = [a.name for a in node.names]
            if not is_public_mlserver(node.module, names):
                used |= {f"{node.module}.{name}" for name in names}
    return used - ENGINE_OWN


def test_every_private_use_in_internals_has_a_canary():
    """A private name, patch point or private module seams/mlserver.py starts to use fails here until a canary for it is
    named in CANARIES; one it stops using fails until its entry goes."""
    used = mlserver_uses()
    missing = sorted(used - set(CANARIES))
    assert not missing, f"seams/mlserver.py uses these without a canary: {missing}; add one each to CANARIES"
    stale = sorted(set(CANARIES) - used - UNNAMED_ASSUMPTIONS)
    assert not stale, f"CANARIES lists what seams/mlserver.py no longer uses: {stale}; take them out"
    tests = {name for name, value in globals().items() if name.startswith("test_") and callable(value)}
    for name, canaries in CANARIES.items():
        for canary in canaries:
            assert canary.__name__ in tests, f"the canary for {name}, {canary.__name__}, is not a test here"


def test_the_data_plane_answers_every_method_of_mlservers_itself():
    """No method of MLServer's data plane reaches a client without Chariot's model naming."""
    from mlserver.handlers import DataPlane

    from chariot_support.pipeline.data_plane import ChariotDataPlane

    public = {name for name in dir(DataPlane) if not name.startswith("_")}
    missing = public - set(vars(ChariotDataPlane))
    holds(not missing, f"DataPlane has methods ChariotDataPlane does not define: {sorted(missing)}")


def test_mlservers_http_metrics_are_where_the_inference_front_counts_them():
    """MLServer's REST metrics come from starlette_exporter's middleware; the front counts inference in them."""
    from prometheus_client import REGISTRY
    from starlette_exporter import PrometheusMiddleware

    async def inner(scope, receive, send):
        raise AssertionError("never called")

    exporter = PrometheusMiddleware(inner, app_name="mlserver", prefix="canary_rest")
    outer = type("Layer", (), {"app": exporter})()  # a middleware holding the exporter as the next layer
    metrics = HTTPMetrics.find(outer)
    holds(metrics is not None, "starlette_exporter's PrometheusMiddleware is no longer found by its class")
    metrics.started("POST")
    metrics.finished("POST", "/v2/models/{model_name}/infer", 200, 0.25)
    afterwards.flush()  # counted after the answer (after_answer.py)
    labels = {"method": "POST", "path": "/v2/models/{model_name}/infer", "status_code": "200", "app_name": "mlserver"}
    holds(
        REGISTRY.get_sample_value("canary_rest_requests_total", labels) == 1.0,
        "starlette_exporter's request counter no longer takes (method, path, status_code, app_name)",
    )
    holds(
        REGISTRY.get_sample_value("canary_rest_request_duration_seconds_sum", labels) == 0.25,
        "starlette_exporter's request duration histogram changed",
    )
    in_progress = {"method": "POST", "app_name": "mlserver"}
    holds(
        REGISTRY.get_sample_value("canary_rest_requests_in_progress", in_progress) == 0.0,
        "starlette_exporter's requests-in-progress gauge no longer takes (method, app_name)",
    )


def test_mlservers_grpc_converters_carry_requests_and_answers_both_ways():
    """The engine's gRPC service and test helpers read and write V2 messages with MLServer's converters."""
    from mlserver.grpc import dataplane_pb2 as pb
    from mlserver.types import (
        InferenceRequest,
        MetadataModelResponse,
        MetadataServerResponse,
        RepositoryIndexRequest,
    )

    image = {"name": "image-0", "shape": [1], "datatype": "BYTES", "data": ["aGk="]}
    request = InferenceRequest.model_validate({"id": "r", "parameters": {"metadata": "{}"}, "inputs": [image]})
    message = internals.ModelInferRequestConverter.from_types(request, model_name="m-x", use_raw=True)
    holds(
        message.model_name == "m-x" and message.raw_input_contents, "ModelInferRequestConverter writes no raw contents"
    )
    back = internals.ModelInferRequestConverter.to_types(message)
    holds(back.inputs[0].name == "image-0" and back.id == "r", "ModelInferRequestConverter no longer reads its own")
    contents = pb.InferTensorContents(bytes_contents=[b"[]"])
    output = pb.ModelInferResponse.InferOutputTensor(name="image-0", datatype="BYTES", shape=[1], contents=contents)
    answer = internals.ModelInferResponseConverter.to_types(pb.ModelInferResponse(model_name="m-x", outputs=[output]))
    holds(answer.outputs[0].data.root == [b"[]"], "ModelInferResponseConverter no longer reads an answer's BYTES")
    server = MetadataServerResponse(name="n", version="1", extensions=[])
    holds(internals.ServerMetadataResponseConverter.from_types(server).name == "n", "ServerMetadataResponseConverter")
    model = MetadataModelResponse(name="m-x", platform="p")
    holds(internals.ModelMetadataResponseConverter.from_types(model).name == "m-x", "ModelMetadataResponseConverter")
    index = internals.RepositoryIndexRequestConverter.to_types(pb.RepositoryIndexRequest(ready=True))
    holds(isinstance(index, RepositoryIndexRequest) and index.ready, "RepositoryIndexRequestConverter reads no index")


def test_mlservers_grpc_metadata_helpers_turn_metadata_into_headers_and_back():
    """The gRPC service reads a call's metadata as headers (request ids) and sends the answer's headers as trailing
    metadata, with MLServer's helpers."""

    import grpc
    from grpc import aio

    async def call() -> tuple[dict, dict]:
        seen = {}

        async def say(request: bytes, context) -> bytes:
            seen.update(internals.to_headers(context))
            context.set_trailing_metadata(internals.to_metadata({"CE-Id": "abc"}))
            return request

        server = aio.server()
        handler = grpc.unary_unary_rpc_method_handler(say)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("canary.Echo", {"Say": handler})])
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                answer = channel.unary_unary("/canary.Echo/Say")(b"x", metadata=(("x-request-id", "r-1"),), timeout=10)
                await answer
                trailing = await answer.trailing_metadata()
        finally:
            await server.stop(None)
        return seen, dict(trailing)

    headers, trailing = asyncio.run(call())
    holds(headers.get("x-request-id") == "r-1", f"to_headers no longer reads a call's metadata as headers ({headers})")
    holds(trailing.get("ce-id") == "abc", f"to_metadata no longer writes headers as (lowercase) metadata ({trailing})")


def test_mlservers_uvloop_helper_installs_uvloops_policy():
    import uvloop

    before = asyncio.get_event_loop_policy()
    try:
        internals.install_uvloop_event_loop()
        holds(isinstance(asyncio.get_event_loop_policy(), uvloop.EventLoopPolicy), "uvloop's policy is not installed")
    finally:
        asyncio.set_event_loop_policy(before)


# Each thing seams/mlserver.py uses of MLServer beyond its documented surface, and the canaries that check it still holds.
_POOLS = (test_worker_pools_are_the_registrys_pools_and_their_workers,)
_REPLACE = (test_replace_worker_fails_a_stopped_workers_requests_and_starts_one_with_the_models,)
_GUARD = (test_a_guarded_dispatcher_rotates_over_the_policys_workers_and_bounds_each_predict,)
_SERVED = (test_served_inference_does_what_mlservers_data_plane_does_around_an_inference,)
_ENGINE = (test_the_engine_server_builds_and_starts_mlservers_servers_from_its_parts,)
_GRPC = (*_ENGINE, test_the_grpc_server_keeps_mlservers_interceptors_tracing_included)
_GRPC_AIO = (test_the_grpc_server_is_built_by_the_aio_name_the_engine_swaps,)
_GRPC_METRICS = (test_mlservers_grpc_metrics_are_where_the_engines_interceptor_counts_unary_calls,)
_CONVERTERS = (test_mlservers_grpc_converters_carry_requests_and_answers_both_ways,)
_METADATA = (test_mlservers_grpc_metadata_helpers_turn_metadata_into_headers_and_back,)
CANARIES = {
    # MLServer's parts the rest of the support package imports from the seam
    "mlserver.MLServer": _ENGINE,
    "mlserver.handlers.DataPlane": (*_SERVED, test_the_data_plane_answers_every_method_of_mlservers_itself),
    "mlserver.handlers.ModelRepositoryHandlers": _ENGINE,
    "mlserver.repository.ModelRepository": _ENGINE,
    "mlserver.utils.extract_headers": _SERVED,
    "mlserver.utils.install_uvloop_event_loop": (test_mlservers_uvloop_helper_installs_uvloops_policy,),
    "mlserver.grpc.converters.ModelInferRequestConverter": _CONVERTERS,
    "mlserver.grpc.converters.ModelInferResponseConverter": _CONVERTERS,
    "mlserver.grpc.converters.ModelMetadataResponseConverter": _CONVERTERS,
    "mlserver.grpc.converters.RepositoryIndexRequestConverter": _CONVERTERS,
    "mlserver.grpc.converters.ServerMetadataResponseConverter": _CONVERTERS,
    "mlserver.grpc.utils.to_headers": _METADATA,
    "mlserver.grpc.utils.to_metadata": _METADATA,
    # The parallel workers (server/workers.py's supervisor)
    "_default_pool": _POOLS,
    "_pools": _POOLS,
    "SIGCHLD": _POOLS,
    "_workers": (*_POOLS, *_REPLACE, *_GUARD),
    "on_worker_stop": _REPLACE,
    "_spawn_worker": (test_every_worker_mlserver_starts_goes_through_the_engines_start,),
    "mlserver.parallel.pool": (test_every_worker_mlserver_starts_goes_through_the_engines_start,),
    "_dispatcher": _GUARD,
    "_workers_round_robin": _GUARD,
    "_reset_round_robin": _GUARD,
    "_get_worker": _GUARD,
    "on_worker_start": _GUARD,
    "on_worker_ready": _GUARD,
    "_async_responses": _GUARD,
    "schedule_and_wait": _GUARD,
    "mlserver.parallel.messages.ModelRequestMessage": (
        *_GUARD,
        test_call_runtime_reaches_a_parallel_model_through_its_dispatcher,
    ),
    "mlserver.parallel.model.ParallelModel": (test_call_runtime_reaches_a_parallel_model_through_its_dispatcher,),
    "_send": (test_call_runtime_reaches_a_parallel_model_through_its_dispatcher,),
    "mlserver.parallel.errors.WorkerError": (test_parallel_errors_are_where_the_engine_reads_them, *_REPLACE),
    "mlserver.parallel.errors.WorkerStop": (test_parallel_errors_are_where_the_engine_reads_them, *_REPLACE),
    # Around each inference (pipeline/pipeline.py)
    "_ModelInferRequestDuration": _SERVED,
    "_ModelInferRequestFailure": _SERVED,
    "_ModelInferRequestSuccess": _SERVED,
    "_inference_middleware": _SERVED,
    "mlserver.context.model_context": _SERVED,
    "mlserver.context.model_name_var": _SERVED,
    # The server (server/server.py's ChariotServer)
    "_settings": _ENGINE,
    "_data_plane": _ENGINE,
    "_model_registry": _ENGINE,
    "load": _ENGINE,
    "_model_repository": _ENGINE,
    "_model_repository_handlers": _ENGINE,
    "_create_servers": _ENGINE,
    "_rest_server": _ENGINE,
    "_metrics_server": _ENGINE,
    "_app": _ENGINE,
    "_custom_rest_server_settings": _ENGINE,
    "_inference_pool_registry": (test_the_engine_server_gives_its_parallel_workers_to_the_supervisor,),
    "_grpc_server": _GRPC,
    "_create_server": _GRPC,
    "_server": _GRPC,
    "InferenceServicer": _GRPC,
    "mlserver.grpc.server": (*_GRPC, *_GRPC_AIO),
    "aio": _GRPC_AIO,
    "mlserver.grpc.server.GRPCServer": _GRPC,
    "mlserver.grpc.servicers.InferenceServicer": _GRPC,
    # MLServer's gRPC metrics, counted by the engine's interceptor for unary calls (seams/metrics.py)
    "mlserver.grpc.interceptors.PromServerInterceptor": _GRPC_METRICS,
    "_interceptor": _GRPC_METRICS,
    "_metrics": _GRPC_METRICS,
    "_grpc_server_handled_total_counter": _GRPC_METRICS,
}
