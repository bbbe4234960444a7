"""Nothing heavy runs on the event loop: bodies too dense to parse quickly are refused before parsing, V1 bodies
are parsed off the loop, and health answers within a second meanwhile; deep nesting is a 400 on every route."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from hostile import HERE

from chariot_support.testing import run_engine

PROBE_TIMEOUT = 5.0  # seconds; a probe that takes longer has failed whatever it answers


@pytest.fixture(scope="module")
def engine():
    with run_engine("faulty_engine", src=HERE) as running:
        yield running


def pixel_body(side: int) -> str:
    """A V1 :predict body with one image as pixel rows, as TensorFlow clients send it."""
    row = "[" + ",".join(["[0,0,0]"] * side) + "]"
    return '{"instances": [[' + ",".join([row] * side) + "]]}"


def test_health_answers_within_a_second_while_heavy_v1_bodies_arrive(engine):
    largest_legal = pixel_body(570)  # 975k values, under CHARIOT_MAX_ELEMENTS
    oversize = pixel_body(1100)  # 3.6M values in 25 MB: seconds of parsing with the GIL held
    took: list[float] = []
    failures: list[str] = []
    done = threading.Event()

    def probe():
        while not done.is_set():
            started = time.monotonic()
            try:
                status = requests.get(f"{engine.url}/v2/health/live", timeout=PROBE_TIMEOUT).status_code
                if status != 200:
                    failures.append(f"/v2/health/live answered {status}")
            except requests.RequestException as error:  # a probe that timed out or was refused is a failure too
                failures.append(f"/v2/health/live: {type(error).__name__}: {error}")
            took.append(time.monotonic() - started)
            time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        with ThreadPoolExecutor(3) as pool:
            sent = [
                pool.submit(requests.post, f"{engine.url}/v1/models/m-faulty:predict", data=body, timeout=120)
                for body in (largest_legal, oversize, oversize)
            ]
            statuses = [f.result().status_code for f in sent]
    finally:
        done.set()
        prober.join()
    assert not failures, failures[:3]
    assert len(took) >= 3, f"only {len(took)} health probes ran while the bodies arrived"
    assert max(took) < 1.0, f"/v2/health/live took {max(took):.2f} s"
    assert statuses == [200, 413, 413]


@pytest.mark.parametrize("path", ["/v1/models/m-faulty:predict", "/v2/models/m-faulty/infer", "/infer"])
def test_deep_nesting_is_a_400_on_every_route(engine, path):
    deep = '{"instances": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = requests.post(engine.url + path, data=deep, timeout=30)
    assert response.status_code == 400
    assert "nests deeper" in response.json()["error"]
    assert requests.get(f"{engine.url}/v2/health/live", timeout=5).status_code == 200


def test_a_v1_body_nested_just_past_the_parser_is_a_400_too():
    from chariot_support.errors import BadRequest
    from chariot_support.legacy import read_body

    with pytest.raises(BadRequest, match="nests too deep"):
        read_body(("[" * 1_000_000 + "]" * 1_000_000).encode())
