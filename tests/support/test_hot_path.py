"""The engine's own V2 inference route answers exactly as MLServer's route did: the same body, CloudEvents headers
and inference metrics, and bodies in unusual but valid shapes still read as MLServer reads them."""

import json
import re

import pytest
import requests

from chariot_support.tasks import TaskType
from chariot_support.testing import chariot_metadata, chariot_request, image_input, run_demo_engine


@pytest.fixture(scope="module")
def segmenter(scene):
    with run_demo_engine(TaskType.IMAGE_SEGMENTATION) as running:
        yield running


def infer(engine, body, **headers):
    return requests.post(f"{engine.url}/v2/models/m-demo/infer", data=json.dumps(body), headers=headers, timeout=30)


def successes(engine) -> float:
    text = requests.get(f"http://127.0.0.1:{engine.metrics_port}/metrics", timeout=5).text
    found = re.search(r'^model_infer_request_success_total\{model="m-demo",version="None"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_a_plain_and_an_unusual_body_get_the_same_answer(segmenter, scene):
    plain = chariot_request(image_input("image-0", scene.pixels), metadata=chariot_metadata())
    unusual = json.loads(json.dumps(plain))
    unusual["inputs"][0]["shape"] = ["1"]  # a string MLServer's request model reads as the number
    first, second = infer(segmenter, {**plain, "id": "one"}), infer(segmenter, {**unusual, "id": "one"})
    assert first.status_code == second.status_code == 200, (first.text[:300], second.text[:300])
    assert first.json() == second.json()
    assert first.json()["outputs"][0]["data"][0], "the demo finds the scene's shapes"
    cloud_events = {k: v for k, v in first.headers.items() if k.startswith("ce-")}
    assert cloud_events == {k: v for k, v in second.headers.items() if k.startswith("ce-")}
    assert cloud_events["ce-id"] == "one" and cloud_events["ce-modelid"] == "m-demo"


def test_the_request_id_comes_from_the_body_then_the_header_then_is_made(segmenter, scene):
    body = chariot_request(image_input("image-0", scene.pixels))
    assert infer(segmenter, {**body, "id": "from-body"}, **{"x-request-id": "from-header"}).json()["id"] == "from-body"
    assert infer(segmenter, body, **{"x-request-id": "from-header"}).json()["id"] == "from-header"
    made = infer(segmenter, body).json()["id"]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", made), made


def test_served_inferences_count_in_mlservers_metrics(segmenter, scene):
    before = successes(segmenter)
    body = chariot_request(image_input("image-0", scene.pixels))
    for _ in range(3):
        assert infer(segmenter, body).status_code == 200
    assert infer(segmenter, {"inputs": []}).status_code == 400
    assert successes(segmenter) == before + 3
