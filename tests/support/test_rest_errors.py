"""End to end: every REST error is written one way (rest/errors.py), whichever part of the engine refuses the request:
the inference front, the app's routes, MLServer's own routes, the legacy routes and the connection's HTTP protocol."""

import json
import socket

import pytest
import requests

from chariot_support.dev.testing import chariot_request, image_input
from chariot_support.model.tasks import TaskType

NAME = "modèle-é"  # not ASCII: JSON may write it as itself (UTF-8) or escaped (\u00e8); the engine writes UTF-8


@pytest.fixture(scope="module")
def engine(demo_engine):
    return demo_engine(TaskType.OBJECT_DETECTION)


def test_every_error_body_is_utf8_json_whichever_route_refuses(engine, scene):
    image = image_input("image-0", scene.pixels, action="détecter")
    refused = {
        "front, V2": requests.post(f"{engine.url}/v2/models/{NAME}/infer", json=chariot_request(image), timeout=30),
        "front, root": requests.post(f"{engine.url}/infer", json=chariot_request(image), timeout=30),
        "front, V1": requests.post(f"{engine.url}/v1/models/{NAME}:predict", json={"instances": []}, timeout=30),
        "legacy routes": requests.get(f"{engine.url}/v1/models/{NAME}", timeout=30),
        "app": requests.get(f"{engine.url}/v2/models/{NAME}/ready", timeout=30),
        "MLServer's route": requests.get(f"{engine.url}/v2/models/{NAME}", timeout=30),
    }
    for where, answer in refused.items():
        assert 400 <= answer.status_code < 500 and answer.headers["content-type"] == "application/json", (
            where,
            answer.status_code,
            answer.headers,
        )
        sent = "détecter" if where == "front, root" else NAME
        assert json.loads(answer.content).keys() == {"error"}, (where, answer.content)
        assert sent.encode() in answer.content and b"\\u" not in answer.content, (where, answer.content)


@pytest.mark.parametrize(
    "request_bytes, reason",
    [
        (b"GARBAGE\r\n\r\n", "Invalid method encountered"),
        (b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", "Invalid header token"),
    ],
    ids=["garbage request line", "bad header"],
)
def test_a_malformed_request_is_answered_with_json_and_the_engine_serves_on(engine, request_bytes, reason):
    host, port = engine.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(request_bytes)
        answer = b""
        while chunk := connection.recv(65536):  # the engine closes the connection after its answer
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head.lower(), answer
    assert json.loads(body)["error"].startswith(f"the request is not valid HTTP/1.1 ({reason})"), body
    assert requests.get(f"{engine.url}/v2/health/live", timeout=10).status_code == 200
