"""SIGTERM gives gRPC calls in flight CHARIOT_GRPC_GRACE to finish, not MLServer's fixed 5 s."""

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
from hostile import HERE
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub

from chariot_support.dev.testing import chariot_request, grpc_request, grpc_results, image_input, run_engine

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
