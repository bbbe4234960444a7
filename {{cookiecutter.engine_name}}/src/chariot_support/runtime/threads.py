"""The runtime's own threads, which decode images and run predict: a request's work is queued to them, and a
predict that overruns CHARIOT_PREDICT_TIMEOUT has its thread written off and replaced (not the parallel worker
processes of server/workers.py)."""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import weakref
from concurrent.futures import Future
from dataclasses import dataclass

_COUNTERS: weakref.WeakSet[StuckThreads] = weakref.WeakSet()


def threads_still_stuck() -> int:
    """Threads of this process still inside a predict that overran its timeout."""
    return sum(counter.count for counter in list(_COUNTERS))


class StuckThreads:
    """Counts the threads written off to predicts that overran their timeout. Below the cap each is replaced; at
    the cap the engine stops taking requests (not ready, 503) until one returns, so threads stay bounded."""

    def __init__(self, cap: int):
        self.cap = cap
        self._count = 0
        self._owed = 0  # written-off threads not replaced, because the cap was reached
        self._lock = threading.Lock()
        _COUNTERS.add(self)

    @property
    def count(self) -> int:
        return self._count

    @property
    def full(self) -> bool:
        return self._count >= self.cap

    def written_off(self) -> bool:
        """Count one more stuck thread; whether a replacement may start."""
        with self._lock:
            self._count += 1
            if self._count <= self.cap:
                return True
            self._owed += 1
            return False

    def returned(self) -> bool:
        """A stuck thread's predict returned; whether that thread should stay on as a worker in place of one
        that was never replaced."""
        with self._lock:
            self._count -= 1
            if self._owed:
                self._owed -= 1
                return True
            return False


class Overran(Exception):
    """CHARIOT_PREDICT_TIMEOUT passed before the worker thread answered."""


def settle(answer: asyncio.Future, job: Future) -> None:
    """Hand a finished job's result or error to the request waiting on `answer`, unless it already gave up."""
    if answer.done():
        return
    error = job.exception()
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(job.result())


def expire(answer: asyncio.Future) -> None:
    if not answer.done():
        answer.set_exception(Overran())


@dataclass
class Call:
    """One request on its way through a worker thread, as the timeout sees it, and the times (time.monotonic()) the
    runtime takes its stages from: when it arrived, when its images were decoded, and the model's call that served
    it (began, ended, images in the call, whether this request's call ran it)."""

    request_id: str | None
    deadline: float
    started: float = 0.0
    in_predict: bool = False
    overran: bool = False
    abandoned: bool = False  # its caller gave up (a gRPC deadline passed, the client went away): never predicted
    decoded: float = 0.0
    model_call: tuple[float, float] = (0.0, 0.0)  # the last call of the model made as this request: began, ended
    predicted: tuple[float, float, int, bool] | None = None  # the predict that served it, batched or not
    explained: float = 0.0  # seconds in the model's explain


class Threads:
    """The daemon threads that decode images and run predict.

    Python cannot stop a thread from outside, so a predict that overruns CHARIOT_PREDICT_TIMEOUT keeps its thread
    until it returns by itself. That thread is written off: a new one takes its place, so the others keep being
    served, and the old one leaves when its predict returns. Daemon threads, so that a predict that never returns
    does not keep the process alive after SIGTERM.
    """

    def __init__(self, size: int, stuck: StuckThreads):
        self._size = size
        self.stuck = stuck
        self._started = itertools.count()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(size):
            self._start()

    def _start(self) -> None:
        threading.Thread(target=self._work, name=f"chariot-{next(self._started)}", daemon=True).start()

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        self._jobs.put((future, fn, args))
        return future

    def write_off(self, future: Future) -> None:
        future.written_off = True
        if self.stuck.written_off():
            self._start()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue  # its request timed out while it waited in the queue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:
                future.set_exception(exc)
            if getattr(future, "written_off", False) and not self.stuck.returned():
                return
            # An idle thread would otherwise hold its last request (body, images, answer) until the next one came.
            del job, future, fn, args

    def shutdown(self) -> None:
        for _ in range(self._size):
            self._jobs.put(None)
