"""A worked example: a complete model.py for an ONNX model exported from your training framework. Copy it over
src/<package>/model.py and adapt the lines marked `# adapt`.

The model folder (MODEL_DIR) holds `model.onnx` and the class labels (`labels.txt`, one per line, or
`chariot_model_config.json` with `class_labels`). The model takes a 1 x 3 x H x W float RGB batch scaled to 0..1
and returns one row of class logits. Add ONNX Runtime with `uv add 'onnxruntime==1.32.0'` (or
onnxruntime-gpu).
"""

from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np

from chariot_support import ChariotModel, Classification, Image, TaskType, onnx_session, read_labels


class Model(ChariotModel):
    task_type = TaskType.IMAGE_CLASSIFICATION
    thread_safe = True  # an ONNX Runtime session may run several requests at once

    def load(self, model_dir: Path) -> None:
        self.session = onnx_session(model_dir / "model.onnx", self.threads)  # on the GPU when there is one
        self.labels = read_labels(model_dir)
        model_input = self.session.get_inputs()[0]
        self.input_name = model_input.name
        self.height, self.width = model_input.shape[2:]  # the size the model was exported for

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Classification]]:
        batch = np.stack([cv2.resize(image.pixels, (self.width, self.height)) for image in images])
        batch = batch.transpose(0, 3, 1, 2).astype(np.float32) / 255
        (logits,) = self.session.run(None, {self.input_name: batch})  # adapt: your model's outputs
        probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        # Every label with its score: the engine keeps the best for action "predict".
        return [
            [Classification(label=label, score=float(p)) for label, p in zip(self.labels, row, strict=True)]
            for row in probabilities
        ]
