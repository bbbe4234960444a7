"""What every peer does with a request, whatever serves it: read the V2 body's base64 JPEGs with OpenCV (as the
baseline does), run the demo model, and answer in the chariot-v2-kserve shape the engine answers with: one output
per input, named as the input, whose one BYTES element is the list of what was found in that image.

Imports only what the demo model needs (numpy, OpenCV, pydantic, orjson), so that it runs in each peer's own venv.
"""

from __future__ import annotations

import base64
import os
import uuid

import cv2
import numpy as np

from chariot_support.model.demo import ColourFinder

MODEL = "m-demo"


def decode(value: str | bytes) -> np.ndarray:
    pixels = cv2.imdecode(np.frombuffer(base64.b64decode(value), np.uint8), cv2.IMREAD_COLOR_RGB)
    if pixels is None:
        raise ValueError("not an image")
    return pixels


def detections(finder: ColourFinder, pixels: np.ndarray) -> list[dict]:
    return [
        {
            "label": r.label,
            "score": r.score,
            "xmin": float(r.bbox[0]),
            "xmax": float(r.bbox[2]),
            "ymin": float(r.bbox[1]),
            "ymax": float(r.bbox[3]),
        }
        for r in finder.find(pixels)
    ]


def segments(finder: ColourFinder, pixels: np.ndarray) -> list[dict]:
    return [
        {
            "label": r.label,
            "score": r.score,
            "contour": [[{"x": float(x), "y": float(y)} for x, y in r.contour.reshape(-1, 2).tolist()]],
        }
        for r in finder.find(pixels)
    ]


FORMATS = {"detection": detections, "segmentation": segments}


class Demo:
    """The demo model for one task (`PEER_TASK`, detection unless set)."""

    def __init__(self, task: str | None = None):
        self.finder = ColourFinder()
        self.format = FORMATS[task or os.environ.get("PEER_TASK", "detection")]

    def find(self, pixels: np.ndarray) -> list[dict]:
        return self.format(self.finder, pixels)

    def output(self, name: str, found: list[dict]) -> dict:
        return {"name": name, "shape": [1], "datatype": "BYTES", "data": [found]}

    def outputs(self, inputs: list[dict]) -> list[dict]:
        """The answer's outputs for the V2 body's `inputs`: one image per input, its first element."""
        return [self.output(tensor["name"], self.find(decode(tensor["data"][0]))) for tensor in inputs]

    def answer(self, body: dict) -> dict:
        return {"model_name": MODEL, "id": body.get("id") or str(uuid.uuid4()), "outputs": self.outputs(body["inputs"])}
