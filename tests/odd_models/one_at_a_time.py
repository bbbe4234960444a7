"""An Image Segmentation model that is not thread-safe: it keeps the picture it works on in the instance, and
outlines the bright parts of the picture."""

from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np

from chariot_support import ChariotModel, Image, Segmentation, TaskType


class Model(ChariotModel):
    task_type = TaskType.IMAGE_SEGMENTATION
    thread_safe = False

    def load(self, model_dir: Path) -> None:
        self.grey = None

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Segmentation]]:
        answers = []
        for image in images:
            self.grey = cv2.cvtColor(image.pixels, cv2.COLOR_RGB2GRAY)
            mask = self.grey > 100
            answers.append([Segmentation.from_mask("bright", float(mask.mean()), mask)] if mask.any() else [])
        return answers
