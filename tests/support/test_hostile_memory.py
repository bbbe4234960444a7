"""Memory admission: the decoded pixels of one request are capped, those of all requests in flight fit a budget
(the rest wait briefly, then get a 503 with Retry-After), a request whose client had its 504 decodes no more, and
a request's numbers are capped before they are parsed. Each engine is watched and killed past a few GiB. The attacks
with default settings take turns on the session's faulty engine, those of a smaller budget on one engine of their own;
each test reads the peak RSS of its own attack (reset before it)."""

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from hostile import HERE, RSSGuard, cpu_seconds, healthy_and_reset, peak_rss_mib, png_request, wait_until

from chariot_support.dev.testing import run_engine

pytestmark = pytest.mark.hostile

URL = "/v2/models/m-faulty/infer"


@pytest.fixture
def engine(faulty_engine):
    """The session's faulty engine with default settings, checked live and its peak RSS reset."""
    return healthy_and_reset(faulty_engine)


@pytest.fixture(scope="module")
def budget_engine():
    """An engine with a decode budget of 300 MB (two requests of 2 x 4000 x 4000 pixels), a 0.5 s admission wait,
    eight threads and 1,000 elements a request, shared by the tests of those limits."""
    env = {
        "CHARIOT_DECODE_BUDGET_MB": "300",
        "CHARIOT_ADMISSION_WAIT": "0.5",
        "CHARIOT_THREADS": "8",
        "CHARIOT_MAX_ELEMENTS": "1000",
    }
    with run_engine("faulty_engine", src=HERE, env=env) as running:
        yield running


@pytest.fixture
def budgeted(budget_engine):
    return healthy_and_reset(budget_engine)


def post(engine, body, timeout=60):
    return requests.post(
        engine.url + URL, data=body if isinstance(body, (bytes, str)) else json.dumps(body), timeout=timeout
    )


def concurrently(engine, bodies):
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda b: post(engine, b), bodies))


def test_four_png_bombs_with_default_settings_are_413_and_the_engine_stays_small(engine):
    # The attack as seen: 64 black 10000x10000 PNGs per request (25 MB of base64, 19 GB of pixels), four at once.
    bomb = json.dumps(png_request(10_000, 64))
    with RSSGuard(engine.process, 3 * 1024) as guard:
        responses = concurrently(engine, [bomb] * 4)
    assert not guard.tripped, "the engine passed 3 GiB and was killed"
    assert [r.status_code for r in responses] == [413] * 4
    assert "CHARIOT_MAX_REQUEST_PIXELS" in responses[0].json()["error"]
    assert post(engine, png_request(64, 1)).status_code == 200
    assert peak_rss_mib(engine.process.pid) < 3 * 1024


def test_requests_over_the_decode_budget_wait_then_get_503_with_retry_after(budgeted):
    # Each request decodes 2 x 4000 x 4000 x 3 = 96 MB and holds it 1.5 s in predict; counted with OpenCV's working
    # copy of one image while it decodes (48 MB), the budget holds two.
    engine = budgeted
    body = json.dumps(png_request(4000, 2, fault="sleep", seconds=1.5))
    before = peak_rss_mib(engine.process.pid)
    with RSSGuard(engine.process, 3 * 1024) as guard:
        responses = concurrently(engine, [body] * 6)
    assert not guard.tripped
    statuses = sorted(r.status_code for r in responses)
    assert statuses.count(200) >= 2 and statuses.count(503) >= 2, statuses
    refused = next(r for r in responses if r.status_code == 503)
    assert refused.headers.get("retry-after") == "1"
    assert "CHARIOT_DECODE_BUDGET_MB" in refused.json()["error"]
    # Two requests' pixels at a time, not six: the budget plus room for bodies and predict's own work.
    assert peak_rss_mib(engine.process.pid) - before < 200 + 200, "six requests would hold 576 MB of pixels"
    assert post(engine, png_request(64, 1)).status_code == 200


def test_a_request_that_can_never_fit_the_budget_is_413_naming_it(budgeted):
    response = post(budgeted, png_request(4000, 7))  # 336 MB decoded, past the 300 MB budget
    assert response.status_code == 413
    assert "CHARIOT_DECODE_BUDGET_MB" in response.json()["error"]


def test_decoding_stops_once_the_client_had_its_504():
    # 24 images of 0.17 s decoding each: about 2 s on two threads, cut off by a 1 s timeout.
    env = {
        "CHARIOT_PREDICT_TIMEOUT": "1",
        "CHARIOT_THREADS": "2",
        "CHARIOT_MAX_REQUEST_PIXELS": "400000000",
        "CHARIOT_DECODE_BUDGET_MB": "2048",
    }
    with run_engine("faulty_engine", src=HERE, env=env) as engine:
        with RSSGuard(engine.process, 3 * 1024) as guard:
            response = post(engine, png_request(4000, 24))
            assert response.status_code == 504
            time.sleep(0.4)  # the images being decoded at the 504 finish
            start = cpu_seconds(engine.process.pid)
            time.sleep(1.5)
            spent = cpu_seconds(engine.process.pid) - start
        assert not guard.tripped
        assert spent < 0.4, f"the engine spent {spent:.2f} s of CPU after the client had its answer"


def test_a_huge_numeric_tensor_is_refused_before_it_is_parsed(engine):
    # 29M INT64 elements in 58 MB of JSON cost 17 times their body when parsed; 4M in 8 MB show the same.
    values = ",".join(["1"] * 4_000_000)
    tensor = f'{{"name": "x", "shape": [4000000], "datatype": "INT64", "data": [{values}]}}'
    image = json.dumps(png_request(64, 1)["inputs"][0])
    body = f'{{"inputs": [{image}, {tensor}]}}'
    before = peak_rss_mib(engine.process.pid)
    with RSSGuard(engine.process, 3 * 1024) as guard:
        responses = concurrently(engine, [body] * 4)
    assert not guard.tripped
    assert [r.status_code for r in responses] == [413] * 4
    assert "CHARIOT_MAX_ELEMENTS" in responses[0].json()["error"]
    assert peak_rss_mib(engine.process.pid) - before < 200
    assert wait_until(lambda: post(engine, png_request(64, 1)).status_code == 200, 5)


def test_the_element_cap_holds_for_tensors_that_fit_the_body_check(budgeted):
    engine = budgeted
    body = png_request(64, 1)
    body["inputs"].append({"name": "x", "shape": [2, 600], "datatype": "FP32", "data": [[0.5] * 600] * 2})
    response = post(engine, body)
    assert response.status_code == 413
    assert "CHARIOT_MAX_ELEMENTS" in response.json()["error"]
    body["inputs"][1] = {"name": "x", "shape": [2, 400], "datatype": "FP32", "data": [[0.5] * 400] * 2}
    assert post(engine, body).status_code == 200
