"""The baseline: what a user would write without the engine. A bare MLServer runtime that decodes the same base64
image with the same library, runs the same demo model, and answers with a JSON string per image."""

from __future__ import annotations

import asyncio
import json

from demo_answer import FORMATS, decode  # bench/peer_servers: the work every server in the bench does alike
from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput

from chariot_support.model.demo import ColourFinder


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
