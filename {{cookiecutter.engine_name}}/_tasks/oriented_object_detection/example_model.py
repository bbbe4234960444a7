"""A worked example: a complete model.py for an ONNX model exported from your training framework. Copy it over
src/<package>/model.py and adapt the lines marked `# adapt`.

The model folder (MODEL_DIR) holds `model.onnx` and the class labels (`labels.txt`, one per line, or
`chariot_model_config.json` with `class_labels`). The model takes a 1 x 3 x H x W float RGB batch scaled to 0..1
and returns `boxes` (N x 5: cx cy w h in input pixels, then the angle in radians,
clockwise), `scores` (N) and `classes` (N). Add ONNX Runtime with `uv add 'onnxruntime==1.32.0'` (or
onnxruntime-gpu).
"""

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np

from chariot_support import ChariotModel, Image, OrientedDetection, TaskType, onnx_session, read_labels


class Model(ChariotModel):
    task_type = TaskType.ORIENTED_OBJECT_DETECTION
    thread_safe = True  # an ONNX Runtime session may run several requests at once

    def load(self, model_dir: Path) -> None:
        self.session = onnx_session(model_dir / "model.onnx", self.threads)  # on the GPU when there is one
        self.labels = read_labels(model_dir)
        model_input = self.session.get_inputs()[0]
        self.input_name = model_input.name
        self.height, self.width = model_input.shape[2:]  # the size the model was exported for

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[OrientedDetection]]:
        return [self.detect(image) for image in images]

    def detect(self, image: Image) -> list[OrientedDetection]:
        batch = cv2.resize(image.pixels, (self.width, self.height)).transpose(2, 0, 1)[np.newaxis]
        inputs = {self.input_name: batch.astype(np.float32) / 255}
        boxes, scores, classes = self.session.run(None, inputs)  # adapt: your model's outputs
        # The box in the input's pixels, given to from_rotated_rect as cv2.minAreaRect gives one (angle in degrees),
        # normalised by the input's size: the same in the caller's picture when the resize keeps the aspect ratio.
        return [
            OrientedDetection.from_rotated_rect(
                self.labels[int(c)], float(s), ((cx, cy), (w, h), math.degrees(r)), self.width, self.height
            )
            for (cx, cy, w, h, r), s, c in zip(boxes.tolist(), scores.tolist(), classes.tolist(), strict=True)
        ]
