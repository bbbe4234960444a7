"""Request ids from Chariot's `Chariot-Inference-Base-ID` header: the reply's id and the request's log line carry it
when the body has no id and there is no X-Request-ID, over REST (V2, the root /infer, V1) and gRPC (metadata)."""

import json

import grpc
import pytest
import requests
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub

from chariot_support.dev.testing import chariot_request, grpc_request, image_input
from chariot_support.model.tasks import TaskType

BASE = "Chariot-Inference-Base-ID"


def body(task: TaskType, scene, **top) -> dict:
    parameters = {"prompts": ["what colours?"]} if task is TaskType.IMAGE_TEXT_TO_TEXT else {}
    return {**chariot_request(image_input("image-0", scene.pixels, **parameters)), **top}


def logged(engine, request_id: str) -> dict:
    log = engine.wait_for_log(f'"request_id": "{request_id}"')
    (line,) = [
        json.loads(entry)
        for entry in log.splitlines()
        if entry.startswith("{") and f'"request_id": "{request_id}"' in entry and '"latency_ms"' in entry
    ]
    return line


@pytest.mark.parametrize("path", ["/v2/models/m-demo/infer", "/v2/models/m-demo/infer/", "/infer"])
def test_base_id_is_the_reply_id_and_the_logged_id(engine, task, scene, path):
    request_id = f"base-{task.name.lower()}{path.replace('/', '_')}"
    reply = requests.post(engine.url + path, json=body(task, scene), headers={BASE: request_id}, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json()["id"] == request_id
    assert logged(engine, request_id)["status"] == 200


def test_x_request_id_comes_before_the_base_id(engine, task, scene):
    own = f"own-{task.name.lower()}"
    reply = requests.post(
        f"{engine.url}/v2/models/m-demo/infer",
        json=body(task, scene),
        headers={BASE: "base-ignored", "X-Request-ID": own},
        timeout=30,
    )
    assert reply.json()["id"] == own


def test_the_body_id_comes_first(engine, task, scene):
    reply = requests.post(
        f"{engine.url}/v2/models/m-demo/infer",
        json=body(task, scene, id="in-the-body"),
        headers={BASE: "base-ignored"},
        timeout=30,
    )
    assert reply.json()["id"] == "in-the-body"


def test_a_refused_request_is_logged_under_the_base_id(engine, task):
    request_id = f"refused-{task.name.lower()}"
    reply = requests.post(
        f"{engine.url}/v2/models/m-demo/infer", json={"inputs": []}, headers={BASE: request_id}, timeout=30
    )
    assert reply.status_code == 400
    assert logged(engine, request_id)["status"] == 400


def test_grpc_base_id_metadata(engine, task, scene, model_name):
    request_id = f"grpc-base-{task.name.lower()}"
    with grpc.insecure_channel(engine.grpc_address) as channel:
        answer = GRPCInferenceServiceStub(channel).ModelInfer(
            grpc_request(body(task, scene), model_name), metadata=[(BASE.lower(), request_id)], timeout=30
        )
    assert answer.id == request_id
    line = logged(engine, request_id)
    assert line["protocol"] == "grpc" and line["status"] == 200


def test_v1_predict_takes_the_base_id_too(engine, task, scene):
    from chariot_support.dev.testing import encode_image

    request_id = f"v1-base-{task.name.lower()}"
    instance = {"image": {"b64": encode_image(scene.pixels)}}
    if task is TaskType.IMAGE_TEXT_TO_TEXT:
        instance["prompts"] = ["what colours?"]
    reply = requests.post(
        f"{engine.url}/v1/models/m-demo:predict", json={"instances": [instance]}, headers={BASE: request_id}, timeout=30
    )
    assert reply.status_code == 200, reply.text
    assert logged(engine, request_id)["status"] == 200
