"""Lines of text as rotated boxes, with PaddleOCR's PP-OCRv4 text detector (ch_PP-OCRv4_det_infer.onnx)."""

from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np

from chariot_support import ChariotModel, Image, OrientedDetection, TaskType, onnx_session


class Model(ChariotModel):
    task_type = TaskType.ORIENTED_OBJECT_DETECTION
    thread_safe = True  # an ONNX Runtime session may run from several threads at once

    def load(self, model_dir: Path) -> None:
        self.net = onnx_session(model_dir / "ch_PP-OCRv4_det_infer.onnx", self.threads)

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[OrientedDetection]]:
        return [self.lines(image) for image in images]

    def lines(self, image: Image) -> list[OrientedDetection]:
        # The detector wants BGR and sides a multiple of 32; the long side is brought to 960 px, PaddleOCR's
        # det_limit_side_len (a page's small print is scaled up, a large photo down).
        scale = 960 / max(image.width, image.height)
        width, height = (max(32, round(side * scale / 32) * 32) for side in (image.width, image.height))
        pixels = cv2.resize(image.bgr, (width, height)).astype(np.float32) / 127.5 - 1
        (text,) = self.net.run(None, {self.net.get_inputs()[0].name: pixels.transpose(2, 0, 1)[None]})
        mask = (text[0, 0] > 0.3).astype(np.uint8)
        contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        boxes = []
        for contour in contours:
            (cx, cy), (w, h), degrees = cv2.minAreaRect(contour)
            if min(w, h) < 3:
                continue
            score = float(cv2.mean(text[0, 0], mask=cv2.drawContours(np.zeros_like(mask), [contour], -1, 1, -1))[0])
            if score < 0.6:
                continue
            grow = w * h * 1.6 / (2 * (w + h))  # the detector finds shrunk text: grow it back, as it was trained
            rect = (
                (cx * image.width / width, cy * image.height / height),
                ((w + 2 * grow) * image.width / width, (h + 2 * grow) * image.height / height),
                degrees,
            )
            boxes.append(OrientedDetection.from_rotated_rect("text", score, rect, image.width, image.height))
        return boxes
