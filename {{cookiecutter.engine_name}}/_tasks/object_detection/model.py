"""Your model: the one file to edit.

`task_type` and `predict` are required; `load`, `thread_safe`, `copies` and `explain` are optional. What each does,
and its default, is written once, in `chariot_support.ChariotModel` (src/chariot_support/model/base.py).

The engine does everything else: decoding requests, checking and formatting results, `action` and
`score_threshold`, metadata passthrough, routes.

Until you replace them, load and predict run a demo that finds saturated red, green and blue regions, so the engine
gives real results right away; examples/model.py is the same task with a real ONNX model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from chariot_support import ChariotModel, Detection, Image, TaskType
from chariot_support.model.demo import ColourFinder


class Model(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION  # required: the Chariot result format predict returns
    # Optional. The demo's predict reads nothing but its arguments and a finder that never changes (a frozen
    # dataclass), so several requests may run it on this one instance at once. A model that keeps per-call state on
    # self, or whose framework cannot run one object from several threads at once (OpenCV's dnn, a LiteRT
    # interpreter), must not say True: without this line (the default, False) the engine runs one predict at a time
    # on each copy of the model (see `copies`).
    thread_safe = True  # True only because the demo holds no state: set False if your model keeps per-call state

    def load(self, model_dir: Path) -> None:
        # Optional (the default does nothing): read weights, labels and settings from model_dir (Chariot unpacks the
        # model there; MODEL_DIR, default /mnt/models). Replace the demo's finder with your model.
        self.finder = ColourFinder.from_dir(model_dir)

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Detection]]:
        # Required: one list of results per image, in order. Boxes are in pixels, y down. The engine drops
        # results under the request's score_threshold.
        return [
            [
                Detection(label=r.label, score=r.score, xmin=r.bbox[0], ymin=r.bbox[1], xmax=r.bbox[2], ymax=r.bbox[3])
                for r in self.finder.find(image.pixels)
            ]
            for image in images
        ]
