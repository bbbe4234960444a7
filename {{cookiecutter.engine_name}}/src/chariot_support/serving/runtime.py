"""The MLServer runtime that turns a chariot-v2-kserve request into a call of the author's predict and back."""

from __future__ import annotations

import asyncio
import gc
import importlib
import itertools
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import cv2
from mlserver import MLModel
from mlserver.types import InferenceRequest, InferenceResponse

from chariot_support.errors import (
    ChariotError,
    InvalidResult,
    ModelBusy,
    ModelLoadFailed,
    PredictFailed,
    PredictTimeout,
)
from chariot_support.model.base import ChariotModel
from chariot_support.model.image import Image
from chariot_support.model.tasks import TaskType, select, to_json, validate_results
from chariot_support.protocols import v2_rest as v2
from chariot_support.protocols.chariot_v2_kserve import parse_request
from chariot_support.protocols.images import decode_image
from chariot_support.protocols.limits import Limits
from chariot_support.protocols.request import Answer, Answered, ImageInput, ParsedRequest, Request
from chariot_support.serving.admission import MemoryBudget, Overloaded, StuckThreads
from chariot_support.serving.batching import Batcher, BatchSettings, batch_settings
from chariot_support.serving.copies import ModelCopies, copies_wanted, threads_per_call
from chariot_support.serving.logs import note_request_id
from chariot_support.settings import config

logger = logging.getLogger("chariot_support")
T = TypeVar("T")
R = TypeVar("R")


def import_model_class(path: str) -> type[ChariotModel]:
    module, _, name = path.partition(":")
    model_class = getattr(importlib.import_module(module), name)
    if not isinstance(getattr(model_class, "task_type", None), TaskType):
        raise TypeError(f"{path}.task_type must be one of {[t.value for t in TaskType]}")
    return model_class


def load_failure(model_class: type, model_dir: Path, exc: BaseException) -> str:
    """What to tell a person whose model did not load: its own error, and the folder when a file was missing."""
    message = f"{model_class.__name__}.load failed: {type(exc).__name__}: {exc}"
    if isinstance(exc, FileNotFoundError):
        message += (
            f". The model looks for its files in MODEL_DIR ({model_dir}"
            + ("" if model_dir.is_dir() else ", which does not exist")
            + "): set MODEL_DIR to the folder that holds them"
        )
    return message


def validate_explanations(explanations: Any, count: int) -> list[dict]:
    """Explanations go out as strict JSON, so each must be a JSON object of finite numbers."""
    if not isinstance(explanations, (list, tuple)) or len(explanations) != count:
        got = (
            f"a list of {len(explanations)}" if isinstance(explanations, (list, tuple)) else type(explanations).__name__
        )
        raise InvalidResult(f"explain must return one JSON object per image ({count}), got {got}")
    for index, explanation in enumerate(explanations):
        if not isinstance(explanation, dict):
            raise InvalidResult(f"explain returned a {type(explanation).__name__} for image {index}; return a dict")
        try:
            json.dumps(explanation, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidResult(f"explain returned an explanation for image {index} that is not JSON: {exc}") from None
    return list(explanations)


def engine_limits() -> Limits:
    """The request limits the engine's settings give."""
    chosen = config()
    return Limits(
        max_inputs=chosen.max_inputs, max_image_pixels=chosen.max_image_pixels, max_elements=chosen.max_elements
    )


class _Overran(Exception):
    """CHARIOT_PREDICT_TIMEOUT passed before the worker thread answered."""


def _settle(answer: asyncio.Future, job: Future) -> None:
    """Hand a finished job's result or error to the request waiting on `answer`, unless it already gave up."""
    if answer.done():
        return
    error = job.exception()
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(job.result())


def _expire(answer: asyncio.Future) -> None:
    if not answer.done():
        answer.set_exception(_Overran())


@dataclass
class _Call:
    """One request on its way through a worker thread, as the timeout sees it."""

    request_id: str | None
    deadline: float
    in_predict: bool = False
    overran: bool = False


class _Workers:
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


@dataclass(frozen=True)
class ServingPlan:
    """How the engine's settings have a model class served, worked out in one place: the runtime loads and runs the
    model so, and the engine states it in its start-up log line."""

    threads: int  # CHARIOT_THREADS: the threads that decode images and run predict
    copies: int
    thread_safe: bool
    inline: bool  # CHARIOT_PREDICT_INLINE
    batching: BatchSettings | None

    @classmethod
    def of(cls, model_class: type[ChariotModel]) -> ServingPlan:
        settings = config()
        return cls(
            threads=settings.threads,
            copies=copies_wanted(model_class, settings.threads, settings.model_copies),
            thread_safe=model_class.thread_safe,
            inline=settings.predict_inline,
            batching=batch_settings(settings),
        )

    @property
    def calls_at_once(self) -> int:
        """Predicts that may run at once: one per thread for a thread-safe model, one per copy otherwise."""
        return 1 if self.inline else self.threads if self.thread_safe else self.copies

    @property
    def pool_threads(self) -> int:
        # Decoding and most predict work release the GIL, so threads keep both cores busy. Requests waiting for
        # their batch hold a thread each, doing nothing: room for one batch in predict and the next gathering.
        waiting = 2 * self.batching.max_size if self.batching is not None else 0
        return 0 if self.inline else self.threads + waiting


class ChariotRuntime(MLModel):
    """Loads the author's ChariotModel and answers inference requests with it."""

    _batcher: Batcher | None = None  # batching across requests, when CHARIOT_MAX_BATCH_SIZE is above 1
    _inline = False  # decode and predict on the event loop (CHARIOT_PREDICT_INLINE)

    async def load(self) -> bool:
        extra = self.settings.parameters.extra if self.settings.parameters else {}
        model_class = import_model_class(extra["model_class"])
        self._task = model_class.task_type
        self._limits = engine_limits()
        plan = ServingPlan.of(model_class)
        self._inline = plan.inline
        model_dir = config().model_dir
        if not model_dir.is_dir():
            logger.warning(
                "MODEL_DIR is %s, which does not exist: the model loads with no files. If it reads weights or labels,"
                " set MODEL_DIR to the folder that holds them",
                model_dir,
            )
        # The runtime's threads already spread requests and images over the cores; OpenCV's own pool on top
        # spins for work and costs CPU per call. Set before load, so a model that wants it back can have it.
        cv2.setNumThreads(1)
        instances = []
        for _ in range(plan.copies):  # one after another: copies of a large model never all load at once
            instance = model_class()
            instance.threads = threads_per_call(plan.threads, plan.calls_at_once)  # predicts at once share the cores
            try:
                await asyncio.to_thread(instance.load, model_dir)
            except Exception as exc:
                message = load_failure(model_class, model_dir, exc)
                logger.error("%s", message, exc_info=exc)  # the model's own error, first and whole
                raise ModelLoadFailed(message) from None
            instances.append(instance)
        self._copies = ModelCopies(instances, shared=model_class.thread_safe)
        if plan.batching is not None:
            self._batcher = Batcher(
                lambda images, calls: self._predict(images, {}, calls),
                parallel=self._copies.count,
                **vars(plan.batching),
            )
        self._workers = _Workers(plan.pool_threads, StuckThreads(config().max_stuck_threads))
        self._budget = MemoryBudget(config(), self._limits)
        self._timeout = config().predict_timeout
        self._state_lock = threading.Lock()  # orders the timeout's view of a call against the call finishing
        where = f"from {model_dir}" if model_dir.is_dir() else f"without files ({model_dir} does not exist)"
        copies = "" if plan.thread_safe else f", {plan.copies} cop{'y' if plan.copies == 1 else 'ies'}"
        logger.info("loaded %s (%s%s) %s", model_class.__name__, self._task.value, copies, where)
        if self._inline:
            logger.warning(
                "CHARIOT_PREDICT_INLINE is on: each decode and predict runs on the event loop, one at a time;"
                " CHARIOT_PREDICT_TIMEOUT cannot stop a predict, and a slow one holds up every other request"
            )
        # What the imports and the model's load left behind lives as long as the process: out of the garbage
        # collector's full passes, which otherwise stop every thread for tens of milliseconds under load.
        gc.freeze()
        return True

    @property
    def stuck(self) -> bool:
        """Whether every copy of a model that is not thread-safe is held by a predict that overran its timeout, or
        CHARIOT_MAX_STUCK_THREADS threads are still inside predicts that overran."""
        return self._copies.stuck or self._workers.stuck.full

    async def unload(self) -> bool:
        workers = getattr(self, "_workers", None)  # none when the model failed to load
        if self._batcher is not None:
            self._batcher.stop()
        if workers is not None:
            workers.shutdown()
        return True

    async def answer(self, request: Request, request_id: str, explain: bool = False) -> Answered:
        """The runtime's one entry, for every protocol (pipeline.Pipeline.answer calls it, across parallel workers
        too): check the request, decode its images, predict, check and select the results, within
        CHARIOT_PREDICT_TIMEOUT."""
        note_request_id(request_id)  # a request that fails here is still logged under its id
        return await self._within_timeout(request_id, self._answer, request, request_id, explain)

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        """MLServer's own entry, kept for its API: the same answer, as MLServer's response object."""
        request = v2.request_from_model(payload)
        answered = await self.answer(request, payload.id or "", False)
        answer = Answer(answered, payload.id or "", self.name, self.version, {})
        return InferenceResponse.model_validate_json(v2.render(answer))

    async def _within_timeout(self, request_id: str | None, work, *args):
        """Run `work(*args, call)` on a worker thread; past CHARIOT_PREDICT_TIMEOUT the client gets a 504."""
        if self._workers.stuck.full:
            raise Overloaded(
                f"{self._workers.stuck.cap} predicts that overran CHARIOT_PREDICT_TIMEOUT are still running"
                " (CHARIOT_MAX_STUCK_THREADS); the engine takes requests again when one returns"
            )
        call = _Call(request_id, time.monotonic() + self._timeout)
        if self._inline:
            return work(*args, call)
        # One loop future, settled by the worker thread or by the timer, whichever comes first: a fraction of the
        # cost of wrap_future and wait_for, paid on every request.
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        job = self._workers.submit(work, *args, call)
        job.add_done_callback(lambda done: loop.call_soon_threadsafe(_settle, answer, done))
        timer = loop.call_later(self._timeout, _expire, answer)
        try:
            return await answer
        except asyncio.CancelledError:
            job.cancel()  # the request is gone: if its work has not started, it never will
            raise
        except _Overran:
            job.cancel()
            self._overran(job, call)
            raise PredictTimeout(
                f"predict did not return within {self._timeout:g} s (CHARIOT_PREDICT_TIMEOUT); if the model needs "
                "longer, raise CHARIOT_PREDICT_TIMEOUT, or send fewer or smaller images per request"
            ) from None
        finally:
            timer.cancel()

    def _overran(self, job: Future, call: _Call) -> None:
        logger.error("request %s: no answer within CHARIOT_PREDICT_TIMEOUT (%g s)", call.request_id, self._timeout)
        if job.running():
            self._workers.write_off(job)
        with self._state_lock:
            if call.in_predict and not self._copies.shared:
                # This call holds a copy that runs one predict at a time: count it out, rather than queue requests
                # behind a call that may never return. Readiness goes when every copy is out, and comes back when
                # one returns.
                call.overran = True
                self._copies.overran(+1)
                logger.error(
                    "request %s: predict is still running on one of %d model copies%s",
                    call.request_id,
                    self._copies.count,
                    "; the engine reports not ready until it returns" if self._copies.stuck else "",
                )

    def _call_model(self, call: _Call, method: str, *args):
        """The model's predict or explain on a free model instance (one call at a time per copy unless the model
        is thread-safe)."""
        if self._copies.stuck:
            raise ModelBusy(
                f"every copy of the model is still inside a predict that overran CHARIOT_PREDICT_TIMEOUT "
                f"({self._timeout:g} s), and each runs one predict at a time; retry later"
            )
        instance = self._copies.acquire(call.deadline)
        if instance is None:
            raise PredictTimeout(f"the model was busy for all of CHARIOT_PREDICT_TIMEOUT ({self._timeout:g} s)")
        with self._state_lock:
            call.in_predict = True
        try:
            return getattr(instance, method)(*args)
        finally:
            with self._state_lock:
                call.in_predict = False
                self._copies.release(instance)
                if call.overran:
                    self._copies.overran(-1)
                    logger.warning(
                        "request %s: the overrunning predict returned; its model copy serves again", call.request_id
                    )

    def _map(self, work: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """`work` of each item in order, spread over the runtime's threads.

        The calling thread is one of those threads, so it never just waits: it runs the first item, then every
        item no other thread has started yet. When every thread is busy with a request, it does all the work
        itself instead of deadlocking the pool.
        """
        if len(items) < 2 or self._inline:
            return [work(item) for item in items]
        futures = [self._workers.submit(work, item) for item in items[1:]]
        try:
            results = [work(items[0])]
            for item, future in zip(items[1:], futures, strict=True):
                results.append(work(item) if future.cancel() else future.result())
            return results
        finally:
            for future in futures:
                future.cancel()

    def _decode(self, image: ImageInput, call: _Call):
        # A request whose client already had its 504 decodes nothing more.
        if time.monotonic() > call.deadline:
            raise PredictTimeout(f"the request ran out of CHARIOT_PREDICT_TIMEOUT ({self._timeout:g} s) while decoding")
        return decode_image(image.encoded, image.where, self._limits, image.item)

    def _answer(self, request: Request, request_id: str, explain: bool, call: _Call) -> Answered:
        parsed = parse_request(request, self._task, self._limits)
        with self._budget.admit(parsed.images, call.deadline):
            images, chosen = self._results(parsed, call)
            explanations = self._explain(images, parsed, chosen, request_id, call) if explain else None
        return Answered(
            names=tuple(i.name for i in parsed.images),
            results=tuple(to_json(results) for results in chosen),
            image_metadata=tuple(i.metadata for i in parsed.images),
            metadata=parsed.metadata,
            explanations=None if explanations is None else tuple(explanations),
        )

    def _results(self, request: ParsedRequest, call: _Call) -> tuple[list[Image], list[list[Any]]]:
        """Decode, predict, check and select: each image's results as the engine answers them."""
        pixels = self._map(lambda i: self._decode(i, call), request.images)
        images = [
            Image(
                name=i.name,
                pixels=p,
                action=i.action,
                score_threshold=i.score_threshold,
                prompts=i.prompts,
                parameters=i.parameters,
            )
            for i, p in zip(request.images, pixels, strict=True)
        ]
        if self._batcher is not None and not request.tensors:
            checked = self._batcher.predict(images, call)  # maybe in one predict with other requests' images
        else:
            checked = self._predict(images, request.tensors, [call])
        chosen = [
            select(
                self._task, per_image, action=image.action, score_threshold=image.score_threshold, prompts=image.prompts
            )
            for image, per_image in zip(request.images, checked, strict=True)
        ]
        return images, chosen

    def _predict(self, images: list[Image], tensors: Mapping[str, Any], calls: list[_Call]) -> list[list[Any]]:
        """Predict, as the first of `calls` (more than one when requests are batched), and check the results."""

        def who() -> str:
            return f"request{'s' if len(calls) > 1 else ''} {', '.join(str(c.request_id) for c in calls)}"

        try:
            results = self._call_model(calls[0], "predict", images, tensors)
        except ChariotError:
            raise
        except Exception as exc:
            logger.exception("predict failed for %s", who())
            raise PredictFailed(f"predict failed: {type(exc).__name__}: {exc}") from None
        try:
            return validate_results(self._task, results, [i.name for i in images])
        except InvalidResult as error:
            logger.error("predict returned an invalid result for %s: %s", who(), error)
            raise

    def _explain(
        self, images: list[Image], request: ParsedRequest, chosen: list[list[Any]], request_id: str, call: _Call
    ) -> list[dict]:
        try:
            explanations = self._call_model(call, "explain", images, request.tensors, chosen)
        except ChariotError:
            raise
        except Exception as exc:
            logger.exception("explain failed for request %s", request_id)
            raise PredictFailed(f"explain failed: {type(exc).__name__}: {exc}") from None
        return validate_explanations(explanations, len(images))
