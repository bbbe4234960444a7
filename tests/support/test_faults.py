"""The engine answers its author's mistakes with a 500 {"error"} that names the fault, and keeps serving,
with and without MLServer's parallel workers."""

import json
from pathlib import Path

import grpc
import numpy as np
import pytest
import requests
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub

from chariot_support.testing import chariot_request, grpc_request, grpc_results, image_input, run_engine

HERE = Path(__file__).parent
PIXELS = np.zeros((32, 48, 3), np.uint8)


@pytest.fixture(scope="module", params=["in-process", "parallel-workers"])
def engine(request):
    env = {"MLSERVER_PARALLEL_WORKERS": "2"} if request.param == "parallel-workers" else {}
    with run_engine("faulty_engine", src=HERE, env=env) as running:
        yield running


def infer(engine, body):
    return requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=json.dumps(body), timeout=30)


def faulty(fault, images=1):
    return chariot_request(*(image_input(f"image-{i}", PIXELS, fault=fault) for i in range(images)))


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
    assert good.json()["outputs"][0]["data"] == [[{"label": "cat", "score": 0.9, "xmin": 1.0, "xmax": 5.0, "ymin": 2.0, "ymax": 6.0}]]
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
        assert grpc_results(stub.ModelInfer(grpc_request(faulty(None), "m-faulty")))["image-0"][0]["label"] == "cat"


def v1(engine, verb, body):
    return requests.post(f"{engine.url}/v1/models/m-faulty:{verb}", data=json.dumps(body), timeout=30)


def test_v1_routes_reach_the_model_in_process_and_in_workers(engine):
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


def test_explain_without_a_model_explain_is_501(engine):
    response = v1(engine, "explain", {"instances": [{"b64": image_input("x", PIXELS)["data"][0]}]})
    assert response.status_code == 501
    assert "FaultyModel" in response.json()["error"] and "has no explain" in response.json()["error"]
    assert v1(engine, "predict", {"instances": [image_input("x", PIXELS)["data"][0]]}).status_code == 200
