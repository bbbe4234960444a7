"""What a request leaves to be done once it is answered (its log line, its metrics), done by a thread of its own a
batch at a time, out of the event loop's way.

Done in the middle of serving, this work cost a tiny request about a quarter of its throughput here: the logging,
JSON and metrics code each time cold in the CPU's caches, and system calls that let another thread take the GIL
mid-request. Done in a batch, it costs a fraction of that."""

from __future__ import annotations

import asyncio
import atexit
import collections
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

logger = logging.getLogger("chariot_support")
T = TypeVar("T")

# Work waits at most this long for the rest of its batch.
BATCH_SECONDS = 0.02
# Work that may wait at once. Past it (stdout not read, say) the caller does its own at once, as it did before there
# was this thread: memory stays bounded, nothing is dropped.
MAX_PENDING = 10_000


class Afterwards:
    """The thread that does requests' work after their answers, BATCH_SECONDS after the first of a batch."""

    def __init__(self):
        self._batch_ends: list[Callable[[], object]] = []
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # a forked worker starts a thread of its own
        atexit.register(self.flush)  # before logging's own exit handler, which was registered first

    def _reset(self) -> None:
        self._pending: collections.deque = collections.deque()
        self._wake = threading.Event()
        self._woken = False  # the event is set: the same as _wake.is_set(), without a Python call each time
        self._lock = threading.Lock()  # one doer at a time: the thread, or flush() from elsewhere
        self._thread: threading.Thread | None = None

    def at_batch_end(self, work: Callable[[], object]) -> None:
        """`work()` after each batch (the log writes its lines at once)."""
        self._batch_ends.append(work)

    def later(self, work: Callable[..., object], *args) -> None:
        """`work(*args)`, soon, on the thread; at once, here, when MAX_PENDING are waiting (after the thread's batch,
        which may be waiting on stdout: so does the caller)."""
        if len(self._pending) >= MAX_PENDING:
            with self._lock:
                _do(work, args)
                self._end_batch()
            return
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="chariot-afterwards", daemon=True)
                    self._thread.start()
        self._pending.append((work, args))
        if not self._woken:  # the thread waits for a batch's first work: wake it (once a batch, not each time)
            self._woken = True
            self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(BATCH_SECONDS)
            self._wake.clear()  # work queued from here on sets it again, or is done by the flush below
            self._woken = False  # after the clear: work that saw it still True was queued before the flush
            self.flush()

    def flush(self) -> None:
        """Do all the work waiting now."""
        with self._lock:
            while self._pending:
                _do(*self._pending.popleft())
            self._end_batch()

    def snapshot(self, read: Callable[[], T]) -> T:
        """`read()` once the work waiting now is done, with no work done meanwhile: what it reads of what that work
        counts (Triton's statistics) holds every request answered so far, and is consistent."""
        with self._lock:
            while self._pending:
                _do(*self._pending.popleft())
            self._end_batch()
            return read()

    def _end_batch(self) -> None:
        for work in self._batch_ends:
            _do(work, ())


def _do(work: Callable[..., object], args: tuple) -> None:
    try:
        work(*args)
    except Exception:  # one failure must not stop the thread, nor the work after it
        logger.exception("a request's work after its answer failed: %s", getattr(work, "__qualname__", work))


afterwards = Afterwards()


class FlushedBeforeScrape:
    """ASGI middleware for the metrics app: the work of every request answered so far is done before a scrape reads
    the metrics (in a thread, so that the event loop never waits on the log's stdout)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            await asyncio.to_thread(afterwards.flush)
        await self.app(scope, receive, send)
