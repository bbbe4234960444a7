"""Every bad request in the catalogue (bad_requests.py), over every REST path the engine serves inference on: a
4xx `{"error"}` naming the input and the problem, after which the engine is healthy and answers a good request
exactly as before."""

import json
from pathlib import Path

import pytest
import requests
from bad_requests import (
    BOMB,
    BOMB_SIDE,
    CASES,
    CHARIOT_V2_TRANSPORTS,
    GOOD,
    REST_TRANSPORTS,
    Grpc,
    Parser,
    b64,
    image,
    request,
)

from chariot_support.tasks import TaskType

TRANSPORTS = [*REST_TRANSPORTS, Grpc(), *CHARIOT_V2_TRANSPORTS]
PAIRS = [(transport, case) for transport in TRANSPORTS for case in CASES if transport.carries(case)]


def infer_good(engine, model_name):
    response = requests.post(f"{engine.url}/v2/models/{model_name}/infer", data=json.dumps(GOOD), timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["outputs"]


@pytest.fixture(scope="module")
def reference(engine, model_name):
    return infer_good(engine, model_name)


def test_every_transport_carries_every_plain_case():
    for transport in REST_TRANSPORTS:
        assert [c.name for c in CASES if c.addressed_plainly and not transport.carries(c)] == [], transport.name


def test_chariot_v2_carries_the_cases_about_one_image_and_its_settings():
    json_form, _, file_form = CHARIOT_V2_TRANSPORTS
    assert sum(json_form.carries(c) for c in CASES) >= 20
    assert sum(file_form.carries(c) for c in CASES) >= 12, "the image file as the body, with the header"


def test_grpc_carries_what_a_grpc_client_can_express():
    parser = Parser(TaskType.OBJECT_DETECTION)
    left_out = [c.name for c in CASES if parser.carries(c) and not Grpc().carries(c)]
    # gRPC tensors are typed protobuf fields and parameters are scalars: mistyped values and object parameters
    # cannot be sent at all. Everything else in a valid envelope must travel.
    assert len(left_out) <= 12 and sum(Grpc().carries(c) for c in CASES) >= 45, left_out


@pytest.mark.parametrize("transport, case", PAIRS, ids=[f"{t.name}-{c.name}" for t, c in PAIRS])
def test_bad_request_is_refused_and_the_engine_serves_on(engine, model_name, reference, transport, case):
    status, body = transport.send(engine, model_name, case)
    assert status == case.status, body
    assert list(body) == ["error"] and isinstance(body["error"], str), body
    fragments = transport.fragments(case) if hasattr(transport, "fragments") else case.fragments
    missing = [f for f in fragments if f not in body["error"]]
    assert not missing, f"{missing} not in {body['error']!r}"
    assert engine.alive()
    for path in ("/v2/health/live", "/v2/health/ready", "/ready"):
        assert requests.get(engine.url + path, timeout=5).status_code == 200, path
    assert infer_good(engine, model_name) == reference


def _rss(pid: int) -> dict[str, int]:
    """The process's resident memory now and at its peak, in bytes, from the kernel's own accounting."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM")}


def test_a_decompression_bomb_is_refused_before_its_pixels_are_decoded(engine, model_name):
    decoded_size = BOMB_SIDE * BOMB_SIDE * 3
    before = _rss(engine.process.pid)
    response = requests.post(f"{engine.url}/infer", data=json.dumps(request(image(data=b64(BOMB)))), timeout=60)
    after = _rss(engine.process.pid)
    # Decoding it would have raised the engine's peak memory above what it held before by the decoded size.
    grew = after["VmHWM"] - max(before["VmHWM"], before["VmRSS"])
    assert grew < decoded_size // 4, f"peak memory grew by {grew / 1e6:.0f} MB for a {len(BOMB)} byte request"
    assert response.status_code == 400 and f"{BOMB_SIDE}x{BOMB_SIDE}" in response.json()["error"]
    assert len(BOMB) < 32 * 1024


def test_unknown_path(engine):
    missing = requests.get(engine.url + "/no/such/path", timeout=5)
    assert missing.status_code == 404 and missing.json() == {"error": "no route for GET /no/such/path"}
