"""The demo as a BentoML service: one @bentoml.api whose `inputs` argument takes the V2 body's inputs as they are
(BentoML's route reads a JSON object of the api's arguments, so the V2 body is that object), served with its
defaults by

    bentoml serve bentoml_service:Demo --host 127.0.0.1 --port 3000

its route POST /infer, its readiness GET /readyz.
"""

from __future__ import annotations

import bentoml
from demo_answer import MODEL
from demo_answer import Demo as DemoModel


@bentoml.service
class Demo:
    def __init__(self) -> None:
        self.demo = DemoModel()

    @bentoml.api
    def infer(self, inputs: list[dict]) -> dict:
        return {"model_name": MODEL, "outputs": self.demo.outputs(inputs)}
