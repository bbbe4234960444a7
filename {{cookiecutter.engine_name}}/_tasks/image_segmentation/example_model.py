"""A worked example: a complete model.py for an ONNX model exported from your training framework. Copy it over
src/<package>/model.py and adapt the lines marked `# adapt`.

The model folder (MODEL_DIR) holds `model.onnx` and the class labels (`labels.txt`, one per line, or
`chariot_model_config.json` with `class_labels`). The model takes a 1 x 3 x H x W float RGB batch scaled to 0..1
and returns per-class logits for every pixel (1 x classes x H x W), class 0 being the
background. Add ONNX Runtime with `uv add 'onnxruntime==1.32.0'` (or onnxruntime-gpu).
"""

from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np

from chariot_support import ChariotModel, Image, Segmentation, TaskType, onnx_session, read_labels


class Model(ChariotModel):
    task_type = TaskType.IMAGE_SEGMENTATION
    thread_safe = True  # an ONNX Runtime session may run several requests at once

    def load(self, model_dir: Path) -> None:
        self.session = onnx_session(model_dir / "model.onnx", self.threads)  # on the GPU when there is one
        self.labels = read_labels(model_dir)
        model_input = self.session.get_inputs()[0]
        self.input_name = model_input.name
        self.height, self.width = model_input.shape[2:]  # the size the model was exported for

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Segmentation]]:
        return [self.segment(image) for image in images]

    def segment(self, image: Image) -> list[Segmentation]:
        batch = cv2.resize(image.pixels, (self.width, self.height)).transpose(2, 0, 1)[np.newaxis]
        (logits,) = self.session.run(None, {self.input_name: batch.astype(np.float32) / 255})  # adapt
        probabilities = np.exp(logits[0] - logits[0].max(axis=0))
        probabilities /= probabilities.sum(axis=0)
        best = probabilities.argmax(axis=0)
        results = []
        for index, label in enumerate(self.labels[1:], start=1):  # class 0 is the background
            inside = best == index
            if inside.any():
                score = float(probabilities[index][inside].mean())
                mask = cv2.resize(inside.astype(np.uint8), (image.width, image.height), interpolation=cv2.INTER_NEAREST)
                results.append(Segmentation.from_mask(label, score, mask))
        return results
