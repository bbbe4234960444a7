"""Where a request's id comes from, for every protocol: the body's id, else the X-Request-ID header, else Chariot's
`Chariot-Inference-Base-ID` header, else one the engine makes up (a UUID, new for each request). The reply and the
request's log line carry it, over REST (V2, the root /infer, chariot-v2, V1) and gRPC (the same names as metadata).

The id is chosen before the task type matters, so these run on one task type's engine."""

import json
import re

import grpc
import pytest
import requests
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub

from chariot_support.dev.grpc_client import grpc_request
from chariot_support.dev.testing import chariot_request, encode_image, image_input
from chariot_support.model.tasks import TaskType

BASE = "Chariot-Inference-Base-ID"
V2 = "/v2/models/m-demo/infer"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@pytest.fixture(scope="module")
def engine(demo_engine):
    return demo_engine(TaskType.OBJECT_DETECTION)


@pytest.fixture(scope="module")
def body(scene) -> dict:
    return chariot_request(image_input("image-0", scene.pixels))


def logged(engine, request_id: str) -> dict:
    """The request's log line (the one with its latency) under `request_id`."""
    log = engine.wait_for_log(f'"request_id": "{request_id}"')
    (line,) = [
        json.loads(entry)
        for entry in log.splitlines()
        if entry.startswith("{") and f'"request_id": "{request_id}"' in entry and '"latency_ms"' in entry
    ]
    return line


def reply_id(engine, body: dict, path: str = V2, **headers) -> str:
    reply = requests.post(engine.url + path, json=body, headers=headers, timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()["id"]


def test_the_body_id_then_x_request_id_then_the_base_id_then_a_new_one(engine, body):
    both = {BASE: "base-ignored", "X-Request-ID": "own-ignored"}
    assert reply_id(engine, {**body, "id": "in-the-body"}, **both) == "in-the-body"
    assert reply_id(engine, body, **both) == "own-ignored"
    assert reply_id(engine, body, **{BASE: "base-only"}) == "base-only"
    made = [reply_id(engine, body) for _ in range(2)]
    assert all(UUID.fullmatch(each) for each in made) and made[0] != made[1], made
    for request_id in ("in-the-body", "own-ignored", "base-only", *made):
        assert logged(engine, request_id)["status"] == 200


@pytest.mark.parametrize("path", [V2, V2 + "/", "/infer"])
def test_the_base_id_is_the_reply_id_and_the_logged_id_on_every_v2_path(engine, body, path):
    request_id = f"base{path.replace('/', '_')}"
    assert reply_id(engine, body, path, **{BASE: request_id}) == request_id
    assert logged(engine, request_id)["path"] == path


def test_a_refused_request_is_logged_under_the_base_id(engine):
    reply = requests.post(engine.url + V2, json={"inputs": []}, headers={BASE: "refused-base"}, timeout=30)
    assert reply.status_code == 400
    assert logged(engine, "refused-base")["status"] == 400


def test_chariot_v2_answers_with_the_id_in_its_header(engine, scene):
    image = {"input": encode_image(scene.pixels)}
    reply = requests.post(f"{engine.url}/infer", json=image, headers={BASE: "base-v2"}, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-request-id"] == "base-v2"
    line = logged(engine, "base-v2")
    assert (line["path"], line["status"]) == ("/infer", 200)
    own = requests.post(
        f"{engine.url}/infer", json=image, headers={BASE: "ignored", "X-Request-ID": "own-v2"}, timeout=30
    )
    assert own.headers["x-request-id"] == "own-v2"


def test_v1_predict_takes_the_base_id_too(engine, scene):
    instances = {"instances": [{"image": {"b64": encode_image(scene.pixels)}}]}
    reply = requests.post(
        f"{engine.url}/v1/models/m-demo:predict", json=instances, headers={BASE: "v1-base"}, timeout=30
    )
    assert reply.status_code == 200, reply.text
    assert logged(engine, "v1-base")["status"] == 200


def test_grpc_takes_the_same_ids_from_the_message_and_its_metadata(engine, body, model_name):
    base = (BASE.lower(), "grpc-base-ignored")
    with grpc.insecure_channel(engine.grpc_address) as channel:
        stub = GRPCInferenceServiceStub(channel)

        def answered_id(message, *metadata) -> str:
            return stub.ModelInfer(message, metadata=metadata, timeout=30).id

        plain = grpc_request(body, model_name)
        assert answered_id(grpc_request({**body, "id": "grpc-body"}, model_name), base) == "grpc-body"
        assert answered_id(plain, base, ("x-request-id", "grpc-own")) == "grpc-own"
        assert answered_id(plain, (BASE.lower(), "grpc-base")) == "grpc-base"
        made = [answered_id(plain) for _ in range(2)]
    assert all(UUID.fullmatch(each) for each in made) and made[0] != made[1], made
    for request_id in ("grpc-body", "grpc-own", "grpc-base"):
        line = logged(engine, request_id)
        assert line["protocol"] == "grpc" and line["status"] == 200


def test_made_up_ids_are_version_4_uuids_that_a_model_seeding_random_does_not_repeat():
    import random
    import uuid

    from chariot_support.pipeline.pipeline import new_request_id

    random.seed(7)  # a model that wants repeatable results seeds Python's generator...
    first = [new_request_id() for _ in range(3)]
    random.seed(7)  # ...in every process, or on every load
    ids = first + [new_request_id() for _ in range(1000)]
    assert len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 4 and uuid.UUID(i).variant == uuid.RFC_4122 for i in ids)
