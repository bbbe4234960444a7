"""SIGTERM, as a rollout sends it: the engine answers what is in flight (gRPC calls get CHARIOT_GRPC_GRACE, not
MLServer's fixed 5 s) and exits 0. With parallel workers: test_hostile_workers.py, on its engine of two workers."""

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from hostile import HERE
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub

from chariot_support.dev.grpc_client import grpc_request, grpc_results
from chariot_support.dev.testing import chariot_request, image_input, run_engine

pytestmark = pytest.mark.hostile

PIXELS = np.zeros((32, 48, 3), np.uint8)


def test_sigterm_lets_a_grpc_call_longer_than_5_s_finish():
    with run_engine("faulty_engine", src=HERE, env={"CHARIOT_GRPC_GRACE": "20"}) as engine:
        body = chariot_request(image_input("image-0", PIXELS, fault="sleep", seconds=6.5))
        with grpc.insecure_channel(engine.grpc_address) as channel, ThreadPoolExecutor(1) as pool:
            stub = GRPCInferenceServiceStub(channel)
            call = pool.submit(stub.ModelInfer, grpc_request(body, "m-faulty"), timeout=30)
            time.sleep(0.7)
            engine.process.send_signal(signal.SIGTERM)
            assert grpc_results(call.result(timeout=30))["image-0"][0]["label"] == "cat"
        assert engine.process.wait(30) == 0


def test_sigterm_while_an_overrun_native_predict_runs_exits_0(tmp_path):
    """A predict past CHARIOT_PREDICT_TIMEOUT keeps running in ONNX Runtime on its written-off thread; SIGTERM then
    still ends the engine with 0 (the C++ runtime torn down under that thread would abort it: 134)."""
    import requests

    # No warm-up: its predict takes seconds, and this test needs none before its one request.
    env = {"CHARIOT_PREDICT_TIMEOUT": "0.5", "MODEL_DIR": str(tmp_path), "CHARIOT_WARMUP": "0"}
    with run_engine("slow_native_engine", src=HERE, env=env) as engine:
        body = chariot_request(image_input("image-0", PIXELS))
        reply = requests.post(f"{engine.url}/v2/models/m-slow/infer", json=body, timeout=30)
        assert reply.status_code == 504, reply.text  # the predict runs on inside ONNX Runtime
        engine.process.send_signal(signal.SIGTERM)
        code = engine.process.wait(30)
        log = engine.log()
    assert code == 0, log[-3000:]
    assert "terminate called" not in log
