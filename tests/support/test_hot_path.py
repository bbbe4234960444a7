"""The engine answers V2 inference itself (rest/inference.py, and its own route behind it) exactly as MLServer's
route did: the same body, CloudEvents headers, inference and HTTP metrics, and bodies in unusual but valid shapes
still read as MLServer reads them."""

import base64
import json
import re

import pytest
import requests
from bad_requests import BROWSER, CONFIGURATIONS

from chariot_support.dev.testing import chariot_metadata, chariot_request, image_input
from chariot_support.model.tasks import TaskType


@pytest.fixture(scope="module")
def segmenter(demo_engine):
    return demo_engine(TaskType.IMAGE_SEGMENTATION)


def infer(engine, body, **headers):
    return requests.post(f"{engine.url}/v2/models/m-demo/infer", data=json.dumps(body), headers=headers, timeout=30)


def metric(engine, name: str, labels: str) -> float:
    text = requests.get(f"http://127.0.0.1:{engine.metrics_port}/metrics", timeout=5).text
    found = re.search(rf"^{name}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def successes(engine) -> float:
    return metric(engine, "model_infer_request_success_total", 'model="m-demo",version="1"')


def http_count(engine, route: str, status: int, what: str = "requests_total") -> float:
    labels = f'app_name="mlserver",method="POST",path="{route}",status_code="{status}"'
    return metric(engine, f"rest_server_{what}", labels)


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


def test_served_inferences_count_in_mlservers_metrics(segmenter, scene):
    before = successes(segmenter)
    body = chariot_request(image_input("image-0", scene.pixels))
    for _ in range(3):
        assert infer(segmenter, body).status_code == 200
    assert infer(segmenter, {"inputs": []}).status_code == 400
    assert successes(segmenter) == before + 3


def test_inference_counts_in_mlservers_http_metrics_under_its_route(segmenter, scene):
    """Dashboards built on MLServer's REST metrics see every inference, by route template and status."""
    route, slashed = "/v2/models/{model_name}/infer", "/v2/models/{model_name}/infer/"
    before = {
        (route, 200): http_count(segmenter, route, 200),
        (route, 400): http_count(segmenter, route, 400),
        (slashed, 200): http_count(segmenter, slashed, 200),
    }
    timed = http_count(segmenter, route, 200, "request_duration_seconds_count")
    plain = chariot_request(image_input("image-0", scene.pixels))
    unusual = json.loads(json.dumps(plain))
    unusual["inputs"][0]["shape"] = ["1"]  # read by MLServer's request model in the app: counted by the app
    for body in (plain, plain, unusual):
        assert infer(segmenter, body).status_code == 200
    assert infer(segmenter, {"inputs": []}).status_code == 400
    url = f"{segmenter.url}/v2/models/m-demo/infer/"
    assert requests.post(url, data=json.dumps(plain), timeout=30).status_code == 200
    assert http_count(segmenter, route, 200) == before[(route, 200)] + 3
    assert http_count(segmenter, route, 400) == before[(route, 400)] + 1
    assert http_count(segmenter, slashed, 200) == before[(slashed, 200)] + 1
    assert http_count(segmenter, route, 200, "request_duration_seconds_count") == timed + 3
    in_progress = metric(segmenter, "rest_server_requests_in_progress", 'app_name="mlserver",method="POST"')
    assert in_progress == 0


def test_with_mlservers_cors_on_inference_answers_carry_its_headers(demo_engine, scene):
    """MLServer adds CORS headers in a middleware inside its app: with CORS configured, inference goes through it."""
    engine = demo_engine(TaskType.OBJECT_DETECTION, CONFIGURATIONS["cors"])
    body = json.dumps(chariot_request(image_input("image-0", scene.pixels)))
    answer = requests.post(f"{engine.url}/v2/models/m-demo/infer", data=body, headers=BROWSER, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == BROWSER["Origin"]
    assert answer.json()["outputs"][0]["data"][0], "the demo finds the scene's shapes"


def test_the_root_infer_is_answered_by_the_front_as_by_the_app(segmenter, scene):
    """chariot-v2 (a JSON body, an image file) and chariot-v2-kserve at the root /infer: counted under "/infer" in
    MLServer's HTTP metrics and logged under the served model; an unusual chariot-v2-kserve body still reads as
    MLServer reads it."""
    image_b64 = chariot_request(image_input("image-0", scene.pixels))["inputs"][0]["data"][0]
    before = http_count(segmenter, "/infer", 200)
    url = f"{segmenter.url}/infer"
    chariot_v2 = requests.post(url, json={"input": image_b64}, headers={"x-request-id": "root-1"}, timeout=30)
    assert chariot_v2.status_code == 200 and chariot_v2.headers["x-request-id"] == "root-1"
    assert chariot_v2.json()["output"], "the demo finds the scene's shapes"
    as_file = requests.post(url, data=base64.b64decode(image_b64), headers={"content-type": "image/png"}, timeout=30)
    assert as_file.json() == chariot_v2.json()
    plain = chariot_request(image_input("image-0", scene.pixels))
    unusual = json.loads(json.dumps(plain))
    unusual["inputs"][0]["shape"] = ["1"]
    kserve = [requests.post(url, data=json.dumps(body), timeout=30) for body in (plain, unusual)]
    assert [r.status_code for r in kserve] == [200, 200]
    assert kserve[0].json()["outputs"] == kserve[1].json()["outputs"]
    assert kserve[0].json()["outputs"][0]["data"][0] == chariot_v2.json()["output"]
    assert http_count(segmenter, "/infer", 200) == before + 4
    refused = requests.post(url, json={"input": image_b64, "parameters": {"action": "dance"}}, timeout=30)
    assert refused.status_code == 400 and "'dance'" in refused.json()["error"]
    log = segmenter.wait_for_log('"request_id": "root-1"')  # written after the answer
    line = next(json.loads(x) for x in log.splitlines() if '"root-1"' in x and '"path"' in x)
    assert (line["model"], line["path"], line["status"]) == ("m-demo", "/infer", 200)
