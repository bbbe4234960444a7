"""MLServer's REST metrics as the engine keeps them for the requests it answers itself: starlette_exporter's
middleware, found in MLServer's app by walking Starlette's chain of middlewares (each holds the next as `.app`, by
convention, not by contract). `tests/support/test_internals.py` holds the canary."""

from __future__ import annotations

from typing import Any

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
