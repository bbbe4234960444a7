"""The text in a picture, read with PaddleOCR's PP-OCRv4 detector and recogniser (ch_PP-OCRv4_det_infer.onnx,
ch_PP-OCRv4_rec_infer.onnx, which carries its alphabet). Every prompt is answered with the text, line by line."""

from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np

from chariot_support import ChariotModel, Image, PromptAnswer, TaskType, onnx_session


class Model(ChariotModel):
    task_type = TaskType.IMAGE_TEXT_TO_TEXT
    thread_safe = True  # ONNX Runtime sessions may run from several threads at once

    def load(self, model_dir: Path) -> None:
        self.detector = onnx_session(model_dir / "ch_PP-OCRv4_det_infer.onnx", self.threads)
        self.reader = onnx_session(model_dir / "ch_PP-OCRv4_rec_infer.onnx", self.threads)
        alphabet = self.reader.get_modelmeta().custom_metadata_map["character"].splitlines()
        self.alphabet = ["", *alphabet, " "]  # CTC's blank first, and a space the alphabet leaves out

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[PromptAnswer]]:
        answers = []
        for image in images:
            text = "\n".join(self.read(image.bgr[y0:y1, x0:x1]) for x0, y0, x1, y1 in self.lines(image))
            # A reader answers every question with the page's text; asked none, it reads the page all the same.
            answers.append([PromptAnswer(prompt=prompt, answer=text) for prompt in image.prompts or ("",)])
        return answers

    def lines(self, image: Image) -> list[tuple[int, int, int, int]]:
        """Boxes around the lines of text, top to bottom, in pixels. The detector sees the picture with its long side
        at 960 px (PaddleOCR's det_limit_side_len) and sides a multiple of 32."""
        scale = 960 / max(image.width, image.height)
        width, height = (max(32, round(side * scale / 32) * 32) for side in (image.width, image.height))
        pixels = cv2.resize(image.bgr, (width, height)).astype(np.float32) / 127.5 - 1
        (text,) = self.detector.run(None, {self.detector.get_inputs()[0].name: pixels.transpose(2, 0, 1)[None]})
        mask = cv2.dilate((text[0, 0] > 0.3).astype(np.uint8), np.ones((5, 5), np.uint8))
        contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        boxes = []
        for x, y, w, h in sorted((cv2.boundingRect(c) for c in contours), key=lambda b: (b[1], b[0])):
            if h >= 8:
                sx, sy = image.width / width, image.height / height
                pad = h // 3
                boxes.append(
                    (
                        max(0, int((x - pad) * sx)),
                        max(0, int((y - pad) * sy)),
                        min(image.width, int((x + w + pad) * sx)),
                        min(image.height, int((y + h + pad) * sy)),
                    )
                )
        return boxes

    def read(self, line: np.ndarray) -> str:
        width = max(8, round(48 * line.shape[1] / line.shape[0]))
        pixels = cv2.resize(line, (width, 48)).astype(np.float32) / 127.5 - 1
        (scores,) = self.reader.run(None, {self.reader.get_inputs()[0].name: pixels.transpose(2, 0, 1)[None]})
        best = scores[0].argmax(axis=1)
        kept = [i for n, i in enumerate(best) if i and (n == 0 or i != best[n - 1])]  # CTC: no blanks, no repeats
        return "".join(self.alphabet[i] for i in kept).strip()
