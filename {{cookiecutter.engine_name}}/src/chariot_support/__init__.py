"""Everything that makes an engine speak Chariot's chariot-v2-kserve protocol; identical in every baked engine."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Loaded on first use, so that the command-line client (chariot_support.client), which needs none of MLServer,
# starts in a fraction of a second instead of importing the whole server first.
_EXPORTS = {
    "BadRequest": ".errors",
    "ChariotModel": ".base",
    "Classification": ".tasks",
    "Detection": ".tasks",
    "Image": ".decoding",
    "Letterbox": ".detectors",
    "OrientedDetection": ".tasks",
    "PromptAnswer": ".tasks",
    "Segmentation": ".tasks",
    "TaskType": ".tasks",
    "contours_from_mask": ".tasks",
    "corners": ".detectors",
    "letterbox": ".detectors",
    "nms": ".detectors",
    "onnx_session": ".onnx_session",
    "read_labels": ".labels",
    "sigmoid": ".detectors",
    "softmax": ".detectors",
}
__all__ = [
    "BadRequest",
    "ChariotModel",
    "Classification",
    "Detection",
    "Image",
    "Letterbox",
    "OrientedDetection",
    "PromptAnswer",
    "Segmentation",
    "TaskType",
    "contours_from_mask",
    "corners",
    "letterbox",
    "nms",
    "onnx_session",
    "read_labels",
    "sigmoid",
    "softmax",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from .base import ChariotModel
    from .decoding import Image
    from .detectors import Letterbox, corners, letterbox, nms, sigmoid, softmax
    from .errors import BadRequest
    from .labels import read_labels
    from .onnx_session import onnx_session
    from .tasks import (
        Classification,
        Detection,
        OrientedDetection,
        PromptAnswer,
        Segmentation,
        TaskType,
        contours_from_mask,
    )
