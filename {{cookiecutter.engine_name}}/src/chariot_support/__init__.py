"""Everything that makes an engine speak Chariot's chariot-v2-kserve protocol; identical in every baked engine."""

from .base import ChariotModel
from .decoding import Image
from .errors import BadRequest
from .tasks import (
    Classification,
    Detection,
    OrientedDetection,
    PromptAnswer,
    Segmentation,
    TaskType,
    contours_from_mask,
)

__all__ = [
    "BadRequest",
    "ChariotModel",
    "Classification",
    "Detection",
    "Image",
    "OrientedDetection",
    "PromptAnswer",
    "Segmentation",
    "TaskType",
    "contours_from_mask",
]
