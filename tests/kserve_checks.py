"""KServe's own Python SDK (kserve 0.21) against a running engine, over REST and gRPC. Run by test_kserve_sdk.py in
the .venv-kserve interpreter, which has KServe and not MLServer: the engine is found through ENGINE_URL,
ENGINE_GRPC_ADDRESS, ENGINE_MODEL and ENGINE_TASK."""

import asyncio
import base64
import functools
import json
import os
import zlib

import grpc
import httpx
import numpy as np
import pytest
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig
from kserve.protocol.infer_type import RequestedOutput

URL = os.environ["ENGINE_URL"]
GRPC_ADDRESS = os.environ["ENGINE_GRPC_ADDRESS"]
MODEL = os.environ["ENGINE_MODEL"]
TASK = os.environ["ENGINE_TASK"]
KEYS = {
    "Image Classification": {"label", "score"},
    "Object Detection": {"label", "score", "xmin", "ymin", "xmax", "ymax"},
    "Oriented Object Detection": {"label", "score", "cx", "cy", "w", "h", "r"},
    "Image Segmentation": {"label", "score", "contour"},
    "Image Text to Text": {"prompt", "answer"},
}
PROMPTS = ["what colours are in the picture?"]
RED_SQUARE = {(8, 8, 40, 40): b"\xff\x00\x00"}
# A green square beside the red one: a second result for the tasks that find regions.
TWO_SQUARES = {**RED_SQUARE, (44, 8, 60, 24): b"\x00\xff\x00"}


def png(squares: dict = RED_SQUARE, width: int = 64, height: int = 48) -> str:
    """Base64 of a PNG with coloured squares (x0, y0, x1, y1) on black, built without any image library."""

    def pixel(x: int, y: int) -> bytes:
        inside = [colour for (x0, y0, x1, y1), colour in squares.items() if x0 <= x < x1 and y0 <= y < y1]
        return inside[0] if inside else b"\x00\x00\x00"

    rows = b"".join(b"\x00" + b"".join(pixel(x, y) for x in range(width)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x02\x00\x00\x00"
    raw = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return base64.b64encode(raw).decode()


def settings(prompts_as_json: bool = False, several: bool = False) -> dict:
    """An image's parameters; with `several`, ones that make every task answer more than one result."""
    parameters: dict = {}
    if TASK == "Image Text to Text":
        prompts = [*PROMPTS, "is there a square?"] if several else PROMPTS
        # gRPC parameters hold no lists: prompts travel JSON-encoded there.
        parameters["prompts"] = json.dumps(prompts) if prompts_as_json else prompts
    if several and TASK == "Image Classification":
        parameters["action"] = "predict_proba"  # a score for every label, not just the best
    return parameters


def request(prompts_as_json: bool = False, data: str | None = None, several: bool = False) -> InferRequest:
    parameters = settings(prompts_as_json, several)
    picture = data or png(TWO_SQUARES if several else RED_SQUARE)
    image = InferInput(name="image-0", shape=[1], datatype="BYTES", data=[picture], parameters=parameters or None)
    return InferRequest(model_name=MODEL, infer_inputs=[image], request_id="kserve-sdk")


@functools.cache
def plain_answer() -> list:
    """The engine's results for the red square, asked over plain HTTP without the SDK: what the SDK must read."""
    body = {
        "inputs": [{"name": "image-0", "shape": [1], "datatype": "BYTES", "data": [png()], "parameters": settings()}]
    }
    response = httpx.post(f"{URL}/v2/models/{MODEL}/infer", json=body, timeout=30)
    response.raise_for_status()
    return response.json()["outputs"][0]["data"][0]


def check_results(results) -> None:
    """The results the SDK read for the red square: the engine's own answer, which every task's demo finds."""
    assert isinstance(results, list) and results, f"no results for a picture with a red square: {results!r}"
    for result in results:
        assert KEYS[TASK] <= set(result), result
    assert results == plain_answer()


def rest(call):
    async def run():
        async with InferenceRESTClient(RESTConfig(protocol="v2", timeout=30)) as client:
            return await call(client)

    return asyncio.run(run())


def grpc_call(call):
    async def run():
        async with InferenceGRPCClient(GRPC_ADDRESS, timeout=30, retries=2) as client:
            return await call(client)

    return asyncio.run(run())


def test_rest_health_answers_are_read():
    assert rest(lambda c: c.is_server_live(URL)) is True
    assert rest(lambda c: c.is_server_ready(URL)) is True
    assert rest(lambda c: c.is_model_ready(URL, MODEL)) is True


def test_rest_infer_gives_each_image_its_result_list():
    response = rest(lambda c: c.infer(URL, request(), model_name=MODEL))
    assert response.id == "kserve-sdk"
    (output,) = response.outputs
    assert output.name == "image-0" and output.datatype == "BYTES"
    check_results(output.data[0])


def test_rest_infer_as_a_dict_is_the_engine_reply():
    body = {
        "inputs": [
            {
                "name": "image-0",
                "shape": [1],
                "datatype": "BYTES",
                "data": [png()],
                "parameters": settings(),
            }
        ]
    }
    response = rest(lambda c: c.infer(URL, body, model_name=MODEL))
    check_results(response.outputs[0].data[0])


def test_rest_as_numpy_cannot_hold_result_lists():
    """What the SDK cannot do: its numpy view reshapes a BYTES output's data to the output's shape, [1]. A list of
    one result comes back as that result alone, the list around it lost; a longer list does not fit at all."""
    one = rest(lambda c: c.infer(URL, request(), model_name=MODEL)).outputs[0]
    (result,) = one.data[0]
    array = one.as_numpy()
    assert array.shape == (1,) and array.dtype == object and array[0] == result
    several = rest(lambda c: c.infer(URL, request(several=True), model_name=MODEL)).outputs[0]
    assert len(several.data[0]) >= 2, several.data
    with pytest.raises(ValueError, match=rf"cannot reshape array of size {len(several.data[0])} into shape \(1,\)"):
        several.as_numpy()


@pytest.mark.parametrize("binary_output", [True, False], ids=["binary-output", "json-output"])
def test_rest_infer_of_the_file_in_binary_tensor_data(binary_output):
    """The SDK's set_data_from_numpy sends a tensor in the binary tensor data extension unless told otherwise (an
    InferInput built with `data` goes as JSON): here the PNG file itself. Its output comes back as binary data when
    asked for, one BYTES element holding the results' JSON text, which the SDK gives as a string."""
    image = InferInput(name="image-0", shape=[1], datatype="BYTES", parameters=settings() or None)
    image.set_data_from_numpy(np.array([base64.b64decode(png())], dtype=np.object_))
    requested = [RequestedOutput("image-0", {"binary_data": binary_output})]
    sent = InferRequest(model_name=MODEL, infer_inputs=[image], request_id="kserve-sdk", request_outputs=requested)
    headers: dict = {}
    (output,) = rest(lambda c: c.infer(URL, sent, model_name=MODEL, response_headers=headers)).outputs
    assert ("inference-header-content-length" in headers) is binary_output, headers
    check_results(json.loads(output.data[0]) if binary_output else output.data[0])


def test_rest_errors_carry_the_engine_message():
    bad = request(data="not base64!!")
    with pytest.raises(httpx.HTTPStatusError) as caught:
        rest(lambda c: c.infer(URL, bad, model_name=MODEL))
    assert caught.value.response.status_code == 400
    assert "base64" in caught.value.response.json()["error"]


def test_grpc_health():
    assert grpc_call(lambda c: c.is_server_live()) is True
    assert grpc_call(lambda c: c.is_server_ready()) is True
    assert grpc_call(lambda c: c.is_model_ready(MODEL)) is True


def test_grpc_infer_gives_json_encoded_result_lists():
    response = grpc_call(lambda c: c.infer(request(prompts_as_json=True)))
    (output,) = response.outputs
    assert output.name == "image-0"
    (encoded,) = output.data
    check_results(json.loads(encoded))


def test_grpc_errors_are_invalid_argument_with_the_engine_message():
    bad = request(prompts_as_json=True, data="not base64!!")
    with pytest.raises(grpc.RpcError) as caught:
        grpc_call(lambda c: c.infer(bad))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "base64" in caught.value.details()
