"""Everything that makes an engine speak Chariot's chariot-v2-kserve protocol; identical in every baked engine."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Loaded on first use, so that the command-line client (chariot_support.client), which needs none of MLServer,
# starts in a fraction of a second instead of importing the whole server first.
_EXPORTS = {
    "BadRequest": "chariot_support.errors",
    "ChariotModel": "chariot_support.model.base",
    "Classification": "chariot_support.model.tasks",
    "Detection": "chariot_support.model.tasks",
    "Image": "chariot_support.model.image",
    "Letterbox": "chariot_support.model.detectors",
    "OrientedDetection": "chariot_support.model.tasks",
    "PromptAnswer": "chariot_support.model.tasks",
    "Segmentation": "chariot_support.model.tasks",
    "TaskType": "chariot_support.model.tasks",
    "contours_from_mask": "chariot_support.model.tasks",
    "corners": "chariot_support.model.detectors",
    "letterbox": "chariot_support.model.detectors",
    "nms": "chariot_support.model.detectors",
    "onnx_session": "chariot_support.model.onnx_session",
    "read_labels": "chariot_support.model.labels",
    "sigmoid": "chariot_support.model.detectors",
    "softmax": "chariot_support.model.detectors",
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
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from chariot_support.errors import BadRequest
    from chariot_support.model.base import ChariotModel
    from chariot_support.model.detectors import Letterbox, corners, letterbox, nms, sigmoid, softmax
    from chariot_support.model.image import Image
    from chariot_support.model.labels import read_labels
    from chariot_support.model.onnx_session import onnx_session
    from chariot_support.model.tasks import (
        Classification,
        Detection,
        OrientedDetection,
        PromptAnswer,
        Segmentation,
        TaskType,
        contours_from_mask,
    )
