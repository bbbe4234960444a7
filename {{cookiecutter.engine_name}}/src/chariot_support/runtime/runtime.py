"""The MLServer runtime every engine serves: it loads the author's model and answers each checked request the pipeline
sends it, whatever its protocol: its images decoded within the decode budget, predict (in a batch with other
requests' images when batching is on), the results checked, kept inside the image and selected, all within
CHARIOT_PREDICT_TIMEOUT."""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import cv2
from mlserver import MLModel

from chariot_support.errors import (
    ChariotError,
    InvalidResult,
    ModelBusy,
    ModelLoadFailed,
    Overloaded,
    PredictFailed,
    PredictTimeout,
)
from chariot_support.logs import model_output
from chariot_support.logs.model_output import capture_output
from chariot_support.logs.request_lines import HANDLER_NAME, note_request_id
from chariot_support.memory.budgets import MemoryBudget
from chariot_support.model.base import ChariotModel, missing_file
from chariot_support.model.clipping import inside_image
from chariot_support.model.image import Image
from chariot_support.model.tasks import TaskType, select, to_json, validate_results
from chariot_support.protocols.images import decode_pixels
from chariot_support.protocols.request import Answered, ImageInput, ParsedRequest
from chariot_support.runtime.batching import Batcher
from chariot_support.runtime.copies import ModelCopies, threads_per_call
from chariot_support.runtime.plan import ServingPlan
from chariot_support.runtime.threads import Call, Overran, StuckThreads, Threads, expire, settle
from chariot_support.runtime.warmup import warm_up
from chariot_support.settings import EngineSettings
from chariot_support.stages.timing import RuntimeStages

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
    if missing_file(exc):
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


class ChariotRuntime(MLModel):
    """Loads the author's ChariotModel and answers inference requests with it."""

    _batcher: Batcher | None = None  # batching across requests, when CHARIOT_MAX_BATCH_SIZE is above 1
    _inline = False  # decode and predict on the event loop (CHARIOT_PREDICT_INLINE)

    async def load(self) -> bool:
        if multiprocessing.parent_process() is not None:  # a parallel worker: its print and stderr lines as JSON lines
            capture_output(HANDLER_NAME)  # (the main process has them since server/server.py started)
        extra = self.settings.parameters.extra if self.settings.parameters else {}
        model_class = import_model_class(extra["model_class"])
        settings = EngineSettings.from_json(extra["engine_settings"])
        self._task = model_class.task_type
        plan = ServingPlan.of(model_class, settings)
        self._inline = plan.inline
        model_dir = settings.model_dir
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
        try:
            warmed = await asyncio.to_thread(warm_up, instances, self._task, settings)
        except ModelLoadFailed as failure:
            logger.error("%s", failure, exc_info=failure.__cause__)
            raise
        if warmed is not None:
            logger.info(
                "warmed up %s: %d predict calls (batch sizes %s) on %d cop%s in %.2f s, with %s",
                model_class.__name__,
                warmed["calls"],
                ", ".join(map(str, warmed["batch_sizes"])),
                warmed["copies"],
                "y" if warmed["copies"] == 1 else "ies",
                warmed["seconds"],
                warmed["source"],
                extra={"fields": {"warmup": warmed}},
            )
        self._copies = ModelCopies(instances, shared=model_class.thread_safe)
        if plan.batching is not None:
            self._batcher = Batcher(
                lambda images, calls: self._predict(images, {}, calls),
                parallel=self._copies.count,
                **vars(plan.batching),
            )
        self._threads = Threads(plan.pool_threads, StuckThreads(settings.max_stuck_threads))
        self._budget = MemoryBudget(settings)
        self._timeout = settings.predict_timeout
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
        return self._copies.stuck or self._threads.stuck.full

    async def unload(self) -> bool:
        threads = getattr(self, "_threads", None)  # none when the model failed to load
        if self._batcher is not None:
            self._batcher.stop()
        if threads is not None:
            threads.shutdown()
        return True

    async def answer(self, request: ParsedRequest, request_id: str, explain: bool = False) -> Answered:
        """The runtime's one entry, for every protocol (pipeline.Pipeline.answer calls it, across parallel workers
        too), with a request checked whole as it was read (protocols/chariot_v2_kserve.parse_request): decode its
        images' pixels, predict, check and select the results, within CHARIOT_PREDICT_TIMEOUT."""
        note_request_id(request_id)  # a request that fails here is still logged under its id
        return await self._within_timeout(request_id, self._answer, request, request_id, explain)

    async def _within_timeout(self, request_id: str | None, work, *args):
        """Run `work(*args, call)` on a worker thread; past CHARIOT_PREDICT_TIMEOUT the client gets a 504."""
        if self._threads.stuck.full:
            raise Overloaded(
                f"{self._threads.stuck.cap} predicts that overran CHARIOT_PREDICT_TIMEOUT are still running"
                " (CHARIOT_MAX_STUCK_THREADS); the engine takes requests again when one returns"
            )
        now = time.monotonic()
        call = Call(request_id, now + self._timeout, now)
        if self._inline:
            return work(*args, call)
        # One loop future, settled by the worker thread or by the timer, whichever comes first: a fraction of the
        # cost of wrap_future and wait_for, paid on every request.
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        job = self._threads.submit(work, *args, call)
        job.add_done_callback(lambda done: loop.call_soon_threadsafe(settle, answer, done))
        timer = loop.call_later(self._timeout, expire, answer)
        try:
            return await answer
        except asyncio.CancelledError:
            call.abandoned = True  # work already on a thread, waiting for a model copy, stops before predict
            job.cancel()  # the request is gone: if its work has not started, it never will
            raise
        except Overran:
            job.cancel()
            self._overran(job, call)
            raise PredictTimeout(
                f"predict did not return within {self._timeout:g} s (CHARIOT_PREDICT_TIMEOUT); if the model needs "
                "longer, raise CHARIOT_PREDICT_TIMEOUT, or send fewer or smaller images per request"
            ) from None
        finally:
            timer.cancel()

    def _overran(self, job: Future, call: Call) -> None:
        logger.error("request %s: no answer within CHARIOT_PREDICT_TIMEOUT (%g s)", call.request_id, self._timeout)
        if job.running():
            self._threads.write_off(job)
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

    def _call_model(self, call: Call, method: str, *args, calls: Sequence[Call] = ()):
        """The model's predict or explain on a free model instance (one call at a time per copy unless the model
        is thread-safe), as `call`, for `calls` (its batch; `call` alone when not batched)."""
        if self._copies.stuck:
            raise ModelBusy(
                f"every copy of the model is still inside a predict that overran CHARIOT_PREDICT_TIMEOUT "
                f"({self._timeout:g} s), and each runs one predict at a time; retry later"
            )
        instance = self._copies.acquire(call.deadline)
        if instance is None:
            raise PredictTimeout(f"the model was busy for all of CHARIOT_PREDICT_TIMEOUT ({self._timeout:g} s)")
        if all(c.abandoned for c in calls or [call]):  # every caller gave up while it waited: nobody would read it
            self._copies.release(instance)
            raise asyncio.CancelledError
        with self._state_lock:
            call.in_predict = True
        began = time.monotonic()
        try:
            return getattr(instance, method)(*args)
        finally:
            call.model_call = (began, time.monotonic())
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
        futures = [self._threads.submit(work, item) for item in items[1:]]
        try:
            results = [work(items[0])]
            for item, future in zip(items[1:], futures, strict=True):
                results.append(work(item) if future.cancel() else future.result())
            return results
        finally:
            for future in futures:
                future.cancel()

    def _decode(self, image: ImageInput, call: Call):
        # A request whose client already had its 504 decodes nothing more.
        if time.monotonic() > call.deadline:
            raise PredictTimeout(f"the request ran out of CHARIOT_PREDICT_TIMEOUT ({self._timeout:g} s) while decoding")
        return decode_pixels(image.encoded, image.kind, image.where, image.item)  # checked as it was read

    def _answer(self, parsed: ParsedRequest, request_id: str, explain: bool, call: Call) -> Answered:
        began = time.monotonic()
        with self._budget.admit(parsed.decoded_bytes, call.deadline):
            admitted = time.monotonic()
            images, chosen = self._results(parsed, call)
            explanations = self._explain(images, parsed, chosen, request_id, call) if explain else None
        results = tuple(to_json(results) for results in chosen)
        ended = time.monotonic()
        predict_began, predict_ended, batch, executed = call.predicted
        # The stages follow each other: waiting for this thread, for room to decode, decoding, waiting for a model
        # copy or a batch, the model's call (and explain's), and from its end to the formatted answer.
        # (Made with tuple.__new__: a NamedTuple's own constructor is a Python call, paid on every request.)
        stages = tuple.__new__(
            RuntimeStages,
            (
                (began - call.started) + (predict_began - call.decoded),  # queue
                admitted - began,  # admission
                call.decoded - admitted,  # decode
                predict_ended - predict_began + call.explained,  # predict
                ended - predict_ended - call.explained,  # results
                ended - call.started,  # seconds
                len(parsed.images),  # images
                batch,
                executed,
            ),
        )
        return Answered(
            names=tuple(i.name for i in parsed.images),
            results=results,
            image_metadata=tuple(i.metadata for i in parsed.images),
            metadata=parsed.metadata,
            explanations=None if explanations is None else tuple(explanations),
            stages=stages,
        )

    def _results(self, request: ParsedRequest, call: Call) -> tuple[list[Image], list[list[Any]]]:
        """Decode, predict, check and select: each image's results as the engine answers them."""
        pixels = self._map(lambda i: self._decode(i, call), request.images)
        call.decoded = time.monotonic()
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

    def _predict(self, images: list[Image], tensors: Mapping[str, Any], calls: list[Call]) -> list[list[Any]]:
        """Predict, as the first of `calls` (more than one when requests are batched), and check the results."""

        def who() -> str:
            return f"request{'s' if len(calls) > 1 else ''} {', '.join(str(c.request_id) for c in calls)}"

        try:
            with model_output.serving([c.request_id for c in calls]):
                results = self._call_model(calls[0], "predict", images, tensors, calls=calls)
            # The call's time is every request's in it; it ran as the first, which counts it once.
            began, ended = calls[0].model_call
            calls[0].predicted = (began, ended, len(images), True)
            for other in calls[1:]:
                other.predicted = (began, ended, len(images), False)
        except ChariotError:
            raise
        except Exception as exc:
            logger.exception("predict failed for %s", who())
            raise PredictFailed(f"predict failed: {type(exc).__name__}: {exc}") from None
        try:
            checked = validate_results(self._task, results, [i.name for i in images])
        except InvalidResult as error:
            logger.error("predict returned an invalid result for %s: %s", who(), error)
            raise
        return [inside_image(self._task, r, i.width, i.height) for r, i in zip(checked, images, strict=True)]

    def _explain(
        self, images: list[Image], request: ParsedRequest, chosen: list[list[Any]], request_id: str, call: Call
    ) -> list[dict]:
        try:
            with model_output.serving([request_id]):
                explanations = self._call_model(call, "explain", images, request.tensors, chosen)
            call.explained = call.model_call[1] - call.model_call[0]
        except ChariotError:
            raise
        except Exception as exc:
            logger.exception("explain failed for request %s", request_id)
            raise PredictFailed(f"explain failed: {type(exc).__name__}: {exc}") from None
        return validate_explanations(explanations, len(images))
