"""KServe's own Python SDK (kserve 0.21) against a running engine, over REST and gRPC. Run by test_kserve_sdk.py in
the .venv-kserve interpreter, which has KServe and not MLServer: the engine is found through ENGINE_URL,
ENGINE_GRPC_ADDRESS, ENGINE_MODEL and ENGINE_TASK."""

import asyncio
import base64
import json
import os
import zlib

import grpc
import httpx
import pytest
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig

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


def png(width: int = 64, height: int = 48) -> str:
    """Base64 of a PNG with a red square on black, built without any image library."""
    rows = b"".join(
        b"\x00" + b"".join(b"\xff\x00\x00" if 8 <= x < 40 and 8 <= y < 40 else b"\x00\x00\x00" for x in range(width))
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + b"\x08\x02\x00\x00\x00"
    raw = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return base64.b64encode(raw).decode()


def request(prompts_as_json: bool = False, data: str | None = None) -> InferRequest:
    parameters = {}
    if TASK == "Image Text to Text":
        # gRPC parameters hold no lists: prompts travel JSON-encoded there.
        parameters["prompts"] = json.dumps(PROMPTS) if prompts_as_json else PROMPTS
    image = InferInput(name="image-0", shape=[1], datatype="BYTES", data=[data or png()], parameters=parameters or None)
    return InferRequest(model_name=MODEL, infer_inputs=[image], request_id="kserve-sdk")


def check_results(results) -> None:
    assert isinstance(results, list)
    for result in results:
        assert KEYS[TASK] <= set(result), result


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
                "parameters": {"prompts": PROMPTS} if TASK == "Image Text to Text" else {},
            }
        ]
    }
    response = rest(lambda c: c.infer(URL, body, model_name=MODEL))
    check_results(response.outputs[0].data[0])


def test_rest_as_numpy_cannot_hold_result_lists():
    """What the SDK cannot do: its numpy view of a BYTES output expects strings, not JSON objects."""
    response = rest(lambda c: c.infer(URL, request(), model_name=MODEL))
    try:
        array = response.outputs[0].as_numpy()
    except Exception:  # noqa: BLE001 - whichever error the SDK raises, the result lists are read from .data
        return
    assert array.dtype == object


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
