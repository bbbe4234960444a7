"""An Image Classification model that reads its labels from MODEL_DIR, as a real model reads its weights."""

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from chariot_support import ChariotModel, Classification, Image, TaskType


class Model(ChariotModel):
    task_type = TaskType.IMAGE_CLASSIFICATION
    thread_safe = True

    def load(self, model_dir: Path) -> None:
        self.labels = (model_dir / "labels.txt").read_text().split()

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Classification]]:
        answers = []
        for image in images:
            brightness = float(image.pixels.mean()) / 255
            scores = [brightness, 1 - brightness]
            answers.append([Classification(label=label, score=s) for label, s in zip(self.labels, scores, strict=True)])
        return answers
