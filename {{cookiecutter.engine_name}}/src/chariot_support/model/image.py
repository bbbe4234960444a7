"""The `Image` a model's predict is handed: RGB pixels and the request's settings for that image."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Image:
    """One image handed to predict: RGB pixels, plus the request's settings for it."""

    name: str
    pixels: np.ndarray = field(repr=False)
    action: str
    score_threshold: float | None
    prompts: tuple[str, ...]
    parameters: Mapping[str, Any]

    @cached_property
    def bgr(self) -> np.ndarray:
        """The pixels in BGR order (OpenCV's, and what many Caffe and ONNX models were trained on), contiguous."""
        return np.ascontiguousarray(self.pixels[..., ::-1])

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])
