"""The stages as Prometheus histograms, `chariot_request_stage_seconds{stage=...}`: one label, the stage, with one of
eight values. Counted in the process the transports live in, so that every parallel worker's requests are counted the
same; served on the metrics port after MLServer's own metrics.

Not prometheus_client's Histogram, whose observe took 2.1 us here (a lock per value, and files with parallel
workers): eight of them were 2 % of a tiny request's CPU, and a bisect per stage in Python still 3.9 us. Each
request's stages are kept as they came with the rest of what Triton's statistics count (triton/statistics.py), and
counted into the buckets by numpy a few thousand at a time, or when a scrape reads them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import HistogramMetricFamily

from chariot_support.stages.timing import STAGES

NAME = "chariot_request_stage_seconds"
HELP = "Seconds each answered inference request spent in each stage (read, admission, parse, queue, decode, predict, results, write)"
# From a tenth of a millisecond (reading a small body) to a minute (CHARIOT_PREDICT_TIMEOUT's default).
BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class StageHistograms:
    """One histogram per stage, counted by Triton's statistics (triton/statistics.py) as they fold the requests they
    were handed, and read by a scrape once those have folded every request answered so far (`before_read`)."""

    def __init__(self, buckets: tuple[float, ...] = BUCKETS):
        self.buckets = buckets
        self._bounds = np.array(buckets) * 1000  # the stages come in milliseconds
        self._width = len(buckets) + 1  # the last bucket: above every bound
        self._counts = np.zeros(len(STAGES) * self._width, np.int64)
        self._sums = np.zeros(len(STAGES))
        self.before_read: Callable[[], object] = lambda: None  # the statistics' fold
        self._lock = threading.Lock()  # counted by the statistics' fold, read by a scrape
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self)

    def count(self, ms: np.ndarray) -> None:
        """Count requests' stages: one row a request, in STAGES' order, in milliseconds (called under the
        statistics' lock)."""
        where = np.searchsorted(self._bounds, ms, side="left") + np.arange(len(STAGES)) * self._width
        counts = np.bincount(where.ravel(), minlength=self._counts.size)
        with self._lock:
            self._counts += counts
            self._sums += ms.sum(axis=0)

    def collect(self) -> Iterable[HistogramMetricFamily]:
        self.before_read()
        with self._lock:
            counts = self._counts.reshape(len(STAGES), self._width).cumsum(axis=1)
            seconds = (self._sums / 1000).tolist()
        family = HistogramMetricFamily(NAME, HELP, labels=["stage"])
        bounds = [*(repr(float(b)) for b in self.buckets), "+Inf"]
        for stage, cumulative, total in zip(STAGES, counts.tolist(), seconds, strict=True):
            family.add_metric([stage], list(zip(bounds, cumulative, strict=True)), total)
        yield family

    def exposition(self) -> bytes:
        """The histograms in Prometheus' text format."""
        return generate_latest(self._registry)


class WithStageHistograms:
    """ASGI middleware for the metrics app: a scrape of `path` (MLServer's metrics endpoint) gets the stage
    histograms after MLServer's own metrics, in the same text format. They are kept in the main process whether or
    not MLServer collects its metrics from parallel workers' files, so they are added to its answer rather than to
    its registry."""

    def __init__(self, app, *, histograms: StageHistograms, path: str):
        self.app = app
        self.histograms = histograms
        self.path = path

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") != self.path:
            return await self.app(scope, receive, send)
        start: dict | None = None
        parts: list[bytes] = []

        async def held(message):
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                return await send(message)
            parts.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(parts)
            if start["status"] == 200:
                body += self.histograms.exposition()
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", b"%d" % len(body))]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, held)
