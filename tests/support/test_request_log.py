"""The engine's request log: one JSON line per request, with its id, model, status and latency."""

import json
import uuid

import requests

from chariot_support.dev.testing import chariot_request, image_input


def request_lines(log: str, request_id: str) -> list[dict]:
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return [line for line in lines if line["logger"] == "chariot_support.requests" and line["request_id"] == request_id]


def test_each_request_is_one_json_line(engine, model_name, scene):
    good, bad = f"good-{uuid.uuid4().hex[:8]}", f"bad-{uuid.uuid4().hex[:8]}"
    body = chariot_request(image_input("image-0", scene.pixels, prompts=["what is there?"]))
    url = f"{engine.url}/v2/models/{model_name}/infer/"
    assert requests.post(url, data=json.dumps({**body, "id": good}), timeout=30).status_code == 200
    refused = {**body, "id": bad, "inputs": [{**body["inputs"][0], "data": ["aGVsbG8="]}]}
    assert requests.post(url, data=json.dumps(refused), timeout=30).status_code == 400
    log = engine.wait_for_log(bad)
    (served,) = request_lines(log, good)
    (failed,) = request_lines(log, bad)
    for line, status in ((served, 200), (failed, 400)):
        assert line["status"] == status and line["level"] == "info"
        assert line["model"] == model_name and line["protocol"] == "rest"
        assert line["method"] == "POST" and line["path"] == f"/v2/models/{model_name}/infer/"
        assert isinstance(line["latency_ms"], float) and 0 < line["latency_ms"] < 30_000
