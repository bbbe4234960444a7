"""Refusals the engine makes before a request reaches the model (REST connections cut for their clients' slowness,
gRPC calls past a limit...), counted by reason in a counter of the metrics server, and summed up in the log once an
interval, so that thousands of them cost a few lines."""

from __future__ import annotations

import asyncio
import functools
from collections import Counter

LOG_EVERY = 10.0  # seconds between the log lines that sum refusals up


@functools.cache
def refusal_counter(metric: str, documentation: str):
    """The metrics server's counter `metric`, by reason. Made on first use, once MLServer has chosen the registry's
    storage (one process, or parallel workers)."""
    from prometheus_client import REGISTRY
    from prometheus_client import Counter as PrometheusCounter

    return PrometheusCounter(metric, documentation, ["reason"], registry=REGISTRY)


class Refusals:
    """Refusals of one kind, by reason: each counted in the metrics server's `counter()`, and written in the log by
    `summary`, once an interval (`every` seconds) with the counts since, while there are any. A kind whose refusals
    are few and telling writes the first after a quiet interval at once, on a line of its own (`first_line`)."""

    def __init__(self, counter, every: float = LOG_EVERY):
        self.counter = counter
        self.every = every
        self.pending: Counter[str] = Counter()
        self._timer: asyncio.TimerHandle | None = None

    def refused(self, reason: str, message: str = "", loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Count one refusal (event loop only)."""
        self.counter().labels(reason).inc()
        if self._timer is None:
            self._timer = (loop or asyncio.get_running_loop()).call_later(self.every, self._write)
            if self.first_line(reason, message):
                return
        self.pending[reason] += 1

    def first_line(self, reason: str, message: str) -> bool:
        """Write the first refusal after a quiet interval on a line of its own; whether it did (by default it is
        counted in the next summary instead)."""
        return False

    def summary(self, counts: Counter[str]) -> None:
        """Write the log line of the refusals counted in the last interval."""
        raise NotImplementedError

    def _write(self) -> None:
        self._timer = None
        if self.pending:
            counts, self.pending = self.pending, Counter()
            self.summary(counts)
            self._timer = asyncio.get_running_loop().call_later(self.every, self._write)
