"""CHARIOT_PREDICT_INLINE: decode and predict run on the event loop, with no hop to a worker thread, over REST and
gRPC; the model's errors are answered as before, and the setting refuses to be combined with batching."""

import json
import os
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub

from chariot_support.dev.grpc_client import grpc_request, grpc_results
from chariot_support.dev.testing import chariot_request, image_input, run_engine
from chariot_support.settings import EngineSettings

HERE = Path(__file__).parent
PIXELS = np.zeros((16, 16, 3), np.uint8)


@pytest.fixture(scope="module")
def inline():
    with run_engine("faulty_engine", src=HERE, env={"CHARIOT_PREDICT_INLINE": "1"}) as running:
        yield running


def label(engine, fault: str) -> str:
    body = chariot_request(image_input("image-0", PIXELS, fault=fault))
    response = requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=json.dumps(body), timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["outputs"][0]["data"][0][0]["label"]


def test_predict_runs_on_the_event_loop_thread_over_rest_and_grpc(inline):
    assert label(inline, "thread") == "MainThread"
    body = chariot_request(image_input("image-0", PIXELS, fault="thread"))
    with grpc.insecure_channel(f"127.0.0.1:{inline.grpc_port}") as channel:
        answer = GRPCInferenceServiceStub(channel).ModelInfer(grpc_request(body, "m-faulty"), timeout=30)
    assert grpc_results(answer)["image-0"][0]["label"] == "MainThread"


def test_without_the_setting_predict_runs_on_a_worker_thread(faulty_engine):
    assert label(faulty_engine, "thread").startswith("chariot-")


def test_an_inline_predict_may_use_every_core(inline):
    _, threads = label(inline, "whoami").split("/")
    assert int(threads) == os.cpu_count()


def test_a_failing_inline_predict_is_a_500_and_the_engine_serves_on(inline):
    body = chariot_request(image_input("image-0", PIXELS, fault="raise"))
    response = requests.post(f"{inline.url}/v2/models/m-faulty/infer", data=json.dumps(body), timeout=30)
    assert response.status_code == 500
    assert response.json() == {"error": "predict failed: RuntimeError: the GPU caught fire"}
    assert label(inline, "none") == "cat"
    assert "CHARIOT_PREDICT_INLINE is on" in inline.log()


def test_inline_predicts_cannot_be_batched():
    with pytest.raises(ValueError, match="CHARIOT_PREDICT_INLINE.*CHARIOT_MAX_BATCH_SIZE=1"):
        EngineSettings.from_env({"CHARIOT_PREDICT_INLINE": "1", "CHARIOT_MAX_BATCH_SIZE": "4"})
    assert EngineSettings.from_env({"CHARIOT_PREDICT_INLINE": "1"}).predict_inline
