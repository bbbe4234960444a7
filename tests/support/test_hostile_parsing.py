"""Nothing heavy runs on the event loop: bodies too dense to parse quickly are refused before parsing, V1 bodies
are parsed off the loop, and health answers within a second meanwhile; deep nesting is a 400 on every route."""

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from hostile import HealthProbe, healthy_and_reset

pytestmark = pytest.mark.hostile


@pytest.fixture
def engine(faulty_engine):
    """The session's faulty engine with default settings, checked live before each test."""
    return healthy_and_reset(faulty_engine)


def pixel_body(side: int) -> str:
    """A V1 :predict body with one image as pixel rows, as TensorFlow clients send it."""
    row = "[" + ",".join(["[0,0,0]"] * side) + "]"
    return '{"instances": [[' + ",".join([row] * side) + "]]}"


def test_health_answers_within_a_second_while_heavy_v1_bodies_arrive(engine):
    largest_legal = pixel_body(570)  # 975k values, under CHARIOT_MAX_ELEMENTS
    oversize = pixel_body(1100)  # 3.6M values in 25 MB: seconds of parsing with the GIL held
    with HealthProbe(engine) as probe, ThreadPoolExecutor(3) as pool:
        sent = [
            pool.submit(requests.post, f"{engine.url}/v1/models/m-faulty:predict", data=body, timeout=120)
            for body in (largest_legal, oversize, oversize)
        ]
        statuses = [f.result().status_code for f in sent]
    assert not probe.failures, probe.failures[:3]
    # The bodies took 0.23-0.35 s to be answered here, and each probe, one after another, about 0.1 s meanwhile: one
    # to four ran, how many depends on the machine. The first starts 50 ms in, while the bodies still arrive.
    assert probe.probes >= 1, "no health probe ran while the bodies arrived"
    assert probe.worst < 1.0, f"/v2/health/live took {probe.worst:.2f} s"
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
    from chariot_support.protocols.legacy import read_body

    with pytest.raises(BadRequest, match="nests too deep"):
        read_body(("[" * 1_000_000 + "]" * 1_000_000).encode())
