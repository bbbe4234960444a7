"""Faces, with MediaPipe's BlazeFace short-range detector (face_detection_short_range.tflite) run by LiteRT."""

from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np
from ai_edge_litert.interpreter import Interpreter

from chariot_support import ChariotModel, Detection, Image, TaskType

SIZE = 128


def anchors() -> np.ndarray:
    """BlazeFace's 896 anchor centres: 2 per cell of a 16x16 grid, then 6 per cell of an 8x8 grid."""
    centres = []
    for grid, per_cell in ((16, 2), (8, 6)):
        for y in range(grid):
            for x in range(grid):
                centres += [((x + 0.5) / grid, (y + 0.5) / grid)] * per_cell
    return np.array(centres, np.float32)


class Model(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION
    thread_safe = False  # a LiteRT interpreter holds its tensors: one call at a time per copy
    copies = 2

    def load(self, model_dir: Path) -> None:
        self.net = Interpreter(str(model_dir / "face_detection_short_range.tflite"), num_threads=self.threads)
        self.net.allocate_tensors()
        self.anchors = anchors()

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Detection]]:
        return [self.faces(image) for image in images]

    def faces(self, image: Image) -> list[Detection]:
        pixels = cv2.resize(image.pixels, (SIZE, SIZE)).astype(np.float32) / 127.5 - 1
        self.net.set_tensor(self.net.get_input_details()[0]["index"], pixels[None])
        self.net.invoke()
        outputs = sorted(self.net.get_output_details(), key=lambda o: o["shape"][-1])
        scores = 1 / (1 + np.exp(-np.clip(self.net.get_tensor(outputs[0]["index"])[0, :, 0], -50, 50)))
        boxes = self.net.get_tensor(outputs[1]["index"])[0, :, :4] / SIZE
        centres = boxes[:, :2] + self.anchors
        corners = np.hstack([centres - boxes[:, 2:] / 2, centres + boxes[:, 2:] / 2])
        corners *= [image.width, image.height, image.width, image.height]
        keep = scores > 0.5
        boxes_xywh = [[x0, y0, x1 - x0, y1 - y0] for x0, y0, x1, y1 in corners[keep].tolist()]
        chosen = cv2.dnn.NMSBoxes(boxes_xywh, scores[keep].tolist(), 0.5, 0.3)
        return [
            Detection(label="face", score=float(scores[keep][i]), xmin=x0, ymin=y0, xmax=x1, ymax=y1)
            for i in np.array(chosen).reshape(-1)
            for x0, y0, x1, y1 in [np.clip(corners[keep][i], 0, [image.width, image.height] * 2).tolist()]
        ]
