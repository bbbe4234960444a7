"""Warm-up: each loaded copy of the model predicts on warm-up pictures, once per batch size batching will use, before
the engine says ready, so that the first request does not pay for the model's first call (CUDA's start, kernels
chosen or compiled, lazy allocations). Off with CHARIOT_WARMUP=0.

The calls go to the model's predict as a request's images would (decoded pictures, the default action, no score
threshold, no prompts) and its results are checked as a request's are, but they are no request: no request log line,
no request metrics. A warm-up that fails fails the load, saying what failed and how to fix it or turn warm-up off.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from chariot_support.errors import BadRequest, ModelLoadFailed
from chariot_support.model.base import ChariotModel
from chariot_support.model.image import Image
from chariot_support.model.tasks import TaskType, validate_results
from chariot_support.protocols.images import decode_image
from chariot_support.settings import EngineSettings

logger = logging.getLogger("chariot_support")

# Picture files a warm-up folder may hold, and the most it reads (a batch repeats them to fill itself).
PICTURES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
MAX_PICTURES = 16
# The synthetic picture's size when no pictures are found: a common camera frame.
SYNTHETIC_SIZE = (480, 640)
TURN_OFF = "set CHARIOT_WARMUP=0 to start without warm-up"
# What an Image Text to Text model that needs a question is asked.
WARMUP_PROMPT = "What is in this picture?"


@dataclass(frozen=True)
class WarmupInputs:
    """The images to warm the model with (a request's defaults, unless the model's `warmup` gave its own), and where
    they came from (for the log line)."""

    images: list[Image]
    source: str

    @classmethod
    def of(cls, pictures: Sequence[np.ndarray | Image], source: str) -> WarmupInputs:
        return cls([p if isinstance(p, Image) else image_of(p, f"warmup-{i}") for i, p in enumerate(pictures)], source)


def batch_sizes(max_batch_size: int) -> list[int]:
    """The sizes of the predict calls warm-up makes: 1, and the largest batch when batching is on."""
    return sorted({1, max(1, max_batch_size)})


def engine_samples(model_class: type) -> Path | None:
    """The engine's samples/ folder: beside pyproject.toml above the model's source when it runs from the engine's
    folder (src/<package>/model.py), else samples/ in the working directory; None when there is neither, as in the
    image, which leaves samples/ out (.dockerignore)."""
    module = sys.modules.get(model_class.__module__)
    where = getattr(module, "__file__", None)
    for folder in Path(where).resolve().parents[:4] if where else ():
        if (folder / "pyproject.toml").is_file() and (folder / "samples").is_dir():
            return folder / "samples"
    here = Path.cwd() / "samples"
    return here if here.is_dir() else None


def folder_pictures(folder: Path, settings: EngineSettings, what: str) -> list[np.ndarray]:
    """The pictures of `folder`, decoded as the engine decodes a request's (at most MAX_PICTURES, by name)."""
    if not folder.is_dir():
        raise ModelLoadFailed(f"{what} {folder} is not a folder; point it at a folder of pictures, or {TURN_OFF}")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in PICTURES and p.is_file())[:MAX_PICTURES]
    if not files:
        raise ModelLoadFailed(f"{what} {folder} holds no pictures ({', '.join(PICTURES)}); add some, or {TURN_OFF}")
    pictures = []
    for path in files:
        try:
            pictures.append(decode_image(path.read_bytes(), str(path), settings))
        except Exception as exc:
            raise ModelLoadFailed(f"warm-up picture {path} cannot be read: {exc}; replace it, or {TURN_OFF}") from None
    return pictures


def synthetic_picture() -> np.ndarray:
    """A 640 x 480 RGB picture with gradients and shapes, for a model given no pictures to warm with."""
    height, width = SYNTHETIC_SIZE
    y, x = np.mgrid[0:height, 0:width]
    picture = np.stack([x * 255 // width, y * 255 // height, (x + y) * 255 // (width + height)], axis=-1)
    picture = np.ascontiguousarray(picture, dtype=np.uint8)
    cv2.rectangle(picture, (80, 60), (260, 220), (220, 40, 40), -1)
    cv2.circle(picture, (450, 300), 90, (40, 200, 60), -1)
    cv2.line(picture, (0, height - 1), (width - 1, 0), (250, 250, 250), 5)
    return picture


def from_model(instance: ChariotModel) -> list[np.ndarray | Image] | None:
    """What the model's `warmup` gives (RGB arrays, or Images with their own settings), or None when it gives
    nothing."""
    try:
        given = instance.warmup()
    except Exception as exc:
        raise ModelLoadFailed(
            f"{type(instance).__name__}.warmup failed: {type(exc).__name__}: {exc}; fix it, or {TURN_OFF}"
        ) from exc
    if given is None:
        return None
    given = list(given)
    for index, each in enumerate(given):
        pixels = each.pixels if isinstance(each, Image) else each
        if not (
            isinstance(pixels, np.ndarray) and pixels.dtype == np.uint8 and pixels.ndim == 3 and pixels.shape[2] == 3
        ):
            got = f"{pixels.dtype} {pixels.shape}" if isinstance(pixels, np.ndarray) else type(pixels).__name__
            raise ModelLoadFailed(
                f"{type(instance).__name__}.warmup must return RGB pictures (uint8 arrays H x W x 3, or Images);"
                f" item {index} is {got}"
            )
    return given or None


def warmup_inputs(instance: ChariotModel, settings: EngineSettings) -> WarmupInputs:
    """The pictures to warm with: CHARIOT_WARMUP_IMAGES's, else the model's `warmup`'s, else the engine's samples/,
    else one synthetic picture."""
    if settings.warmup_images:
        folder = Path(settings.warmup_images)
        return WarmupInputs.of(folder_pictures(folder, settings, "CHARIOT_WARMUP_IMAGES"), str(folder))
    given = from_model(instance)
    if given is not None:
        return WarmupInputs.of(given, f"{type(instance).__name__}.warmup")
    samples = engine_samples(type(instance))
    if samples is not None:
        try:
            return WarmupInputs.of(folder_pictures(samples, settings, "the engine's samples folder"), str(samples))
        except ModelLoadFailed:
            pass  # a samples folder emptied on purpose: the synthetic picture will do
    return WarmupInputs.of([synthetic_picture()], "a synthetic 640x480 picture")


def image_of(pixels: np.ndarray, name: str, prompts: tuple[str, ...] = ()) -> Image:
    """An Image as a request with the default settings hands it to predict."""
    return Image(name=name, pixels=pixels, action="predict", score_threshold=None, prompts=prompts, parameters={})


def batch_of(images: Sequence[Image], count: int, prompts: tuple[str, ...] | None = None) -> list[Image]:
    """`count` images, repeating `images`, each named apart (and asked `prompts` instead of its own, when given)."""
    batch = []
    for index in range(count):
        image = images[index % len(images)]
        asked = image.prompts if prompts is None else prompts
        batch.append(replace(image, name=f"{image.name}-{index}", prompts=asked) if count > 1 or prompts else image)
    return batch


def warm_up(instances: Sequence[ChariotModel], task: TaskType, settings: EngineSettings) -> dict[str, Any] | None:
    """Predict on every copy at every batch size, checking the results; returns what was done, for the log line
    (None when CHARIOT_WARMUP is off). Raises ModelLoadFailed saying what failed."""
    if not settings.warmup:
        return None
    started = time.perf_counter()
    inputs = warmup_inputs(instances[0], settings)
    sizes = batch_sizes(settings.max_batch_size)
    calls = 0
    prompts: tuple[str, ...] | None = None  # the images' own, until the model refuses them for want of a prompt
    refused: tuple[str, str] | None = None  # the call the model refused as a bad request, and what it said
    for copy, instance in enumerate(instances):
        for size in sizes:
            where = f"warm-up predict of {size} image{'' if size == 1 else 's'} on copy {copy}"
            try:
                try:
                    _predict(instance, task, batch_of(inputs.images, size, prompts))
                except BadRequest:
                    # An Image Text to Text model may need a question: ask it one, once, before giving up.
                    if task is not TaskType.IMAGE_TEXT_TO_TEXT or prompts is not None or calls:
                        raise
                    prompts = (WARMUP_PROMPT,)
                    _predict(instance, task, batch_of(inputs.images, size, prompts))
            except BadRequest as refusal:
                refused = (where, str(refusal))
                break
            except Exception as exc:
                raise ModelLoadFailed(
                    f"{where} failed: {type(exc).__name__}: {exc}. The pictures came from {inputs.source}: fix the"
                    f" model, give it pictures it takes (CHARIOT_WARMUP_IMAGES, or the model's warmup), or {TURN_OFF}"
                ) from exc
            calls += 1
        if refused:
            break
    if refused:
        # The model says the engine's warm-up request is not one it takes: nothing is wrong with the model, but it
        # is not warmed. Said loudly, with the fix; not a failure.
        logger.warning(
            "the model is not warmed up: it refused the %s as a bad request (%s); give it images it takes with its"
            " warmup() (Images with the prompts or parameters it needs), or %s",
            *refused,
            TURN_OFF,
        )
    return {
        "calls": calls,
        "batch_sizes": sizes,
        "copies": len(instances),
        "pictures": len(inputs.images),
        "source": inputs.source,
        "refused": refused is not None,
        "seconds": round(time.perf_counter() - started, 3),
    }


def _predict(instance: ChariotModel, task: TaskType, images: list[Image]) -> None:
    validate_results(task, instance.predict(images, {}), [i.name for i in images])
