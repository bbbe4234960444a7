"""End to end: the pipeline checks a request whole before it waits for anything. Behind slow predicts that hold every
thread, a body that is not an image, or an image cut short, is answered 400 at once on every protocol, and so is a
request the parser refuses before any image is read; none is queued behind the model's work (never a 503 or 504)."""

import base64
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import requests
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub

from chariot_support.dev.grpc_client import grpc_request
from chariot_support.dev.testing import chariot_request, encode_image, image_input

MODEL = "m-faulty"
PIXELS = np.full((48, 64, 3), 90, np.uint8)
JPEG = base64.b64decode(encode_image(PIXELS, ".jpg"))
PNG = base64.b64decode(encode_image(PIXELS, ".png"))
GIF = base64.b64decode(encode_image(np.indices((48, 64, 3)).sum(axis=0).astype(np.uint8), ".gif"))
# Each bad file, and what its 400 says of it.
BAD_FILES = {
    "not an image": (b"a letter, not a picture " * 8, "is not an image this engine can read"),
    "truncated JPEG": (JPEG[: len(JPEG) * 6 // 10], "JPEG file is cut short"),
    "truncated PNG": (PNG[: len(PNG) * 6 // 10], "PNG file is cut short"),
    "truncated GIF": (GIF[: len(GIF) * 6 // 10], "GIF file is cut short"),
}


def v2_body(raw: bytes, **parameters) -> dict:
    body = chariot_request(image_input("image-0", PIXELS), **parameters)
    body["inputs"][0]["data"] = [base64.b64encode(raw).decode()]
    return body


def rest_refusals(engine, raw: bytes) -> dict[str, requests.Response]:
    """The answers to `raw` sent as chariot-v2-kserve's V2 JSON, at the root /infer, and as chariot-v2's file body."""
    post = requests.post
    return {
        "V2 JSON": post(f"{engine.url}/v2/models/{MODEL}/infer", data=json.dumps(v2_body(raw)), timeout=60),
        "chariot-v2-kserve": post(f"{engine.url}/infer", data=json.dumps(v2_body(raw)), timeout=60),
        "chariot-v2 file body": post(
            f"{engine.url}/infer", data=raw, headers={"Content-Type": "application/octet-stream"}, timeout=60
        ),
    }


def test_bad_images_behind_slow_predicts_are_refused_at_once_on_every_protocol(faulty_engine):
    engine = faulty_engine
    # One predict that sleeps holds the model's one copy; behind it, more requests than the engine has threads
    # (one per CPU) hold every thread, waiting for that copy. Nothing reaches the model before the sleeper returns.
    slow = ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 1) + 3)
    sleeper = slow.submit(
        requests.post,
        f"{engine.url}/v2/models/{MODEL}/infer",
        data=json.dumps(v2_body(PNG, fault="sleep", seconds=4)),
        timeout=60,
    )
    threading.Event().wait(0.3)
    waiting = [
        slow.submit(requests.post, f"{engine.url}/infer", data=json.dumps(v2_body(PNG)), timeout=60)
        for _ in range((os.cpu_count() or 1) + 2)
    ]
    threading.Event().wait(0.5)
    try:
        with grpc.insecure_channel(engine.grpc_address) as channel:
            stub = GRPCInferenceServiceStub(channel)
            for case, (raw, said) in BAD_FILES.items():
                for protocol, answer in rest_refusals(engine, raw).items():
                    assert answer.status_code == 400, (case, protocol, answer.status_code, answer.text)
                    error = answer.json()["error"]
                    named = "the request body" if protocol == "chariot-v2 file body" else "input 'image-0'"
                    assert named in error and said in error, (case, protocol, error)
                try:
                    stub.ModelInfer(grpc_request(v2_body(raw), MODEL), timeout=60)
                    raise AssertionError(f"{case} over gRPC was answered as a good request")
                except grpc.RpcError as refused:
                    assert refused.code() is grpc.StatusCode.INVALID_ARGUMENT, (case, refused.code(), refused.details())
                    assert "input 'image-0'" in refused.details() and said in refused.details(), refused.details()
            good = image_input("image-0", PIXELS)
            unparsed = {
                "bad shape": chariot_request({**good, "shape": [2]}),
                "bad base64": chariot_request({**good, "data": ["not base64!"]}),
                "unknown action": chariot_request(image_input("image-0", PIXELS, action="dance")),
            }
            for case, body in unparsed.items():
                reply = requests.post(f"{engine.url}/v2/models/{MODEL}/infer", json=body, timeout=60)
                assert reply.status_code == 400, (case, reply.status_code, reply.text)
        assert not sleeper.done(), "every bad request should be answered while the slow predict still runs"
    finally:
        answers = [sleeper.result(), *(w.result() for w in waiting)]
        slow.shutdown()
    assert [a.status_code for a in answers] == [200] * len(answers), [a.text for a in answers if a.status_code != 200]
