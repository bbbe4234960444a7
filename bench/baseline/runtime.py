"""The baseline: what a user would write without the engine. A bare MLServer runtime that decodes the same base64
image with the same library, runs the same demo model, and answers with a JSON string per image."""

from __future__ import annotations

import asyncio
import base64
import json

import cv2
import numpy as np
from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput

from chariot_support.model.demo import ColourFinder


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


class BaselineRuntime(MLModel):
    async def load(self) -> bool:
        self._finder = ColourFinder()
        self._format = FORMATS[self.settings.parameters.extra["task"]]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        # A thread keeps the event loop serving other requests while this one decodes and predicts.
        outputs = await asyncio.to_thread(self._work, payload)
        return InferenceResponse(model_name=self.name, id=payload.id, outputs=outputs)

    def _work(self, payload: InferenceRequest) -> list[ResponseOutput]:
        outputs = []
        for tensor in payload.inputs:
            results = self._format(self._finder, decode(tensor.data.root[0]))
            outputs.append(StringCodec.encode_output(tensor.name, [json.dumps(results)]))
        return outputs
