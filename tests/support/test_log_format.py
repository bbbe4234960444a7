"""The engine's logs: JSON lines on stdout, one per request over REST and gRPC, at the level CHARIOT_LOG_LEVEL
sets."""

import json
import logging
import os
import sys
import threading
import time
import uuid
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
from mlserver.grpc import dataplane_pb2 as pb
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub
from native_writers import TFLITE_LINE, native_lines, not_json

from chariot_support.after_answer import BATCH_SECONDS
from chariot_support.dev.testing import chariot_request, encode_image, image_input, run_engine
from chariot_support.logs import request_lines as logs
from chariot_support.logs.request_lines import JSONLines
from chariot_support.settings import EngineSettings

HERE = Path(__file__).parent
PIXELS = np.zeros((32, 48, 3), np.uint8)


def json_lines(log: str) -> list[dict]:
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def request_line(log: str, request_id: str) -> dict:
    (line,) = [
        e for e in json_lines(log) if e["logger"] == "chariot_support.requests" and e["request_id"] == request_id
    ]
    return line


def infer(engine, body, **kwargs):
    return requests.post(f"{engine.url}/v2/models/m-faulty/infer/", data=body, timeout=30, **kwargs)


def grpc_infer(engine, request_id, data):
    tensor = pb.ModelInferRequest.InferInputTensor(
        name="image-0", datatype="BYTES", shape=[1], contents=pb.InferTensorContents(bytes_contents=[data])
    )
    with grpc.insecure_channel(engine.grpc_address) as channel:
        stub = GRPCInferenceServiceStub(channel)
        try:
            stub.ModelInfer(pb.ModelInferRequest(model_name="m-faulty", id=request_id, inputs=[tensor]), timeout=30)
        except grpc.RpcError as error:
            return error.code()
    return grpc.StatusCode.OK


@pytest.fixture(scope="module")
def engine(faulty_engine):
    return faulty_engine


def test_every_line_on_stdout_is_json_with_time_level_and_message(engine):
    infer(engine, json.dumps(chariot_request(image_input("image-0", PIXELS))))
    lines = json_lines(engine.wait_for_log("chariot_support.requests"))
    assert any(line["logger"] == "chariot_support" and line["message"].startswith("serving") for line in lines)
    assert any(line["logger"].startswith("mlserver") for line in lines)
    for line in lines:
        assert {"time", "level", "logger", "message"} <= line.keys()
        assert line["time"].endswith("+00:00") and line["level"] in ("info", "warning", "error")


def test_what_native_code_writes_to_fds_1_and_2_comes_out_as_json_lines_at_its_level(engine):
    """C's write(2) and a real LiteRT interpreter, inside predict (tests/support/native_writers.py); the engine's
    parallel workers are tested in test_model_logs.py."""
    tag = f"native-{uuid.uuid4().hex[:8]}"
    assert infer(engine, json.dumps(chariot_request(image_input("image-0", PIXELS, fault="native", tag=tag)))).ok
    log = engine.wait_for_log(f"printf on stdout for {tag}")
    found = {(line["logger"], line["message"]): line["level"] for line in json_lines(log)}
    for fd, line, level in native_lines(tag):
        assert found.get(("stdout" if fd == 1 else "stderr", line)) == level, line
    assert found.get(("stderr", TFLITE_LINE)) == "info"
    assert not not_json(log)


def test_mlservers_warning_about_the_engines_own_uvicorn_options_is_left_out(engine):
    log = engine.log()
    assert "Prometheus scraping endpoint" in log, "MLServer's start-up lines are there"
    assert "custom configuration is out of support" not in log


def test_rest_requests_are_logged_with_id_model_status_and_latency(engine):
    ids = {kind: f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("served", "refused", "failed", "malformed")}
    good = chariot_request(image_input("image-0", PIXELS))
    assert infer(engine, json.dumps({**good, "id": ids["served"]})).status_code == 200
    refused = chariot_request(image_input("image-0", PIXELS, action="explode"))
    assert infer(engine, json.dumps({**refused, "id": ids["refused"]})).status_code == 400
    failed = chariot_request(image_input("image-0", PIXELS, fault="raise"))
    assert infer(engine, json.dumps(failed), headers={"X-Request-ID": ids["failed"]}).status_code == 500
    assert infer(engine, "{not json", headers={"X-Request-ID": ids["malformed"]}).status_code == 400
    log = engine.wait_for_log(ids["malformed"])
    expected = {"served": (200, "info"), "refused": (400, "info"), "failed": (500, "error"), "malformed": (400, "info")}
    for kind, (status, level) in expected.items():
        line = request_line(log, ids[kind])
        assert (line["status"], line["level"]) == (status, level), kind
        assert line["model"] == "m-faulty" and line["protocol"] == "rest" and line["method"] == "POST"
        assert line["path"] == "/v2/models/m-faulty/infer/"
        assert line["message"] == f"POST /v2/models/m-faulty/infer/ {status} {line['latency_ms']:.1f} ms"
        assert 0 < line["latency_ms"] < 30_000


def test_health_probes_stay_out_of_the_log_at_info(engine):
    marker = f"probe-{uuid.uuid4().hex[:8]}"
    assert requests.get(f"{engine.url}/v2/health/ready", headers={"X-Request-ID": marker}, timeout=5).status_code == 200
    requests.get(f"{engine.url}/no/such/{marker}", timeout=5)
    log = engine.wait_for_log(f"/no/such/{marker}")  # logged after the probe, so the probe had its chance
    assert not any(line.get("request_id") == marker for line in json_lines(log))


def test_grpc_inferences_are_logged_too(engine):
    served, refused = f"grpc-ok-{uuid.uuid4().hex[:8]}", f"grpc-bad-{uuid.uuid4().hex[:8]}"
    assert grpc_infer(engine, served, encode_image(PIXELS).encode()) == grpc.StatusCode.OK
    assert grpc_infer(engine, refused, b"aGVsbG8=") == grpc.StatusCode.INVALID_ARGUMENT
    log = engine.wait_for_log(refused)
    for request_id, status in ((served, 200), (refused, 400)):
        line = request_line(log, request_id)
        assert line["status"] == status and line["protocol"] == "grpc" and line["model"] == "m-faulty"
        assert line["latency_ms"] > 0


def test_warning_level_keeps_failures_and_drops_the_rest():
    with run_engine("faulty_engine", src=HERE, env={"CHARIOT_LOG_LEVEL": "warning"}) as engine:
        served, failed = f"ok-{uuid.uuid4().hex[:8]}", f"fail-{uuid.uuid4().hex[:8]}"
        good = {**chariot_request(image_input("image-0", PIXELS)), "id": served}
        assert infer(engine, json.dumps(good)).status_code == 200
        body = {**chariot_request(image_input("image-0", PIXELS, fault="raise")), "id": failed}
        assert infer(engine, json.dumps(body)).status_code == 500
        log = engine.wait_for_log(f'"request_id": "{failed}"')
    assert served not in log
    assert not any(line["level"] == "info" for line in json_lines(log))


def test_an_unknown_level_is_refused_with_the_allowed_ones():
    # Refused as every setting the engine cannot start with is (one JSON line, exit 2: test_starting_and_stopping).
    with pytest.raises(ValueError) as refused:
        EngineSettings.from_env({"CHARIOT_LOG_LEVEL": "loud"})
    assert "CHARIOT_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got 'LOUD'" in str(refused.value)


def test_a_record_with_an_exception_carries_its_traceback():
    try:
        raise RuntimeError("the GPU caught fire")
    except RuntimeError:
        record = logging.LogRecord(
            "chariot_support", logging.ERROR, __file__, 1, "predict failed for %s", ("r-1",), sys.exc_info()
        )
    record.fields = {"request_id": "r-1"}
    entry = json.loads(JSONLines().format(record))
    assert entry["message"] == "predict failed for r-1" and entry["request_id"] == "r-1" and entry["level"] == "error"
    assert "RuntimeError: the GPU caught fire" in entry["traceback"]


@pytest.mark.parametrize("value, level", [("", logging.INFO), ("debug", logging.DEBUG), (" Error ", logging.ERROR)])
def test_log_level_reads_the_environment(value, level):
    chosen = EngineSettings.from_env({"CHARIOT_LOG_LEVEL": value}).log_level
    assert logging.getLevelName(chosen) == level


def test_a_request_line_is_written_after_its_answer_with_the_time_the_request_ended(monkeypatch):
    """The line is written by the thread that does requests' work after their answers (after_answer.py), a
    batch at a time: it still says when its request ended."""
    records: list[tuple[logging.LogRecord, str]] = []

    class Capture(logging.Handler):
        def emit(self, record):
            records.append((record, threading.current_thread().name))

    capture = Capture()
    monkeypatch.setattr(logs.requests_logger, "level", logging.INFO)
    logs.requests_logger.addHandler(capture)
    try:
        ended = time.time()
        logs.log_request(
            protocol="rest", method="POST", path="/infer", status=200, started=time.perf_counter(),
            request_id="later-1", model="m",
        )  # fmt: skip
        time.sleep(BATCH_SECONDS * 5)
    finally:
        logs.requests_logger.removeHandler(capture)
    ((record, thread),) = [(r, t) for r, t in records if r.fields["request_id"] == "later-1"]
    assert thread == "chariot-afterwards"
    assert abs(record.created - ended) < BATCH_SECONDS, "the line carries the time its request ended"
    assert record.getMessage() == "POST /infer 200 0.0 ms" and record.fields["status"] == 200


def test_a_request_line_written_in_a_batch_is_the_line_its_record_would_format_to(monkeypatch):
    """With logging as the engine sets it up, request lines skip the record and are written a batch at a time: each
    is the same line, byte for byte, as the record through the handler; set up otherwise, records go through it."""
    import io

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONLines())
    handler.addFilter(logs.EngineChoices())
    parent = logs.requests_logger.parent
    monkeypatch.setattr(parent, "handlers", [handler])
    monkeypatch.setattr(parent, "propagate", False)
    monkeypatch.setattr(logs.requests_logger, "handlers", [])
    args, fields = ("POST", "/infer", 200, 1.25), {"request_id": "same-1", "model": "m", "status": 200}
    assert logs._own_handler(logging.INFO) is handler
    logs._write_line(1_700_000_000.123, logging.INFO, args, fields)
    logs._write_batch()
    record = logging.LogRecord(logs.requests_logger.name, logging.INFO, __file__, 0, logs._LINE, args, None)
    record.created, record.fields = 1_700_000_000.123, fields
    assert stream.getvalue() == JSONLines().format(record) + "\n"
    monkeypatch.setattr(logs.requests_logger, "handlers", [logging.NullHandler()])  # someone's own logging
    assert logs._own_handler(logging.INFO) is None


def test_a_forked_worker_starts_with_no_lines_of_its_parent_to_write():
    logs._batch.extend([logging.StreamHandler(), '{"request_id": "parent-1"}'])  # forked mid-batch
    try:
        child = os.fork()
        if child == 0:
            os._exit(0 if logs._batch == [] else 1)
        _, status = os.waitpid(child, 0)
    finally:
        logs._batch.clear()
    assert os.waitstatus_to_exitcode(status) == 0, "the child would write its parent's lines a second time"
