"""Every bad request in the catalogue (bad_requests.py), in every protocol the engine serves inference in: a 4xx
`{"error"}` naming the input and the problem, after which the engine is healthy and answers a good request exactly
as before.

A request is refused before its task type matters, so the catalogue runs on one task type's engine; the parser runs
it for every task (test_decoding.py), and Image Text to Text, which reads its prompts, gets the prompt cases over V2
and gRPC too. The engine's other REST configurations (CORS, gzip) wrap the same answers: they get a sample, one case
of each status over each REST protocol, which must answer as the default does, with CORS headers a browser can read
and gzip bodies that are still the `{"error"}`.
"""

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import requests
from bad_requests import (
    BOMB,
    BOMB_SIDE,
    BROWSER,
    CASES,
    CHARIOT_V2_TRANSPORTS,
    CONFIGURATIONS,
    GOOD,
    REST_TRANSPORTS,
    V1_TRANSPORTS,
    Answer,
    Case,
    Grpc,
    Parser,
    b64,
    image,
    request,
)

from chariot_support.model.tasks import TaskType

# What a gRPC client gets for each HTTP status the catalogue expects: gRPC's own codes of the same meaning.
GRPC_CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 404: grpc.StatusCode.NOT_FOUND}
# Starlette's GZipMiddleware, which MLServer's setting turns on, compresses answers of this many bytes and more.
GZIP_MINIMUM = 500
# The case the gzip configuration gets for a 400: its answer is long enough to be compressed.
LONG_ERROR = next(c for c in CASES if c.name == "unknown action at length")


@dataclass(frozen=True)
class Run:
    """Which engine (configuration and task type) a protocol's cases are sent to, and which cases."""

    configuration: str
    task: TaskType
    transport: object
    only_prompts: bool = False

    @property
    def engine(self) -> str:
        return f"{self.configuration}-{self.task.name.lower()}"

    def cases(self):
        return [c for c in CASES if self.transport.carries(c) and (not self.only_prompts or "prompts" in c.name)]


def sample(configuration: str, transport) -> list[Case]:
    """One case of each status `transport` carries: the first in the catalogue, or for gzip's 400, the long one."""
    chosen = {}
    for case in CASES:
        if transport.carries(case) and case.status not in chosen:
            chosen[case.status] = LONG_ERROR if configuration == "gzip" and case.status == 400 else case
    return list(chosen.values())


REST_FORMS = [*REST_TRANSPORTS, *CHARIOT_V2_TRANSPORTS, *V1_TRANSPORTS]
RUNS = [
    *(Run("default", TaskType.OBJECT_DETECTION, t) for t in [*REST_FORMS, Grpc()]),
    *(Run("default", TaskType.IMAGE_TEXT_TO_TEXT, t, only_prompts=True) for t in (REST_TRANSPORTS[0], Grpc())),
]
SENT = [(run, case) for run in RUNS for case in run.cases()]
SAMPLED = [
    (Run(configuration, TaskType.OBJECT_DETECTION, t), case)
    for configuration in ("cors", "gzip")
    for t in REST_FORMS
    for case in sample(configuration, t)
]


@dataclass(frozen=True)
class Served:
    running: object  # chariot_support.dev.testing.RunningEngine
    headers: dict  # what every request to it carries
    reference: list  # its outputs for the good request


def infer_good(engine, headers: dict) -> requests.Response:
    return requests.post(f"{engine.url}/v2/models/m-demo/infer", data=json.dumps(GOOD), headers=headers, timeout=60)


@pytest.fixture(scope="module")
def engines(demo_engine):
    """engines(configuration, task) -> the shared demo engine of that configuration serving that task's demo, with
    what its good request answers."""
    served: dict[tuple[str, TaskType], Served] = {}

    def engine(configuration: str, task: TaskType) -> Served:
        if (configuration, task) not in served:
            running = demo_engine(task, CONFIGURATIONS[configuration])
            headers = BROWSER if configuration == "cors" else {}
            good = infer_good(running, headers)
            assert good.status_code == 200, good.text
            served[configuration, task] = Served(running, headers, good.json()["outputs"])
        return served[configuration, task]

    return engine


def test_every_transport_carries_every_plain_case():
    for transport in REST_TRANSPORTS:
        assert [c.name for c in CASES if c.addressed_plainly and not transport.carries(c)] == [], transport.name


def test_the_other_protocols_carry_the_cases_about_one_image_and_its_settings():
    json_form, _, file_form = CHARIOT_V2_TRANSPORTS
    assert sum(json_form.carries(c) for c in CASES) >= 20
    assert sum(file_form.carries(c) for c in CASES) >= 12, "the image file as the body, with the header"
    for v1 in V1_TRANSPORTS:
        assert [c.name for c in CASES if json_form.carries(c) and not v1.carries(c)] == [], v1.name


def test_grpc_carries_what_a_grpc_client_can_express():
    parser = Parser(TaskType.OBJECT_DETECTION)
    left_out = [c.name for c in CASES if parser.carries(c) and not Grpc().carries(c)]
    # gRPC tensors are typed protobuf fields and parameters are scalars: mistyped values and object parameters
    # cannot be sent at all. Everything else in a valid envelope must travel.
    assert len(left_out) <= 12 and sum(Grpc().carries(c) for c in CASES) >= 45, left_out


def refused_and_served_on(served: Served, transport, case: Case) -> Answer:
    """Send `case`: the refusal it must get, and the engine healthy and answering the good request as before."""
    engine = served.running
    answer = transport.send(engine, "m-demo", case, served.headers)
    expected = GRPC_CODES[case.status] if isinstance(transport, Grpc) else case.status
    assert answer.status == expected, answer.body
    assert list(answer.body) == ["error"] and isinstance(answer.body["error"], str), answer.body
    fragments = transport.fragments(case) if hasattr(transport, "fragments") else case.fragments
    missing = [f for f in fragments if f not in answer.body["error"]]
    assert not missing, f"{missing} not in {answer.body['error']!r}"
    assert engine.alive()
    # Ready, and the good request answered as before: the engine serves on (readiness implies liveness).
    assert requests.get(engine.url + "/v2/health/ready", timeout=5).status_code == 200
    good = infer_good(engine, served.headers)
    assert good.status_code == 200 and good.json()["outputs"] == served.reference, good.text
    return answer


@pytest.mark.parametrize(
    "run, case", SENT, ids=[f"{run.engine}-{run.transport.name}-{case.name}" for run, case in SENT]
)
def test_bad_request_is_refused_and_the_engine_serves_on(engines, run, case):
    refused_and_served_on(engines(run.configuration, run.task), run.transport, case)


@pytest.mark.parametrize(
    "run, case", SAMPLED, ids=[f"{run.engine}-{run.transport.name}-{case.name}" for run, case in SAMPLED]
)
def test_cors_and_gzip_wrap_the_same_refusal(engines, run, case):
    answer = refused_and_served_on(engines(run.configuration, run.task), run.transport, case)
    default = run.transport.send(engines("default", run.task).running, "m-demo", case, {})
    assert (answer.status, answer.body) == (default.status, default.body), "the default configuration answers so"
    if run.configuration == "cors":
        assert answer.headers.get("access-control-allow-origin") == BROWSER["Origin"], "a browser could not read this"
    if case is LONG_ERROR:
        assert len(json.dumps(answer.body)) >= GZIP_MINIMUM, "the error is too short for gzip to compress"
        assert answer.headers.get("content-encoding") == "gzip", "the error went back uncompressed"


def test_every_configuration_answers_a_good_request_alike_over_every_rest_protocol(engines):
    good = Case("good", GOOD, 200, ())
    for transport in REST_FORMS:
        answers = {}
        for configuration in CONFIGURATIONS:
            served = engines(configuration, TaskType.OBJECT_DETECTION)
            answer = transport.send(served.running, "m-demo", good, served.headers)
            assert answer.status == 200, (configuration, transport.name, answer.body)
            answers[configuration] = {k: v for k, v in answer.body.items() if k != "id"}  # each request's own id
        assert answers["cors"] == answers["gzip"] == answers["default"], transport.name


@pytest.mark.parametrize("transport", REST_TRANSPORTS, ids=[t.name for t in REST_TRANSPORTS])
@pytest.mark.parametrize("configuration", ["default", "gzip"])
def test_a_gzip_encoded_body_is_answered_as_the_plain_body_is(engines, configuration, transport):
    """A body sent with Content-Encoding: gzip (tritonclient's request compression) is inflated, on every REST path,
    with MLServer's gzip setting or without: the client gets what the plain body gets (test_bodies.py has the limits
    and the refusals)."""
    served = engines(configuration, TaskType.OBJECT_DETECTION)
    url = transport.url(served.running, "m-demo", Case("gzip-encoded", b"", 200, ()))
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    response = requests.post(url, data=gzip.compress(json.dumps(GOOD).encode()), headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["outputs"] == served.reference


def _rss(pid: int) -> dict[str, int]:
    """The process's resident memory now and at its peak, in bytes, from the kernel's own accounting."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM")}


def test_a_decompression_bomb_is_refused_before_its_pixels_are_decoded(engines):
    engine = engines("default", TaskType.OBJECT_DETECTION).running
    decoded_size = BOMB_SIDE * BOMB_SIDE * 3
    # The engine is shared: its peak is reset to what it holds now (Linux's clear_refs), so that this request's is read.
    Path(f"/proc/{engine.process.pid}/clear_refs").write_text("5")
    before = _rss(engine.process.pid)
    response = requests.post(f"{engine.url}/infer", data=json.dumps(request(image(data=b64(BOMB)))), timeout=60)
    after = _rss(engine.process.pid)
    # Decoding it would have raised the engine's peak memory above what it held before by the decoded size.
    grew = after["VmHWM"] - max(before["VmHWM"], before["VmRSS"])
    assert grew < decoded_size // 4, f"peak memory grew by {grew / 1e6:.0f} MB for a {len(BOMB)} byte request"
    assert response.status_code == 400 and "12000x12000" in response.json()["error"]
    assert len(BOMB) < 32 * 1024


def test_unknown_path(engines):
    missing = requests.get(engines("default", TaskType.OBJECT_DETECTION).running.url + "/no/such/path", timeout=5)
    assert missing.status_code == 404 and missing.json() == {"error": "no route for GET /no/such/path"}
