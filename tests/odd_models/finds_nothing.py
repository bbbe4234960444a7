"""An Object Detection model that never finds anything, and has no explain."""

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from chariot_support import ChariotModel, Detection, Image, TaskType


class Model(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION
    thread_safe = True

    def load(self, model_dir: Path) -> None:
        pass

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Detection]]:
        return [[] for _ in images]
