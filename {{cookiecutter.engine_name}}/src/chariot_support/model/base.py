"""The contract between an engine author's model and the engine: subclass ChariotModel, set `task_type` and write
`predict`; `load`, `thread_safe`, `copies` and `explain` are optional."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from chariot_support.model.image import Image
from chariot_support.model.tasks import TaskType


class ChariotModel:
    """An engine's model. The engine creates it (once per copy), calls `load` once on each instance, then `predict`
    per request (per batch, with batching across requests on).

    Required: `task_type` (which Chariot result format predict returns) and `predict`.
    Optional, with their defaults:
    - `load(model_dir)`: does nothing. Called once per instance before any predict, with MODEL_DIR (default
      /mnt/models), where Chariot unpacks the model's files.
    - `thread_safe = False`: the engine runs one predict at a time on each copy. Set True only when predict keeps no
      per-call state on `self` and the framework can run one object from several threads at once (an ONNX Runtime
      session can); the engine then loads one instance, runs up to CHARIOT_THREADS predicts on it at once, and
      ignores `copies` (the engine's tests/test_model.py then checks that requests at once get the answers one
      request gets).
    - `copies = 1`: for a model that is not thread-safe, independent copies to load, each running one predict at a
      time (CHARIOT_MODEL_COPIES overrides it; "threads" means one per worker thread).
    - `explain`: answers the V1 `:explain` route; without it that route answers 501.
    - `warmup()`: the pictures the engine warms the model with before it says ready; None (the default) leaves the
      choice to the engine (CHARIOT_WARMUP_IMAGES, else the engine's samples/, else a synthetic picture).
    Set by the engine before `load`: `threads`, the threads one predict may use.
    """

    task_type: ClassVar[TaskType]
    thread_safe: ClassVar[bool] = False
    # For a model that is not thread-safe: how many independent copies to load, each running one predict at a
    # time, so that requests use several cores (CHARIOT_MODEL_COPIES overrides it; "threads" means one per
    # worker thread). Each copy costs the model's memory again.
    copies: ClassVar[int] = 1
    # Set by the engine before load: how many threads one predict may use without oversubscribing the cores the
    # engine's other predicts run on. Give it to ONNX Runtime (SessionOptions.intra_op_num_threads) or torch
    # (torch.set_num_threads) in load.
    threads: int = 1

    def load(self, model_dir: Path) -> None:
        """Load weights and settings from `model_dir` (Chariot unpacks the model's files there)."""

    def warmup(self) -> Sequence[np.ndarray | Image] | None:
        """Optional: pictures (RGB uint8 arrays, H x W x 3, or Images) like those the model will serve, for the
        engine's warm-up: before it says ready, the engine calls predict on them (once per batch size batching uses,
        on each copy), so that the first request does not pay for the model's first call. Called after `load`.
        Return None to let the engine choose (CHARIOT_WARMUP_IMAGES, else the engine's samples/ folder, else a
        synthetic 640 x 480 picture). CHARIOT_WARMUP_IMAGES, when set, wins over this."""
        return None

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list]:
        """Return one list of results per image, in order.

        Each `Image` has `pixels` (RGB uint8, H x W x 3), `name`, `action`, `score_threshold`, `prompts` and
        the merged request `parameters`. `tensors` holds the request's non-image inputs by name, decoded to
        their datatype and shape. The engine applies `score_threshold` and the classification `action` to what
        you return, so return every result you have with its score. With batching across requests on
        (CHARIOT_MAX_BATCH_SIZE), `images` may come from several requests: read each image's settings from it.
        """
        raise NotImplementedError(f"{type(self).__name__}.predict is not written yet")

    def explain(
        self, images: Sequence[Image], tensors: Mapping[str, np.ndarray], results: Sequence[Sequence[Any]]
    ) -> list[dict]:
        """Optional: return one JSON object per image explaining `results`, what the engine answers for it.

        `results` holds, per image, the results the engine kept from predict (after `score_threshold` and
        `action`), in the order it answers them, so an explanation can refer to them by position; for example
        `{"importance_scores": [one number per result]}`. The legacy `:explain` route calls it; an engine whose
        model leaves it out answers that route with 501.
        """
        raise NotImplementedError(f"{type(self).__name__}.explain is not written")


def missing_file(exc: BaseException) -> bool:
    """Whether `exc` says a file is missing: Python's FileNotFoundError, or ONNX Runtime's NoSuchFile (which
    InferenceSession, and so onnx_session, raises), told by name so that onnxruntime need not be installed."""
    kind = type(exc)
    return isinstance(exc, FileNotFoundError) or (
        kind.__name__ == "NoSuchFile" and kind.__module__.startswith("onnxruntime")
    )


def has_explain(model_class: type[ChariotModel]) -> bool:
    return model_class.explain is not ChariotModel.explain
