"""Requests to the warming engine (tests/support/warming_engine) and what its answers say."""

import json
import time

import numpy as np
import requests

from chariot_support.dev.testing import chariot_request, image_input

PIXELS = np.zeros((16, 16, 3), np.uint8)


def ask(engine, request_id: str) -> tuple[float, str, str, int]:
    """Send one image named after `request_id`, with that id; the seconds the answer took, and the process, GPUs and
    call count of the model copy that answered."""
    body = chariot_request(image_input(f"image-{request_id}", PIXELS))
    started = time.perf_counter()
    response = requests.post(
        f"{engine.url}/v2/models/m-warming/infer",
        data=json.dumps(body),
        headers={"x-request-id": request_id},
        timeout=30,
    )
    took = time.perf_counter() - started
    assert response.status_code == 200, response.text
    pid, gpus, calls = response.json()["outputs"][0]["data"][0][0]["label"].split("/")
    return took, pid, gpus, int(calls)


def json_lines(log: str) -> list[dict]:
    """The log's JSON lines (every line the engine writes is one)."""
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]
