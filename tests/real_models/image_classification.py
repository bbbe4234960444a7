"""Which way up a line of text is, with PaddleOCR's direction classifier (ch_ppocr_mobile_v2.0_cls_infer.onnx)."""

from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np

from chariot_support import ChariotModel, Classification, Image, TaskType, onnx_session

LABELS = ("upright", "upside down")  # the model's classes 0 and 180 degrees


class Model(ChariotModel):
    task_type = TaskType.IMAGE_CLASSIFICATION
    thread_safe = True  # an ONNX Runtime session may run from several threads at once

    def load(self, model_dir: Path) -> None:
        self.net = onnx_session(model_dir / "ch_ppocr_mobile_v2.0_cls_infer.onnx", self.threads)

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Classification]]:
        # 48 px high, at most 192 wide, padded on the right: the classifier's input, in BGR scaled to -1..1.
        batch = np.zeros((len(images), 3, 48, 192), np.float32)
        for row, image in zip(batch, images, strict=True):
            width = min(192, max(1, round(48 * image.width / image.height)))
            line = cv2.resize(image.bgr, (width, 48)).astype(np.float32) / 127.5 - 1
            row[:, :, :width] = line.transpose(2, 0, 1)
        (scores,) = self.net.run(None, {self.net.get_inputs()[0].name: batch})
        return [
            [Classification(label=label, score=float(s)) for label, s in zip(LABELS, row, strict=True)]
            for row in scores
        ]
