"""The runtime's own threads, which decode images and run predict: a request's work is queued to them, and a
predict that overruns CHARIOT_PREDICT_TIMEOUT has its thread written off and replaced (not the parallel worker
processes of server/workers.py)."""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass

from chariot_support.memory.budgets import StuckThreads


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
    """One request on its way through a worker thread, as the timeout sees it."""

    request_id: str | None
    deadline: float
    in_predict: bool = False
    overran: bool = False


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
