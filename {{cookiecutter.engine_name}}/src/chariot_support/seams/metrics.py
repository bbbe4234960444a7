"""MLServer's REST and gRPC metrics as the engine keeps them for the calls it serves itself: REST's, starlette_exporter's
middleware, found in MLServer's app by walking Starlette's chain of middlewares (each holds the next as `.app`, by
convention, not by contract); gRPC's, the counters and histogram of MLServer's gRPC interceptor (handed over by
seams/mlserver.py). `tests/support/test_internals.py` holds the canaries."""

from __future__ import annotations

from typing import Any

from grpc import aio
from starlette_exporter import PrometheusMiddleware

from chariot_support.after_answer import afterwards


def find_middleware(app, kinds: type | tuple[type, ...]):
    """The first middleware of one of `kinds` in `app`'s chain, or None. Starlette's middlewares hold the next layer
    as `.app` by convention, not by contract."""
    while app is not None:
        if isinstance(app, kinds):
            return app
        app = getattr(app, "app", None)
    return None


class HTTPMetrics:
    """The REST request metrics MLServer's app keeps (starlette_exporter's middleware: requests in progress, and the
    count and duration by method, route, status and app), for requests the engine answers before that middleware
    sees them."""

    def __init__(self, exporter: PrometheusMiddleware):
        self._exporter = exporter
        self._in_progress = {}
        self._done: dict[tuple, tuple[Any, Any]] = {}

    @classmethod
    def find(cls, app) -> HTTPMetrics | None:
        """The metrics of the exporter inside `app`'s middleware chain; None when MLServer's metrics are off."""
        exporter = find_middleware(app, PrometheusMiddleware)
        return None if exporter is None else cls(exporter)

    def started(self, method: str) -> None:
        afterwards.later(self._started, method)

    def finished(self, method: str, route: str, status: int, seconds: float) -> None:
        afterwards.later(self._finished, method, route, status, seconds)

    # Counted by the thread that does requests' work after their answers (after_answer.py), in order.

    def _started(self, method: str) -> None:
        self._gauge(method).inc()

    def _finished(self, method: str, route: str, status: int, seconds: float) -> None:
        self._gauge(method).dec()
        key = (method, route, status)
        children = self._done.get(key)
        if children is None:
            labels = (method, route, status, self._exporter.app_name)
            children = (self._exporter.request_count.labels(*labels), self._exporter.request_time.labels(*labels))
            self._done[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def _gauge(self, method: str):
        gauge = self._in_progress.get(method)
        if gauge is None:
            gauge = self._in_progress[method] = self._exporter.requests_in_progress.labels(
                method, self._exporter.app_name
            )
        return gauge


class GRPCMetrics:
    """The gRPC call metrics MLServer's interceptor keeps (py-grpc-prometheus's: calls started, and handled by status
    code, by type, service and method; and how long each took), counted by the engine's own interceptor for unary
    calls (grpc/limits.py). MLServer's interceptor wrapped every call's handler anew and looked up three labelled
    children for it (a tiny call's CPU here: 1.50 ms with it, 1.46 ms counted this way, medians of 7 runs); and it
    counted a call as handled only when it returned, not when it was aborted with an error status. Here each child
    is looked up once, the counting is done after the answer (after_answer.py), and every call is counted as handled
    with the status it ended with."""

    GRPC_TYPE = "UNARY"

    def __init__(self, started: Any, handled: Any, seconds: Any):
        self._started_total, self._handled_total, self._seconds = started, handled, seconds
        self._by_method: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._by_code: dict[tuple[str, str, str], Any] = {}

    def started(self, service: str, method: str) -> None:
        afterwards.later(self._started, service, method)

    def finished(self, service: str, method: str, code: str, seconds: float) -> None:
        afterwards.later(self._finished, service, method, code, seconds)

    # Counted by the thread that does requests' work after their answers (after_answer.py), in order.

    def _started(self, service: str, method: str) -> None:
        self._children(service, method)[0].inc()

    def _finished(self, service: str, method: str, code: str, seconds: float) -> None:
        key = (service, method, code)
        handled = self._by_code.get(key)
        if handled is None:
            handled = self._by_code[key] = self._handled_total.labels(self.GRPC_TYPE, service, method, code)
        handled.inc()
        self._children(service, method)[1].observe(seconds)

    def _children(self, service: str, method: str) -> tuple[Any, Any]:
        children = self._by_method.get((service, method))
        if children is None:
            labels = (self.GRPC_TYPE, service, method)
            children = self._by_method[(service, method)] = (
                self._started_total.labels(*labels),
                self._seconds.labels(*labels),
            )
        return children


class StreamingCallsOnly(aio.ServerInterceptor):
    """MLServer's gRPC metrics interceptor for streaming calls only: unary calls pass by, counted by the engine's own
    interceptor in the same metrics (GRPCMetrics)."""

    def __init__(self, metrics: aio.ServerInterceptor):
        self._metrics = metrics

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or not (handler.request_streaming or handler.response_streaming):
            return handler

        async def found(_details):
            return handler

        return await self._metrics.intercept_service(found, handler_call_details)
