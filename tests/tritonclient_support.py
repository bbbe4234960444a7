"""What the tritonclient checks share: the engine under test, a scene drawn in the test, and one client facade
over tritonclient's HTTP and gRPC modules.

These files run in a pytest process of their own (see test_tritonclient.py): tritonclient's gRPC messages and
MLServer's register the same protobuf names, so the two cannot be imported into one process. Nothing here
imports MLServer or the support package."""

import base64
import json
import os

import cv2
import numpy as np
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

URL = os.environ["ENGINE_URL"]
GRPC_ADDRESS = os.environ["ENGINE_GRPC_ADDRESS"]
MODEL = os.environ["ENGINE_MODEL"]
TASK = os.environ["ENGINE_TASK"]
PROMPTS = ["what colours are in the picture?", "is there a red box?"]
TRANSPORTS = ["http", "grpc"]
# A client's mistake and a missing model, as each transport reports them.
INVALID = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}
NOT_FOUND = {"http": "404", "grpc": "StatusCode.NOT_FOUND"}
INTERNAL = {"http": "500", "grpc": "StatusCode.INTERNAL"}


def scene_png(flip: bool = False) -> bytes:
    """A red box, a green disc and a blue rectangle turned 30 degrees, as a PNG file."""
    rgb = np.zeros((240, 320, 3), np.uint8)
    cv2.rectangle(rgb, (20, 30), (99, 89), (255, 0, 0), -1)
    cv2.circle(rgb, (250, 60), 30, (0, 255, 0), -1)
    corners = cv2.boxPoints(((160.0, 170.0), (100.0, 40.0), 30.0))
    cv2.fillPoly(rgb, [np.round(corners).astype(np.int32)], (0, 0, 255))
    if flip:
        rgb = np.ascontiguousarray(rgb[::-1])
    ok, encoded = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    return encoded.tobytes()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def plain_rest(model: str, images: dict[str, bytes | str], parameters: dict | None = None, **body) -> requests.Response:
    """The same request as a plain REST client sends it: JSON with base64 of each file (text goes as it is)."""
    inputs = [
        {"name": n, "shape": [1], "datatype": "BYTES", "data": [b64(d) if isinstance(d, bytes) else d]}
        for n, d in images.items()
    ]
    payload = {**body, "inputs": inputs, **({"parameters": parameters} if parameters else {})}
    return requests.post(f"{URL}/v2/models/{model}/infer", data=json.dumps(payload), timeout=60)


def plain_rest_results(response: requests.Response) -> dict[str, list]:
    assert response.status_code == 200, response.text
    return {o["name"]: o["data"][0] for o in response.json()["outputs"]}


class Client:
    """tritonclient over one transport, with the calls the checks make."""

    def __init__(self, transport: str):
        self.transport = transport
        if transport == "http":
            self.lib = httpclient
            self.client = httpclient.InferenceServerClient(URL.removeprefix("http://"), network_timeout=60)
        else:
            self.lib = grpcclient
            self.client = grpcclient.InferenceServerClient(GRPC_ADDRESS)

    def image(self, name: str, data: bytes, *, encode: bool = True, binary: bool = True):
        """A Chariot image input: one BYTES element holding base64 of the file (or the file itself), sent over HTTP
        as tritonclient sends it by default, in the binary tensor data extension (or in JSON)."""
        return self._bytes_input(name, b64(data).encode() if encode else data, binary)

    def text(self, name: str, text: str):
        """A BYTES input holding `text` as it is."""
        return self._bytes_input(name, text.encode(), True)

    def _bytes_input(self, name: str, element: bytes, binary: bool):
        tensor = self.lib.InferInput(name, [1], "BYTES")
        array = np.array([element], dtype=np.object_)
        if self.transport == "http":
            tensor.set_data_from_numpy(array, binary_data=binary)
        else:
            tensor.set_data_from_numpy(array)
        return tensor

    def parameters(self, **values) -> dict:
        """gRPC parameters cannot hold lists: those travel JSON-encoded, as the engine accepts."""
        if self.transport == "grpc":
            return {k: json.dumps(v) if isinstance(v, list) else v for k, v in values.items()}
        return values

    def infer(self, model: str, inputs: list, **kwargs):
        return self.client.infer(model, inputs, **kwargs)

    def results(self, result, name: str) -> list:
        """An output's results: over HTTP in JSON, or, as tritonclient asks for them unless told otherwise, as binary
        data (one BYTES element holding their JSON text, as gRPC has them)."""
        if self.transport == "http" and "data" in result.get_output(name):
            return result.get_output(name)["data"][0]
        return json.loads(result.as_numpy(name)[0])

    def response(self, result) -> dict:
        return result.get_response() if self.transport == "http" else result.get_response(as_json=True)

    def metadata_parameter(self, result) -> str | None:
        parameters = self.response(result).get("parameters", {})
        value = parameters.get("metadata")
        return value["string_param"] if isinstance(value, dict) else value

    def error(self, call) -> InferenceServerException:
        try:
            call()
        except InferenceServerException as error:
            return error
        raise AssertionError("the call succeeded; an error was expected")
