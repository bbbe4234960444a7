"""Your model: the one file to edit. Replace load and predict with your own; the engine does the rest.

Everything Chariot-specific (decoding requests, checking and formatting results, metadata passthrough,
routes) lives in `chariot_support`. Until you replace it, predict runs a demo that finds saturated red,
green and blue regions, so the engine gives real results right away.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from chariot_support import ChariotModel, Image, Segmentation, TaskType
from chariot_support.demo import ColourFinder


class Model(ChariotModel):
    task_type = TaskType.IMAGE_SEGMENTATION
    thread_safe = True  # the demo keeps no per-request state

    def load(self, model_dir: Path) -> None:
        # Read weights, labels and settings from model_dir (Chariot unpacks the model there; MODEL_DIR,
        # default /mnt/models). The demo reads optional thresholds from model_dir/colours.json.
        self.finder = ColourFinder.from_dir(model_dir)

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Segmentation]]:
        # A model that outputs masks can use Segmentation.from_mask(label, score, mask) instead.
        return [
            [Segmentation(label=r.label, score=r.score, contour=[r.contour]) for r in self.finder.find(image.pixels)]
            for image in images
        ]

    def explain(
        self, images: Sequence[Image], tensors: Mapping[str, np.ndarray], results: Sequence[Sequence[Segmentation]]
    ) -> list[dict]:
        # Optional: answers POST /v1/models/<name>:explain with one explanation per image. The demo explains by
        # occlusion, one importance per result in `results` (what the engine answers for that image).
        return [
            {"importance_scores": self.finder.occlusion(image.pixels, chosen)}
            for image, chosen in zip(images, results, strict=True)
        ]
