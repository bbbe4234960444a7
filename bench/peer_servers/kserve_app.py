"""The demo as a KServe custom model: a kserve.Model whose predict takes the V2 InferRequest, served by
kserve.ModelServer with its own command-line options and defaults (one uvicorn worker, its gRPC server beside the REST
one); the V2 REST route is /v2/models/<name>/infer:

    python kserve_app.py --model_name m-demo --http_port 8080 --grpc_port 8081

predict answers with the V2 response as a dict, one of the return types KServe's Model documents: an InferResponse
writes every BYTES element as a string (str() of it), which cannot carry the list of regions the engine answers with.
"""

from __future__ import annotations

import argparse
import uuid

import kserve
from demo_answer import Demo, decode
from kserve import InferRequest


class DemoModel(kserve.Model):
    def __init__(self, name: str):
        super().__init__(name)
        self.demo = None
        self.ready = False

    def load(self) -> bool:
        self.demo = Demo()
        self.ready = True
        return self.ready

    def predict(self, payload: InferRequest, headers: dict[str, str] | None = None) -> dict:
        outputs = [self.demo.output(tensor.name, self.demo.find(decode(tensor.data[0]))) for tensor in payload.inputs]
        return {"model_name": self.name, "id": payload.id or str(uuid.uuid4()), "outputs": outputs}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(parents=[kserve.model_server.parser])
    args, _ = parser.parse_known_args()
    model = DemoModel(args.model_name)
    model.load()
    kserve.ModelServer().start([model])
