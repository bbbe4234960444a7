"""An Image Segmentation model that is not thread-safe: it outlines the bright parts of each picture and numbers them
across the call in a counter kept on the instance, so that two calls at once on one instance number each other's
regions."""

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np

from chariot_support import ChariotModel, Image, Segmentation, TaskType


class Model(ChariotModel):
    task_type = TaskType.IMAGE_SEGMENTATION
    thread_safe = False

    def load(self, model_dir: Path) -> None:
        self.found = 0  # regions outlined so far in the current call

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Segmentation]]:
        self.found = 0
        answers = []
        for image in images:
            mask = cv2.cvtColor(image.pixels, cv2.COLOR_RGB2GRAY) > 100
            if not mask.any():
                answers.append([])
                continue
            self.found += 1
            time.sleep(0.02)  # the outlining, while another call on this instance may count too
            answers.append([Segmentation.from_mask(f"bright region {self.found}", float(mask.mean()), mask)])
        return answers
