"""A worked example: a complete model.py for a YOLO detector exported to ONNX (Ultralytics'
`yolo export model=yolo11n.pt format=onnx`, YOLOv8 and later). Copy it over src/<package>/model.py and adapt the
lines marked `# adapt`.

The model folder (MODEL_DIR) holds `model.onnx`, and the class labels in `labels.txt` (one per line) or
`chariot_model_config.json`; without either, the names the export wrote into the model are used. The model takes a
1 x 3 x H x W float RGB picture scaled to 0..1, letterboxed (resized with its proportions kept, padded with grey),
and returns raw candidates, 1 x (4 + classes) x N: each column a box as centre and size (cx cy w h) in input
pixels, then one score per class. Several candidates cover each object, so non-maximum suppression keeps the best.
Add ONNX Runtime with `uv add 'onnxruntime==1.32.0'` (or onnxruntime-gpu).
"""

import ast
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from chariot_support import ChariotModel, Detection, Image, TaskType, corners, letterbox, nms, onnx_session, read_labels

# Candidates scoring under this are dropped before suppression, however low the request's score_threshold: a YOLO
# head scores thousands of candidates, nearly all near 0, and suppressing them all would take longer than the model.
MIN_SCORE = 0.01  # adapt
IOU_THRESHOLD = 0.45  # adapt: the overlap above which a lower-scoring box of the same class is dropped
MAX_RESULTS = 300


class Model(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION
    thread_safe = True  # an ONNX Runtime session may run several requests at once

    def load(self, model_dir: Path) -> None:
        self.session = onnx_session(model_dir / "model.onnx", self.threads)  # on the GPU when there is one
        model_input = self.session.get_inputs()[0]
        self.input_name = model_input.name
        self.height, self.width = model_input.shape[2:]  # the size the model was exported for (640 x 640)
        try:
            self.labels = read_labels(model_dir)
        except FileNotFoundError:
            # Ultralytics writes the class names into the export as a Python dict: {0: 'person', 1: 'bicycle', ...}
            names = ast.literal_eval(self.session.get_modelmeta().custom_metadata_map["names"])
            self.labels = [names[i] for i in sorted(names)]

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Detection]]:
        # One picture per run: an export has a batch of 1 unless it was made with dynamic=True.
        return [self.detect(image) for image in images]

    def detect(self, image: Image) -> list[Detection]:
        pixels, fit = letterbox(image.pixels, self.width, self.height)
        batch = pixels.transpose(2, 0, 1)[np.newaxis].astype(np.float32) / 255
        (candidates,) = self.session.run(None, {self.input_name: batch})  # adapt: your model's output
        candidates = candidates[0].T  # N x (4 + classes)
        classes = candidates[:, 4:].argmax(axis=1)
        scores = candidates[np.arange(len(candidates)), 4 + classes]
        floor = max(MIN_SCORE, image.score_threshold or 0.0)
        keep = scores >= floor
        boxes, scores, classes = corners(candidates[keep, :4]), scores[keep], classes[keep]
        best = nms(boxes, scores, classes, iou_threshold=IOU_THRESHOLD, max_results=MAX_RESULTS)
        # Every box left with its score: the engine drops those under the request's score_threshold.
        return [
            Detection(label=self.labels[int(c)], score=float(s), xmin=x0, ymin=y0, xmax=x1, ymax=y1)
            for (x0, y0, x1, y1), s, c in zip(
                fit.to_picture(boxes[best]).tolist(), scores[best].tolist(), classes[best].tolist(), strict=True
            )
        ]
