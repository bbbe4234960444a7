"""People, with MediaPipe's selfie segmenter (selfie_segmentation.tflite) run by LiteRT."""

from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np
from ai_edge_litert.interpreter import Interpreter

from chariot_support import ChariotModel, Image, Segmentation, TaskType


class Model(ChariotModel):
    task_type = TaskType.IMAGE_SEGMENTATION
    thread_safe = False  # a LiteRT interpreter holds its tensors: one call at a time per copy
    copies = 2

    def load(self, model_dir: Path) -> None:
        self.net = Interpreter(str(model_dir / "selfie_segmentation.tflite"), num_threads=self.threads)
        self.net.allocate_tensors()
        self.input = self.net.get_input_details()[0]
        self.output = self.net.get_output_details()[0]["index"]

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Segmentation]]:
        height, width = self.input["shape"][1:3]
        results = []
        for image in images:
            pixels = cv2.resize(image.pixels, (width, height)).astype(np.float32) / 255
            self.net.set_tensor(self.input["index"], pixels[None])
            self.net.invoke()
            person = cv2.resize(self.net.get_tensor(self.output)[0, :, :, 0], (image.width, image.height))
            mask = person > 0.5
            score = float(person[mask].mean()) if mask.any() else 0.0
            results.append([Segmentation.from_mask("person", score, mask)])
        return results
