"""The engine answers its author's mistakes with a 5xx {"error"} that names the fault, and keeps serving,
with and without MLServer's parallel workers; a predict that hangs is cut off by CHARIOT_PREDICT_TIMEOUT; SIGTERM
lets in-flight requests finish; a worker whose native code crashes leaves its last words in the log."""

import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub
from native_writers import not_json

from chariot_support.dev.grpc_client import grpc_request, grpc_results
from chariot_support.dev.testing import chariot_request, image_input, run_engine, stop

HERE = Path(__file__).parent
PIXELS = np.zeros((32, 48, 3), np.uint8)


@pytest.fixture(scope="module", params=["in-process", "parallel-workers"])
def engine(request):
    if request.param == "in-process":
        yield request.getfixturevalue("faulty_engine")
        return
    with run_engine("faulty_engine", src=HERE, env={"MLSERVER_PARALLEL_WORKERS": "2"}) as running:
        yield running


def infer(engine, body):
    return requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=json.dumps(body), timeout=30)


def faulty(fault, images=1, **parameters):
    return chariot_request(*(image_input(f"image-{i}", PIXELS, fault=fault, **parameters) for i in range(images)))


def ready(engine):
    return requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code == 200


@pytest.mark.parametrize(
    "fault, images, message",
    [
        ("raise", 1, "predict failed: RuntimeError: the GPU caught fire"),
        ("missing-field", 1, "invalid Detection for image 0 ('image-0'): result 0, field 'ymax': Field required"),
        ("too-few-lists", 1, "predict must return one list of Detection per image (1), got a list of 0"),
        ("score-out-of-range", 2, "image 1 ('image-1'): result 0, field 'score'"),
    ],
)
def test_predict_faults_are_500_with_a_message_for_the_author(engine, fault, images, message):
    response = infer(engine, faulty(fault, images))
    assert response.status_code == 500
    assert message in response.json()["error"]
    good = infer(engine, faulty(None))
    assert good.status_code == 200, good.text
    assert good.json()["outputs"][0]["data"] == [
        [{"label": "cat", "score": 0.9, "xmin": 1.0, "xmax": 5.0, "ymin": 2.0, "ymax": 6.0}]
    ]
    assert requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code == 200


def test_client_errors_keep_their_status_and_plain_message(engine):
    response = infer(engine, chariot_request(image_input("x", PIXELS, action="explode")))
    assert response.status_code == 400
    assert response.json()["error"].startswith("input 'x': unknown action 'explode'")


def test_the_request_id_reaches_the_log_of_a_failed_predict(engine):
    response = infer(engine, {**faulty("raise"), "id": "trace-me-123"})
    assert response.status_code == 500
    assert "trace-me-123" in engine.log()


def test_grpc_reports_a_failed_predict_as_internal_with_the_same_message(engine):
    rest = infer(engine, faulty("raise"))
    with grpc.insecure_channel(engine.grpc_address) as channel:
        stub = GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.ModelInfer(grpc_request(faulty("raise"), "m-faulty"))
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        assert caught.value.details() == rest.json()["error"]
        assert (
            grpc_results(stub.ModelInfer(grpc_request(chariot_request(image_input("image-0", PIXELS)), "m-faulty")))[
                "image-0"
            ][0]["label"]
            == "cat"
        )


def v1(engine, verb, body):
    return requests.post(f"{engine.url}/v1/models/m-faulty:{verb}", data=json.dumps(body), timeout=30)


def test_v1_and_chariot_v2_routes_reach_the_model_in_process_and_in_workers(engine):
    image = {"b64": image_input("x", PIXELS)["data"][0]}
    response = v1(engine, "predict", {"instances": [image, {"image": image, "fault": None}]})
    assert response.status_code == 200, response.text
    expected = infer(engine, faulty(None, images=2)).json()["outputs"]
    assert response.json() == {"predictions": [o["data"][0] for o in expected]}
    failed = v1(engine, "predict", {"instances": [{"image": image, "fault": "raise"}]})
    assert failed.status_code == 500
    assert failed.json() == {"error": "predict failed: RuntimeError: the GPU caught fire"}
    refused = v1(engine, "predict", {"instances": [{"image": image, "action": "explode"}]})
    assert refused.status_code == 400
    assert refused.json()["error"].startswith("input 'instances[0]': unknown action 'explode'")
    # chariot-v2 at the root /infer: with parallel workers the model lives in another process, reached as V2 is.
    ok = requests.post(f"{engine.url}/infer", json={"input": image["b64"]}, timeout=30)
    assert ok.status_code == 200, ok.text
    assert ok.json() == {"output": expected[0]["data"][0]}
    bad = requests.post(
        f"{engine.url}/infer", data=b"GIF89a not a picture", headers={"Content-Type": "image/gif"}, timeout=30
    )
    assert bad.status_code == 400, bad.text
    message = bad.json()["error"]
    assert "not an image" in message and "mlserver" not in message and "chariot_support" not in message, message


def test_explain_without_a_model_explain_is_501(engine):
    response = v1(engine, "explain", {"instances": [{"b64": image_input("x", PIXELS)["data"][0]}]})
    assert response.status_code == 501
    assert "FaultyModel" in response.json()["error"] and "has no explain" in response.json()["error"]
    assert v1(engine, "predict", {"instances": [image_input("x", PIXELS)["data"][0]]}).status_code == 200


def test_the_request_id_reaches_the_log_of_an_invalid_result(engine):
    response = infer(engine, {**faulty("missing-field"), "id": "trace-me-456"})
    assert response.status_code == 500
    assert "trace-me-456" in engine.log()


TIMEOUT = 1.0


@pytest.mark.slow
@pytest.mark.parametrize("thread_safe", [True, False], ids=["thread-safe", "one-at-a-time"])
def test_a_hung_predict_is_cut_off_and_the_engine_serves_on(thread_safe):
    env = {"CHARIOT_PREDICT_TIMEOUT": str(TIMEOUT), "CHARIOT_THREADS": "2", "FAULTY_THREAD_SAFE": str(int(thread_safe))}
    with run_engine("faulty_engine", src=HERE, env=env) as engine:
        started = time.monotonic()
        hung = infer(engine, {**faulty("hang", seconds=4), "id": "stuck-request"})
        assert hung.status_code == 504
        assert "did not return within 1 s" in hung.json()["error"] and "CHARIOT_PREDICT_TIMEOUT" in hung.json()["error"]
        assert time.monotonic() - started < 3.5, "the client waited for the hung predict instead of the timeout"
        assert "stuck-request" in engine.log()
        if thread_safe:
            # More hung calls than the engine has threads: each is written off and replaced.
            assert [infer(engine, faulty("hang", seconds=4)).status_code for _ in range(3)] == [504] * 3
            good = infer(engine, faulty(None))
            assert good.status_code == 200, good.text
            assert ready(engine)
        else:
            # The hung call still holds a model that runs one predict at a time: others are told so at once, and
            # readiness says so, until it returns.
            busy = infer(engine, faulty(None))
            assert busy.status_code == 503 and "overran CHARIOT_PREDICT_TIMEOUT" in busy.json()["error"]
            assert not ready(engine)
            # Readiness lost once the engine was ready is an error in the log (while it starts, it is not).
            log = engine.wait_for_log('"path": "/v2/health/ready", "status": 503')
            lost = [
                json.loads(line) for line in log.splitlines() if '"path": "/v2/health/ready", "status": 503' in line
            ]
            assert lost and all(line["level"] == "error" for line in lost), lost
            deadline = time.monotonic() + 10
            while not ready(engine) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert ready(engine), "readiness never came back after the hung predict returned"
            good = infer(engine, faulty(None))
            assert good.status_code == 200, good.text
        # A predict that is still running does not hold up the engine's exit.
        infer(engine, faulty("hang"))
        started = time.monotonic()
        assert stop(engine) == 0
        assert time.monotonic() - started < 10


@pytest.mark.slow
def test_sigterm_lets_an_in_flight_request_finish_then_exits_0():
    with run_engine("faulty_engine", src=HERE) as engine:
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(infer, engine, faulty("sleep", seconds=2))
            time.sleep(0.7)  # the request is inside predict
            engine.process.send_signal(signal.SIGTERM)
            response = slow.result(timeout=30)
            assert response.status_code == 200, response.text
            assert response.json()["outputs"][0]["data"][0][0]["label"] == "cat"
        assert engine.process.wait(30) == 0
        assert not not_json(engine.log()), "what the stop wrote, the forwarder's last lines too"


@pytest.mark.parametrize("engine", ["parallel-workers"], indirect=True)  # in one process, the engine would go too
def test_a_worker_that_segfaults_leaves_its_stack_in_the_log_as_json(engine):
    response = infer(engine, faulty("segfault"))
    assert response.status_code == 503 and "worker" in response.json()["error"], response.text
    engine.wait_for_log("killed by SIGSEGV")
    log = engine.wait_for_log("Extension modules: ")  # the dump's last line
    messages = [line for line in map(json.loads, log.splitlines()) if line["logger"] == "stderr"]
    texts = [line["message"] for line in messages]
    start = texts.index("Fatal Python error: Segmentation fault")
    dump = messages[start : start + [t.startswith("Extension modules: ") for t in texts[start:]].index(True) + 1]
    assert {line["level"] for line in dump} == {"critical"}
    assert any('faulty_engine/model.py", line' in line["message"] and "in predict" in line["message"] for line in dump)
    assert not not_json(log)
