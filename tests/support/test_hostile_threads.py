"""Predicts that hang past CHARIOT_PREDICT_TIMEOUT keep their threads, but only up to CHARIOT_MAX_STUCK_THREADS:
then the engine says it is not ready and answers 503 at once, and it serves again when they return."""

import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
from hostile import HERE, threads, wait_until

from chariot_support.dev.testing import chariot_request, image_input, run_engine

pytestmark = pytest.mark.hostile

PIXELS = np.zeros((32, 48, 3), np.uint8)


def infer(engine, fault=None, **parameters):
    body = chariot_request(image_input("image", PIXELS, fault=fault, **parameters))
    return requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=json.dumps(body), timeout=30)


def ready(engine) -> int:
    return requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code


def test_hung_predicts_keep_threads_bounded_then_the_engine_recovers():
    env = {
        "CHARIOT_PREDICT_TIMEOUT": "1",
        "CHARIOT_THREADS": "2",
        "CHARIOT_MAX_STUCK_THREADS": "4",
        "FAULTY_THREAD_SAFE": "1",
    }
    with run_engine("faulty_engine", src=HERE, env=env) as engine:
        baseline = threads(engine.process.pid)
        # 40 hung predicts that return after 4 s, sent 8 at a time: without a cap, each would add a thread. All 40 are
        # answered within 1.05-2.01 s here, so the checks below run while the first hung predicts still hang.
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda _: infer(engine, "hang", seconds=4).status_code, range(40)))
        assert set(statuses) <= {503, 504} and 503 in statuses, statuses
        assert threads(engine.process.pid) <= baseline + 4 + 1, "threads grew past CHARIOT_MAX_STUCK_THREADS"
        assert ready(engine) == 503
        started = time.monotonic()
        busy = infer(engine)
        assert busy.status_code == 503 and "CHARIOT_MAX_STUCK_THREADS" in busy.json()["error"]
        assert busy.headers.get("retry-after") == "1"
        assert time.monotonic() - started < 0.5
        assert wait_until(lambda: ready(engine) == 200, 15), "readiness never came back after the predicts returned"
        assert infer(engine).status_code == 200
        assert threads(engine.process.pid) <= baseline + 4 + 1
