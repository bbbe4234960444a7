"""The demo as a LitServe API: decode_request reads the images out of the V2 body, predict runs the demo model on
them, encode_response writes the answer; LitServer on the CPU with its defaults (one inference worker, as many API
server processes), its route POST /predict and its health check GET /health:

    python litserve_app.py --port 8000
"""

from __future__ import annotations

import argparse

import litserve as ls
from demo_answer import MODEL, Demo, decode


class DemoAPI(ls.LitAPI):
    def setup(self, device):
        self.demo = Demo()

    def decode_request(self, request):
        return [(tensor["name"], decode(tensor["data"][0])) for tensor in request["inputs"]]

    def predict(self, images):
        return [(name, self.demo.find(pixels)) for name, pixels in images]

    def encode_response(self, output):
        return {"model_name": MODEL, "outputs": [self.demo.output(name, found) for name, found in output]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    server = ls.LitServer(DemoAPI(), accelerator="cpu")
    server.run(host=args.host, port=args.port)
