"""Your model: the one file to edit.

Required: `task_type`, `load` and `predict`. Optional: `thread_safe`, and `explain` for the V1 `:explain` route
(see `chariot_support.ChariotModel`). The engine does everything else: decoding requests, checking and formatting
results, `action` and `score_threshold`, metadata passthrough, routes.

Until you replace them, load and predict run a demo that finds saturated red, green and blue regions, so the engine
gives real results right away; examples/model.py is the same task with a real ONNX model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from chariot_support import ChariotModel, Image, OrientedDetection, TaskType
from chariot_support.model.demo import ColourFinder


class Model(ChariotModel):
    task_type = TaskType.ORIENTED_OBJECT_DETECTION  # required: the Chariot result format predict returns
    # Optional (default False): True when predict may run for several requests at once. The demo keeps no
    # per-request state; a model that keeps some on self leaves it False, and the engine runs one predict at a time.
    thread_safe = True

    def load(self, model_dir: Path) -> None:
        # Required: read weights, labels and settings from model_dir (Chariot unpacks the model there; MODEL_DIR,
        # default /mnt/models). Replace the demo's finder with your model.
        self.finder = ColourFinder.from_dir(model_dir)

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[OrientedDetection]]:
        # Required: one list of results per image, in order. from_rotated_rect normalises a pixel rectangle
        # from cv2.minAreaRect by the image size, r in radians.
        return [
            [
                OrientedDetection.from_rotated_rect(r.label, r.score, r.rotated_box, image.width, image.height)
                for r in self.finder.find(image.pixels)
            ]
            for image in images
        ]
