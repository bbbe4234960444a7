"""Batching across requests: the images of requests that arrive together go to the model in one predict call.

Off unless CHARIOT_MAX_BATCH_SIZE is above 1. It pays for a model whose call has a fixed cost whatever the number
of images (a GPU model: the kernel launches and the copy to the device), and costs a little latency otherwise.

Each request still runs on its own worker thread. The first request to find no batch gathering starts one and
leads it: it waits until the batch holds CHARIOT_MAX_BATCH_SIZE images, or CHARIOT_MAX_BATCH_WAIT_MS has passed,
then for the model (one batch predicts at a time per model copy; the batch keeps gathering meanwhile), then runs
predict on the images of every request in the batch, in the order they joined, and hands each request its own
slice of the results. The others wait for their slice. A request is never split across calls: one that
does not fit in the gathering batch sends that batch on its way and starts the next, and one with as many images
as a batch holds goes alone. Requests with tensors (non-image inputs) are not batched: predict takes one set of
tensors per call.

Each image keeps its own name, pixels, action, score_threshold, prompts and parameters, and the engine applies
them to each image's results after predict, as without batching. If predict raises or returns an invalid result,
every request of that batch gets the error. A request whose CHARIOT_PREDICT_TIMEOUT runs out while it waits gets
its 504, and its images are not predicted if its batch has not started yet.

Prometheus (the metrics port, 8082) counts what batching does: `chariot_batch_size`, the images of each predict call
it makes, and `chariot_batch_wait_seconds`, how long each request waited for its batch to go to the model.
"""

from __future__ import annotations

import copy
import functools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import Histogram

from chariot_support.errors import PredictTimeout
from chariot_support.settings import EngineSettings


class Call(Protocol):
    """What the batcher needs of a request on its way: when its client stops waiting (time.monotonic())."""

    deadline: float


# predict(images, calls): run the model on `images` (a batch, in order) for the requests on their way in `calls`,
# as the first one's call (its model copy, its deadline), and return one checked result list per image.
Predict = Callable[[list[Any], list[Any]], Sequence[Any]]


@dataclass(frozen=True)
class BatchSettings:
    max_size: int
    max_wait: float  # seconds


@functools.cache
def _metrics() -> tuple[Histogram, Histogram]:
    """The batch-size and queue-wait histograms, made on first use: by then MLServer has set Prometheus up for its
    parallel workers, whose values it collects from files."""
    sizes = Histogram(
        "chariot_batch_size",
        "Images in each predict call made by batching across requests",
        buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    )
    waits = Histogram(
        "chariot_batch_wait_seconds",
        "Seconds a request waited for its batch to go to the model",
        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    )
    return sizes, waits


def batch_settings(settings: EngineSettings) -> BatchSettings | None:
    """The batching the engine's settings ask for; None when it is off (CHARIOT_MAX_BATCH_SIZE 1, the default)."""
    if settings.max_batch_size <= 1:
        return None
    return BatchSettings(settings.max_batch_size, settings.max_batch_wait_ms / 1000)


@dataclass(eq=False)
class _Entry:
    """One request's images in a batch, and what came back for them."""

    images: list[Any]
    call: Any
    done: threading.Event = field(default_factory=threading.Event)
    results: list[Any] | None = None
    error: BaseException | None = None
    taken: bool = False  # its images went into predict
    joined: float = field(default_factory=time.monotonic)
    gone: bool = False  # its request timed out before they did

    def outcome(self) -> list[Any]:
        if self.error is not None:
            # Each request raises its own copy: one exception raised on several threads would share a traceback.
            try:
                error = copy.copy(self.error)
            except Exception:
                error = self.error
            raise error.with_traceback(None)
        assert self.results is not None
        return self.results


@dataclass(eq=False)
class _Batch:
    ready: threading.Condition
    entries: list[_Entry] = field(default_factory=list)
    images: int = 0
    closed: bool = False


class Batcher:
    """Gathers the images of concurrent requests into predict calls of at most `max_size` images, waiting at most
    `max_wait` seconds for a batch to fill, and splits the results back to each request in order. At most
    `parallel` batches predict at once (one per model copy); the next keeps gathering meanwhile. A batch whose
    predict outlives the deadline of every request in it no longer counts: its clients have had their 504, and a
    hung predict must not hold up the batches after it (the runtime writes off its thread and model copy)."""

    def __init__(self, predict: Predict, max_size: int, max_wait: float, parallel: int = 1):
        self.max_size = max_size
        self.max_wait = max_wait
        self._predict = predict
        self._parallel = parallel
        self._lock = threading.Lock()
        self._turns = threading.Condition(self._lock)  # a batch finished predicting
        self._predicting: dict[_Batch, float] = {}  # each batch in predict, and its last request's deadline
        self._gathering: _Batch | None = None
        self._stopped = False
        self._sizes, self._waits = _metrics()

    def predict(self, images: Sequence[Any], call: Any) -> list[Any]:
        """One checked result list per image of one request, from a predict call it may share with others."""
        entry = _Entry(list(images), call)
        if len(entry.images) >= self.max_size:  # a batch of its own
            return self._alone(entry)
        with self._lock:
            if self._stopped:
                batch = None
            else:
                batch = self._gathering
                if batch is not None and batch.images + len(entry.images) > self.max_size:
                    self._close(batch)  # it will not fit: the gathering batch goes now, this one starts the next
                    batch = None
                leads = batch is None
                if batch is None:
                    batch = self._gathering = _Batch(threading.Condition(self._lock))
                batch.entries.append(entry)
                batch.images += len(entry.images)
                if batch.images >= self.max_size:
                    self._close(batch)
        if batch is None:
            return self._alone(entry)
        if leads:
            self._lead(batch, entry)
        else:
            self._follow(batch, entry)
        return entry.outcome()

    def stop(self) -> None:
        """Send the gathering batch on its way at once; requests from now on go alone."""
        with self._lock:
            self._stopped = True
            if self._gathering is not None:
                self._close(self._gathering)

    def _close(self, batch: _Batch) -> None:
        """Close `batch` to newcomers and wake its leader (with the lock held)."""
        batch.closed = True
        if self._gathering is batch:
            self._gathering = None
        batch.ready.notify_all()

    def _lead(self, batch: _Batch, entry: _Entry) -> None:
        # Gather until the batch is full or the wait is over; never past the leader's own deadline, when its client
        # has had its 504 (the batch then goes as the next request's call).
        end = min(time.monotonic() + self.max_wait, entry.call.deadline)
        with self._lock:
            while not batch.closed and (left := end - time.monotonic()) > 0:
                batch.ready.wait(left)
        # Then wait for the model: while the batches before this one predict, it keeps gathering up to max_size.
        live = self._wait_for_model(batch)
        if not live:
            return
        try:
            self._run(live)
        finally:
            with self._lock:
                self._predicting.pop(batch, None)
                self._turns.notify_all()

    def _wait_for_model(self, batch: _Batch) -> list[_Entry]:
        """Take a turn at the model for `batch`, close it, and return its requests still in time; none when every
        request in it ran out of time first (they get their 504)."""
        with self._lock:
            while True:
                now = time.monotonic()
                latest = max((m.call.deadline for m in batch.entries if not m.gone), default=0.0)
                if latest <= now:
                    self._close(batch)
                    self._take(batch)
                    return []
                predicting = [deadline for deadline in self._predicting.values() if deadline > now]
                if len(predicting) < self._parallel:
                    self._close(batch)
                    live = self._take(batch)
                    if live:
                        self._predicting[batch] = max(member.call.deadline for member in live)
                    return live
                # Look again when a batch finishes, one in predict runs out of time, or this one does (requests
                # that joined meanwhile may give it longer).
                self._turns.wait(min(min(predicting), latest) - now)

    def _take(self, batch: _Batch) -> list[_Entry]:
        """The requests of a closed batch still in time (with the lock held); the others get their 504."""
        now = time.monotonic()
        live = []
        for member in batch.entries:
            if member.gone:
                continue
            if member.call.deadline <= now:  # timed out while it waited: its images are not predicted
                member.gone = True
                member.error = PredictTimeout(
                    "the request ran out of CHARIOT_PREDICT_TIMEOUT while it waited for a batch"
                    " (CHARIOT_MAX_BATCH_WAIT_MS)"
                )
                member.done.set()
                continue
            member.taken = True
            live.append(member)
        return live

    def _alone(self, entry: _Entry) -> list[Any]:
        self._sizes.observe(len(entry.images))
        self._waits.observe(0)
        return list(self._predict(entry.images, [entry.call]))

    def _run(self, live: list[_Entry]) -> None:
        """Predict the images of `live` in one call, and hand each request its results, or the error."""
        images = [image for member in live for image in member.images]
        now = time.monotonic()
        self._sizes.observe(len(images))
        for member in live:
            self._waits.observe(now - member.joined)
        try:
            results = list(self._predict(images, [member.call for member in live]))
            if len(results) != len(images):
                raise RuntimeError(f"a batch of {len(images)} images got {len(results)} result lists")
        except BaseException as exc:
            for member in live:
                member.error = exc
                member.done.set()
            return
        start = 0
        for member in live:
            member.results = results[start : start + len(member.images)]
            start += len(member.images)
            member.done.set()

    def _follow(self, batch: _Batch, entry: _Entry) -> None:
        if entry.done.wait(max(0.0, entry.call.deadline - time.monotonic())):
            return
        with self._lock:
            if entry.done.is_set():
                return
            if not entry.taken:
                entry.gone = True  # its leader will leave its images out, and they leave room for others
                batch.images -= len(entry.images)
        raise PredictTimeout(
            "predict did not return within CHARIOT_PREDICT_TIMEOUT for this request's batch"
            if entry.taken
            else "the request ran out of CHARIOT_PREDICT_TIMEOUT while it waited for a batch (CHARIOT_MAX_BATCH_WAIT_MS)"
        )
