"""Every bad request in the catalogue (bad_requests.py), in every protocol and over every REST configuration the
engine serves inference in: a 4xx `{"error"}` naming the input and the problem, after which the engine is healthy
and answers a good request exactly as before.

A request is refused before its task type matters, so the catalogue runs on one task type's engine; the parser runs
it for every task (test_decoding.py), and Image Text to Text, which reads its prompts, gets the prompt cases over V2
and gRPC too. The CORS and gzip configurations run every REST protocol, and must answer as the default does.
"""

import gzip
import json
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import requests
from bad_requests import (
    BOMB,
    BOMB_SIDE,
    CASES,
    CHARIOT_V2_TRANSPORTS,
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

from chariot_support.dev.testing import run_demo_engine
from chariot_support.model.tasks import TaskType

# What a gRPC client gets for each HTTP status the catalogue expects: gRPC's own codes of the same meaning.
GRPC_CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 404: grpc.StatusCode.NOT_FOUND}
# The engine's REST configurations: as it starts, with MLServer's CORS headers (MLSERVER_CORS_SETTINGS holds
# MLServer's CORSSettings as a JSON object), and with MLServer's reply compression on.
CONFIGURATIONS = {
    "default": {},
    "cors": {"MLSERVER_CORS_SETTINGS": '{"allow_origins": ["*"]}'},
    "gzip": {"MLSERVER_GZIP_ENABLED": "true"},
}
BROWSER = {"Origin": "http://app.example"}  # a browser's cross-origin request, which CORS answers


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


REST_FORMS = [*REST_TRANSPORTS, *CHARIOT_V2_TRANSPORTS, *V1_TRANSPORTS]
RUNS = [
    *(Run(configuration, TaskType.OBJECT_DETECTION, t) for configuration in CONFIGURATIONS for t in REST_FORMS),
    Run("default", TaskType.OBJECT_DETECTION, Grpc()),
    *(Run("default", TaskType.IMAGE_TEXT_TO_TEXT, t, only_prompts=True) for t in (REST_TRANSPORTS[0], Grpc())),
]
SENT = [(run, case) for run in RUNS for case in run.cases()]
# What the default configuration answered each (task, protocol, case): the other configurations must answer the same.
DEFAULT_ANSWERS: dict[tuple, Answer] = {}


@dataclass(frozen=True)
class Served:
    running: object  # chariot_support.dev.testing.RunningEngine
    configuration: str
    headers: dict  # what every request to it carries
    reference: list  # its outputs for the good request


def infer_good(engine, headers: dict) -> requests.Response:
    return requests.post(f"{engine.url}/v2/models/m-demo/infer", data=json.dumps(GOOD), headers=headers, timeout=60)


@pytest.fixture(scope="module")
def engines():
    """engines(configuration, task) -> the engine of that configuration serving that task's demo, started when first
    wanted and kept for the module, in whatever order its tests run."""
    with ExitStack() as stack:
        started: dict[tuple[str, TaskType], Served] = {}

        def engine(configuration: str, task: TaskType) -> Served:
            if (configuration, task) not in started:
                running = stack.enter_context(run_demo_engine(task, env=CONFIGURATIONS[configuration]))
                headers = BROWSER if configuration == "cors" else {}
                good = infer_good(running, headers)
                assert good.status_code == 200, good.text
                started[configuration, task] = Served(running, configuration, headers, good.json()["outputs"])
            return started[configuration, task]

        yield engine


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


def test_every_configuration_serves_every_rest_protocol():
    for configuration in CONFIGURATIONS:
        assert {type(r.transport) for r in RUNS if r.configuration == configuration} >= {type(t) for t in REST_FORMS}


@pytest.mark.parametrize(
    "run, case", SENT, ids=[f"{run.engine}-{run.transport.name}-{case.name}" for run, case in SENT]
)
def test_bad_request_is_refused_and_the_engine_serves_on(engines, run, case):
    served = engines(run.configuration, run.task)
    engine, transport = served.running, run.transport
    answer = transport.send(engine, "m-demo", case, served.headers)
    expected = GRPC_CODES[case.status] if isinstance(transport, Grpc) else case.status
    assert answer.status == expected, answer.body
    assert list(answer.body) == ["error"] and isinstance(answer.body["error"], str), answer.body
    fragments = transport.fragments(case) if hasattr(transport, "fragments") else case.fragments
    missing = [f for f in fragments if f not in answer.body["error"]]
    assert not missing, f"{missing} not in {answer.body['error']!r}"
    key = (run.task, transport.name, case.name)
    if served.configuration == "default":
        DEFAULT_ANSWERS[key] = answer
    else:
        default = DEFAULT_ANSWERS.get(key) or transport.send(engines("default", run.task).running, "m-demo", case, {})
        assert (answer.status, answer.body) == (default.status, default.body), "the default configuration answers so"
    if served.configuration == "cors":
        assert answer.headers.get("access-control-allow-origin") == "*", "a browser could not read this error"
    assert engine.alive()
    # Ready, and the good request answered as before: the engine serves on (readiness implies liveness).
    assert requests.get(engine.url + "/v2/health/ready", timeout=5).status_code == 200
    good = infer_good(engine, served.headers)
    assert good.status_code == 200 and good.json()["outputs"] == served.reference, good.text


@pytest.mark.parametrize("transport", REST_TRANSPORTS, ids=[t.name for t in REST_TRANSPORTS])
def test_a_gzip_encoded_body_gets_one_answer_in_every_configuration(engines, transport):
    """MLServer's own request class inflates a body sent with Content-Encoding: gzip; whether the engine does too,
    or refuses it, must not depend on the engine's configuration."""
    case = Case("gzip-encoded", gzip.compress(json.dumps(GOOD).encode()), 200, ())
    answers = {}
    for configuration in CONFIGURATIONS:
        served = engines(configuration, TaskType.OBJECT_DETECTION)
        url = transport.url(served.running, "m-demo", case)
        headers = {**served.headers, "Content-Encoding": "gzip", "Content-Type": "application/json"}
        response = requests.post(url, data=case.body, headers=headers, timeout=60)
        body = response.json()
        answers[configuration] = (response.status_code, body.get("outputs", body))
    statuses = {configuration: status for configuration, (status, _) in answers.items()}
    assert len(set(map(json.dumps, answers.values()))) == 1, f"{transport.name}: {statuses}, {answers['default']}"


def _rss(pid: int) -> dict[str, int]:
    """The process's resident memory now and at its peak, in bytes, from the kernel's own accounting."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM")}


def test_a_decompression_bomb_is_refused_before_its_pixels_are_decoded(engines):
    engine = engines("default", TaskType.OBJECT_DETECTION).running
    decoded_size = BOMB_SIDE * BOMB_SIDE * 3
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
