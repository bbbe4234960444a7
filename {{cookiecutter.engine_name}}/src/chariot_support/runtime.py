"""The MLServer runtime that turns a chariot-v2-kserve request into a call of the author's predict and back."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Sequence, TypeVar

import cv2
from mlserver import MLModel
from mlserver.types import InferenceRequest, InferenceResponse, Parameters, ResponseOutput

from .base import ChariotModel
from .decoding import Image, Limits, decode_image, parse_request
from .errors import ChariotError, PredictFailed
from .tasks import TaskType, select, to_dicts, validate_results

logger = logging.getLogger("chariot_support")
T = TypeVar("T")
R = TypeVar("R")


def import_model_class(path: str) -> type[ChariotModel]:
    module, _, name = path.partition(":")
    model_class = getattr(importlib.import_module(module), name)
    if not isinstance(getattr(model_class, "task_type", None), TaskType):
        raise TypeError(f"{path}.task_type must be one of {[t.value for t in TaskType]}")
    return model_class


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"environment variable {name} must be a whole number, got {value!r}") from None
    if number < 1:
        raise ValueError(f"environment variable {name} must be at least 1, got {number}")
    return number


class ChariotRuntime(MLModel):
    """Loads the author's ChariotModel and answers inference requests with it."""

    async def load(self) -> bool:
        extra = self.settings.parameters.extra if self.settings.parameters else {}
        model_class = import_model_class(extra["model_class"])
        self._task = model_class.task_type
        self._limits = Limits(
            max_inputs=env_int("CHARIOT_MAX_INPUTS", Limits.max_inputs),
            max_image_pixels=env_int("CHARIOT_MAX_IMAGE_PIXELS", Limits.max_image_pixels),
        )
        self._model = model_class()
        model_dir = Path(os.environ.get("MODEL_DIR", "/mnt/models"))
        # The runtime's threads already spread requests and images over the cores; OpenCV's own pool on top
        # spins for work and costs CPU per call. Set before load, so a model that wants it back can have it.
        cv2.setNumThreads(1)
        await asyncio.to_thread(self._model.load, model_dir)
        # Decoding and most predict work release the GIL, so threads keep both cores busy.
        threads = env_int("CHARIOT_THREADS", os.cpu_count() or 1)
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="chariot")
        self._predict_guard = nullcontext() if model_class.thread_safe else threading.Lock()
        logger.info("loaded %s (%s) from %s", model_class.__name__, self._task.value, model_dir)
        return True

    async def unload(self) -> bool:
        self._executor.shutdown(wait=True)
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._infer, payload)

    def _map(self, work: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """`work` of each item in order, spread over the runtime's threads.

        The calling thread is one of those threads, so it never just waits: it runs the first item, then every
        item no other thread has started yet. When every thread is busy with a request, it does all the work
        itself instead of deadlocking the pool.
        """
        if len(items) < 2:
            return [work(item) for item in items]
        futures = [self._executor.submit(work, item) for item in items[1:]]
        try:
            results = [work(items[0])]
            for item, future in zip(items[1:], futures):
                results.append(work(item) if future.cancel() else future.result())
            return results
        finally:
            for future in futures:
                future.cancel()

    def _infer(self, payload: InferenceRequest) -> InferenceResponse:
        request = parse_request(payload, self._task, self._limits)
        pixels = self._map(lambda i: decode_image(i.encoded, f"input '{i.name}'", self._limits), request.images)
        images = [
            Image(
                name=i.name,
                pixels=p,
                action=i.action,
                score_threshold=i.score_threshold,
                prompts=i.prompts,
                parameters=i.parameters,
            )
            for i, p in zip(request.images, pixels)
        ]
        try:
            with self._predict_guard:
                results = self._model.predict(images, request.tensors)
        except ChariotError:
            raise
        except Exception as exc:
            logger.exception("predict failed for request %s", payload.id)
            raise PredictFailed(f"predict failed: {type(exc).__name__}: {exc}") from None
        checked = validate_results(self._task, results, [i.name for i in images])
        outputs = []
        for image, per_image in zip(request.images, checked, strict=True):
            chosen = select(
                self._task,
                per_image,
                action=image.action,
                score_threshold=image.score_threshold,
                prompts=image.prompts,
            )
            outputs.append(
                ResponseOutput(
                    name=image.name,
                    shape=[1],
                    datatype="BYTES",
                    data=[to_dicts(chosen)],
                    parameters=Parameters(metadata=image.metadata) if image.metadata is not None else None,
                )
            )
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            id=payload.id,
            parameters=Parameters(metadata=request.metadata) if request.metadata is not None else Parameters(),
            outputs=outputs,
        )
