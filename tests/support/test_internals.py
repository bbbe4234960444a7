"""Canaries: each assumption `chariot_support.internals` makes about MLServer's private parts, checked against the
installed MLServer. On a release where one no longer holds, its test fails saying which and where to look."""

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
