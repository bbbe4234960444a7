"""Where a request's time goes: each inference request's stages, in its log line and its Server-Timing header, as
Prometheus histograms, and in Triton's statistics, from a real engine (the demo's, and the warming engine with
batching, two parallel workers and two GPUs' shares); how the stages add up (stages/timing.py) and are counted
(stages/histograms.py); and readiness probes that are not errors while the engine starts."""

import logging
import re

import grpc
import numpy as np
import pytest
import requests
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub
from warming import PIXELS, json_lines

from chariot_support.dev.grpc_client import grpc_request
from chariot_support.dev.testing import chariot_request, image_input
from chariot_support.logs import request_lines
from chariot_support.model.tasks import TaskType
from chariot_support.protocols.request import Answer, Answered
from chariot_support.stages.histograms import BUCKETS, StageHistograms, WithStageHistograms
from chariot_support.stages.timing import STAGES, RuntimeStages, server_timing, stage_times
from client_checks import run_checks

V2 = "/v2/models/m-demo/infer"
STAGE_FIELDS = [f"{stage}_ms" for stage in STAGES]


@pytest.fixture(scope="module")
def engine(demo_engine):
    return demo_engine(TaskType.OBJECT_DETECTION)


def logged(engine, request_id: str) -> dict:
    log = engine.wait_for_log(f'"request_id": "{request_id}"')
    (line,) = [
        entry
        for entry in json_lines(log)
        if entry.get("request_id") == request_id and "latency_ms" in entry and entry["logger"].endswith("requests")
    ]
    return line


def stage_histograms(engine) -> dict[str, dict[str, float]]:
    """chariot_request_stage_seconds from the engine's metrics port: each sample's value by its labels."""
    text = requests.get(f"http://127.0.0.1:{engine.metrics_port}/metrics", timeout=10).text
    found: dict[str, dict[str, float]] = {}
    for name, labels, value in re.findall(r"^(chariot_request_stage_seconds\w*)\{([^}]*)\} (\S+)$", text, re.M):
        found.setdefault(name, {})[labels] = float(value)
    return found


def test_an_answer_says_its_stages_in_its_log_line_and_its_server_timing_header(engine, scene):
    body = chariot_request(image_input("image-0", scene.pixels))
    reply = requests.post(engine.url + V2, json=body, headers={"x-request-id": "where-did-it-go"}, timeout=30)
    assert reply.status_code == 200, reply.text
    timing = dict(re.findall(r"(\w+);dur=([\d.]+)", reply.headers["server-timing"]))
    assert list(timing) == [*STAGES[:-1], "total"], reply.headers["server-timing"]
    assert sum(float(timing[s]) for s in STAGES[:-1]) <= float(timing["total"]) + 0.01
    assert float(timing["decode"]) > 0 and float(timing["predict"]) > 0
    line = logged(engine, "where-did-it-go")
    assert all(isinstance(line[field], float) and line[field] >= 0 for field in STAGE_FIELDS), line
    # The stages follow each other from the request's first byte to its answer written: they add up to its latency.
    assert sum(line[field] for field in STAGE_FIELDS) == pytest.approx(line["latency_ms"], abs=0.05), line
    assert line["decode_ms"] == pytest.approx(float(timing["decode"]), abs=0.002)
    # Over gRPC too, where the message's reading is the call limits'.
    with grpc.insecure_channel(engine.grpc_address) as channel:
        GRPCInferenceServiceStub(channel).ModelInfer(grpc_request({**body, "id": "grpc-stages"}, "m-demo"), timeout=30)
    line = logged(engine, "grpc-stages")
    assert line["protocol"] == "grpc" and line["read_ms"] > 0 and line["predict_ms"] > 0, line
    assert sum(line[field] for field in STAGE_FIELDS) == pytest.approx(line["latency_ms"], abs=0.05), line


def test_the_stage_histograms_have_one_bounded_label_and_count_every_answer(engine, scene):
    before = stage_histograms(engine)
    body = chariot_request(image_input("image-0", scene.pixels))
    for _ in range(3):
        assert requests.post(engine.url + V2, json=body, timeout=30).status_code == 200
    assert requests.post(engine.url + V2, json={"inputs": []}, timeout=30).status_code == 400  # no stages
    after = stage_histograms(engine)
    counts = after["chariot_request_stage_seconds_count"]
    assert sorted(counts) == sorted(f'stage="{stage}"' for stage in STAGES)
    old = before.get("chariot_request_stage_seconds_count", {})
    assert {labels: value - old.get(labels, 0) for labels, value in counts.items()} == dict.fromkeys(counts, 3.0)
    labels = {re.sub(r'="[^"]*"', "", each) for each in after["chariot_request_stage_seconds_bucket"]}
    assert labels == {"le,stage"}, labels  # no label a client's request could multiply


def test_triton_statistics_count_batches_and_every_workers_requests_alike(warming_engine):
    """Two parallel workers batching up to two images, on two GPUs' shares: tritonclient reads the configuration that
    says so, and statistics that count each worker's requests and each batch's call once."""
    env = {"ENGINE_BATCHING": "2", "ENGINE_WORKERS": "2", "ENGINE_GPUS": "0,1"}
    run_checks("tritonclient_statistics.py", warming_engine, model="m-warming", task="Object Detection", env=env)
    counts = stage_histograms(warming_engine)["chariot_request_stage_seconds_count"]
    assert counts['stage="predict"'] >= 40, counts  # the checks' requests, whichever worker served them


def test_server_timing_can_be_turned_off_and_probes_before_ready_are_not_errors(warming_engine):
    """The warming engine runs with CHARIOT_SERVER_TIMING=0, and answered its readiness probes with 503 for the
    seconds its workers warmed up (a slow first predict each): none of those is an error in its log."""
    reply = requests.post(
        f"{warming_engine.url}/v2/models/m-warming/infer",
        json=chariot_request(image_input("image-0", PIXELS)),
        timeout=30,
    )
    assert reply.status_code == 200 and "server-timing" not in reply.headers, reply.headers
    probes = [line for line in json_lines(warming_engine.log()) if line.get("path") == "/v2/health/ready"]
    assert not [line for line in probes if line["level"] == "error"], probes


def test_readiness_lost_after_ready_stays_an_error_and_before_it_is_debug(monkeypatch, caplog):
    monkeypatch.setattr(request_lines, "_ready_once", False)
    monkeypatch.setattr(request_lines.afterwards, "later", lambda work, *args: work(*args))
    monkeypatch.setattr(request_lines, "_own_handler", lambda level: None)  # through logging, where caplog sees it

    def probe(path: str = "/v2/health/ready", status: int = 503, method: str = "GET") -> int:
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger=request_lines.requests_logger.name):
            request_lines.log_request(
                protocol="rest", method=method, path=path, status=status, started=0.0, request_id=None, model=None
            )
        (record,) = caplog.records
        return record.levelno

    assert probe() == probe("/ready") == probe("/v2/models/m-demo/ready") == logging.DEBUG
    assert probe("/v2/models/m-demo/infer", method="POST") == logging.ERROR  # not a probe: a failure
    request_lines.engine_ready()
    assert probe() == probe("/v2/models/m-demo/versions/1/ready") == logging.ERROR
    assert probe(status=200) == logging.DEBUG


def answered(parsed_at: float, answered_at: float, runtime: RuntimeStages | None) -> Answer:
    return Answer(
        Answered(("image-0",), (b"[]",), (None,), stages=runtime), "id", "m-demo", "1", {}, parsed_at, answered_at
    )


def test_the_stages_add_up_and_the_hand_off_to_the_runtime_is_queue():
    received = (10.0, 0.002, 0.001, 10.003)  # started, admission, read, and when the body had arrived
    runtime = RuntimeStages(0.01, 0.003, 0.02, 0.05, 0.004, seconds=0.087, images=1, batch=1, executed=True)
    answer = answered(10.005, 10.1, runtime)  # 95 ms in the runtime's call, of which it measured 87
    stages = dict(zip(STAGES, stage_times(received, answer, ended=10.102), strict=True))
    assert stages == pytest.approx(
        {
            "read": 1.0,
            "admission": 5.0,
            "parse": 2.0,
            "queue": 18.0,
            "decode": 20.0,
            "predict": 50.0,
            "results": 4.0,
            "write": 2.0,
        }
    )
    assert sum(stages.values()) == pytest.approx((10.102 - 10.0) * 1000)  # milliseconds, from first byte to written
    assert stage_times(received, answer)[-1] == 0.0  # while the answer is written
    header = server_timing(stage_times(received, answer), 100.0).decode()
    assert header.startswith("read;dur=1.000, admission;dur=5.000,") and header.endswith("total;dur=100.000")


def test_the_histograms_count_each_stage_into_prometheus_buckets():
    histograms = StageHistograms()
    for seconds in (0.0001, 0.0003, 2.0, 100.0):  # a bucket's bound counts in it; past the last, +Inf only
        histograms.count(np.array([[seconds * 1000 * (i + 1) for i in range(len(STAGES))]]))  # in milliseconds
    text = histograms.exposition().decode()
    assert 'chariot_request_stage_seconds_bucket{le="0.0001",stage="read"} 1.0' in text
    assert 'chariot_request_stage_seconds_bucket{le="0.0005",stage="read"} 2.0' in text
    assert 'chariot_request_stage_seconds_bucket{le="60.0",stage="read"} 3.0' in text
    assert 'chariot_request_stage_seconds_bucket{le="+Inf",stage="read"} 4.0' in text
    assert 'chariot_request_stage_seconds_bucket{le="0.0001",stage="admission"} 0.0' in text
    assert 'chariot_request_stage_seconds_count{stage="write"} 4.0' in text
    assert re.search(r'chariot_request_stage_seconds_sum\{stage="read"\} 102\.0004', text), text
    assert len(re.findall(r'_bucket\{le="[^"]*",stage="read"\}', text)) == len(BUCKETS) + 1


def test_a_scrape_gets_the_stage_histograms_after_mlservers_metrics():
    import asyncio

    histograms = StageHistograms()
    histograms.count(np.ones((1, len(STAGES))))

    async def metrics(scope, receive, send):
        body = b"# MLServer's own\nmodel_infer_request_success_total 1.0\n"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    sent = []

    async def send(message):
        sent.append(message)

    app = WithStageHistograms(metrics, histograms=histograms, path="/metrics")
    asyncio.run(app({"type": "http", "path": "/metrics"}, None, send))
    start, body = sent
    assert (
        body["body"].startswith(b"# MLServer's own\n")
        and b'chariot_request_stage_seconds_count{stage="read"} 1.0' in body["body"]
    )
    assert dict(start["headers"])[b"content-length"] == b"%d" % len(body["body"])
