"""An Oriented Object Detection model that always finds one tilted box in the middle of the picture."""

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from chariot_support import ChariotModel, Image, OrientedDetection, TaskType


class Model(ChariotModel):
    task_type = TaskType.ORIENTED_OBJECT_DETECTION
    thread_safe = True

    def load(self, model_dir: Path) -> None:
        pass

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[OrientedDetection]]:
        return [
            [
                OrientedDetection.from_rotated_rect(
                    "middle", 0.5, ((i.width / 2, i.height / 2), (i.width / 4, i.height / 8), 20.0), i.width, i.height
                )
            ]
            for i in images
        ]
