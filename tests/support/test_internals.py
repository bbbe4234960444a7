"""Canaries: each assumption `chariot_support.internals` makes about MLServer's private parts, checked against the
installed MLServer. On a release where one no longer holds, its test fails saying which and where to look."""

import asyncio
import inspect

import pytest

from chariot_support import internals


def holds(condition: bool, what: str) -> None:
    if not condition:
        pytest.fail(f"MLServer changed: {what}. Update chariot_support/internals.py for this MLServer release.")


def test_parallel_errors_are_where_the_engine_reads_them():
    from mlserver.parallel.errors import WorkerError, WorkerStop

    stop = WorkerStop(-9)
    holds(str(stop).rstrip(".").endswith("-9"), "WorkerStop's message no longer ends with the exit code")
    unwrapped = internals.unwrap_worker_error(stop)
    holds(unwrapped.status_code == 503 and "SIGKILL" in str(unwrapped), "a dead worker is no longer read as one")
    error = WorkerError(ValueError("x"))
    holds(str(error).startswith("builtins.ValueError: "), "WorkerError no longer prefixes the class path")


def test_inference_pools_keep_workers_and_dispatcher_where_the_watch_looks():
    from mlserver.parallel.dispatcher import AsyncResponses, Dispatcher
    from mlserver.parallel.pool import InferencePool
    from mlserver.parallel.registry import InferencePoolRegistry

    init = inspect.getsource(InferencePool.__init__)
    holds("self._workers" in init and "self._dispatcher" in init, "InferencePool no longer has _workers/_dispatcher")
    holds(
        "self._default_pool" in inspect.getsource(InferencePoolRegistry.__init__)
        and "self._pools" in inspect.getsource(InferencePoolRegistry.__init__),
        "InferencePoolRegistry no longer has _default_pool/_pools",
    )
    holds(
        list(inspect.signature(InferencePool.on_worker_stop).parameters) == ["self", "pid", "exit_code"],
        "InferencePool.on_worker_stop(pid, exit_code) changed",
    )
    for name in ("_get_worker", "_reset_round_robin", "on_worker_start", "on_worker_ready"):
        holds(hasattr(Dispatcher, name), f"Dispatcher.{name} is gone")
    holds("_workers_round_robin" in inspect.getsource(Dispatcher), "Dispatcher no longer keeps _workers_round_robin")
    holds(
        "self._async_responses" in inspect.getsource(Dispatcher.__init__)
        and list(inspect.signature(AsyncResponses.schedule_and_wait).parameters) == ["self", "message", "worker"],
        "Dispatcher._async_responses.schedule_and_wait(message, worker) changed",
    )
    holds(
        "next(self._workers_round_robin)" in inspect.getsource(Dispatcher._get_worker),
        "Dispatcher._get_worker no longer picks from the round robin",
    )


def test_the_server_parts_the_engine_replaces_are_where_it_replaces_them():
    from mlserver import MLServer
    from mlserver.metrics.server import MetricsServer
    from mlserver.rest.server import RESTServer

    init = inspect.getsource(MLServer.__init__)
    for part in ("self._data_plane", "self._model_registry", "self._inference_pool_registry", "self._settings"):
        holds(part in init, f"MLServer.__init__ no longer sets {part}")
    holds(
        init.index("self._data_plane =") < init.index("self._create_servers()"),
        "MLServer no longer builds its data plane before _create_servers()",
    )
    create = inspect.getsource(MLServer._create_servers)
    for part in ("self._data_plane", "self._model_repository_handlers", "self._rest_server", "self._grpc_server"):
        holds(part in create, f"MLServer._create_servers no longer uses {part}")
    holds(
        "self._model_registry.load(" in inspect.getsource(MLServer.start), "MLServer.start no longer loads by registry"
    )
    holds("self._app" in inspect.getsource(RESTServer.__init__), "RESTServer no longer keeps its app as _app")
    holds("self._app" in inspect.getsource(MetricsServer), "MetricsServer no longer keeps its app as _app")
    holds(
        "_custom_rest_server_settings" in inspect.getsource(RESTServer),
        "RESTServer no longer passes Settings._custom_rest_server_settings to uvicorn",
    )


def test_the_grpc_server_builds_its_servicer_by_the_name_the_engine_swaps():
    from mlserver.grpc.server import GRPCServer

    create = inspect.getsource(GRPCServer._create_server)
    holds("InferenceServicer(" in create, "GRPCServer._create_server no longer builds InferenceServicer by name")
    holds("self._server" in create, "GRPCServer no longer keeps its aio server as _server")


def test_parallel_models_and_request_context_are_where_the_engine_reads_them():
    from mlserver.context import model_name_var
    from mlserver.parallel.model import ParallelModel

    holds(callable(getattr(ParallelModel, "_send", None)), "ParallelModel._send(method, *args) is gone")
    holds(model_name_var.get("") == "", "mlserver.context.model_name_var is no longer a context variable")


@pytest.fixture(scope="module")
def built_server():
    """An engine's server as MLServer builds it (tracing on), its gRPC server created; built once: MLServer
    registers its metrics as it builds, and twice in one process is an error."""
    from chariot_support.demo import DEMO_MODELS
    from chariot_support.server import ChariotServer, engine_settings, model_settings

    model_class = DEMO_MODELS[next(iter(DEMO_MODELS))]

    async def build():  # MLServer's constructor sets signal handlers on the running loop
        built = ChariotServer(engine_settings(), model=model_settings(model_class, "x"), pinned=False)
        built._grpc_server._create_server()
        return built

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLSERVER_TRACING_SERVER", "127.0.0.1:4317")
        return asyncio.run(build())


def test_the_grpc_server_keeps_mlservers_interceptors_tracing_included(built_server):
    """The engine's gRPC server is MLServer's: with MLSERVER_TRACING_SERVER set, gRPC calls are traced as REST."""
    kinds = [type(i).__module__ for i in built_server._grpc_server._interceptors]
    assert any("opentelemetry" in kind for kind in kinds), kinds
    assert type(built_server._grpc_server._inference_servicer).__name__ == "ChariotInferenceServicer"


def test_the_grpc_server_builds_its_aio_server_by_the_name_the_engine_swaps(built_server):
    """The engine's limits reach gRPC only if MLServer builds its server with `aio.server(...)` from its module."""
    from mlserver.grpc.server import GRPCServer

    from chariot_support.grpc_limits import CallLimits

    holds(
        isinstance(built_server._grpc_server.limits, CallLimits),
        "GRPCServer._create_server no longer builds its server with mlserver.grpc.server's `aio.server(...)`, so the"
        " engine's gRPC limits (CHARIOT_GRPC_MAX_CALLS, the body budget) are not installed",
    )
    create = inspect.getsource(GRPCServer._create_server)
    holds(
        "interceptors=" in create and "options=" in create,
        "GRPCServer._create_server no longer passes interceptors= and options= to aio.server",
    )


def test_only_the_wiring_modules_import_mlserver():
    import ast
    from pathlib import Path

    import chariot_support

    importers = set()
    for path in Path(chariot_support.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(n == "mlserver" or n.startswith("mlserver.") for n in names):
                importers.add(path.stem)
    assert importers == {
        "internals",
        "server",
        "runtime",
        "data_plane",
        "grpc_service",
        "rest_routes",
        "workers",
        "testing",
    }, importers


def test_the_data_plane_answers_every_method_of_mlservers_itself():
    """No method of MLServer's data plane reaches a client without Chariot's model naming."""
    from mlserver.handlers import DataPlane

    from chariot_support.data_plane import ChariotDataPlane

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
    metrics = internals.HTTPMetrics.find(outer)
    holds(metrics is not None, "starlette_exporter's PrometheusMiddleware is no longer found by its class")
    metrics.started("POST")
    metrics.finished("POST", "/v2/models/{model_name}/infer", 200, 0.25)
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
