"""Property: whatever body a client posts to the engine's inference paths, the answer is a 200 or a 4xx
`{"error"}`, never a 5xx or a dropped connection, and the engine stays healthy."""

import json

import requests
from bad_requests import GOOD
from fuzzing import examples, requests_
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PATHS = ["/v2/models/{model}/infer", "/v2/models/{model}/infer/", "/infer"]
BOUNDED = settings(
    max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


def answered_as_a_client(response):
    assert response.status_code < 500, response.text
    if response.status_code != 200:
        body = response.json()
        assert list(body) == ["error"] and body["error"], body


# Three in four of these bodies are valid envelopes that reach the engine's parser, and many are answered by predict:
# two thirds as many as the raw bodies take about the same time. Each task type's engine gets its own draws.
@settings(BOUNDED, max_examples=examples(40))
@given(body=requests_, path=st.sampled_from(PATHS))
def test_any_json_body_gets_a_client_answer(engine, model_name, body, path):
    url = engine.url + path.format(model=model_name)
    answered_as_a_client(requests.post(url, data=json.dumps(body), timeout=60))


@BOUNDED
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode), path=st.sampled_from(PATHS))
def test_any_raw_body_gets_a_client_answer(engine, model_name, raw, path):
    answered_as_a_client(requests.post(engine.url + path.format(model=model_name), data=raw, timeout=60))


def test_the_engine_is_healthy_after_the_fuzzing(engine, model_name):
    # Named to sort after the fuzzers, which pytest runs first in file order.
    assert engine.alive()
    assert requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code == 200
    good = requests.post(f"{engine.url}/v2/models/{model_name}/infer", data=json.dumps(GOOD), timeout=60)
    assert good.status_code == 200, good.text
