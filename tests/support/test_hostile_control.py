"""The control plane is closed: repository load/unload, the API docs pages and MLServer's generate routes are off,
and metrics carry only the served model's name, whatever names clients make up."""

import json

import grpc
import numpy as np
import pytest
import requests
from hostile import HERE
from mlserver.grpc import model_repository_pb2 as repo_pb
from mlserver.grpc.model_repository_pb2_grpc import ModelRepositoryServiceStub

from chariot_support.dev.testing import chariot_request, image_input, run_engine

pytestmark = pytest.mark.hostile

PIXELS = np.zeros((32, 48, 3), np.uint8)


@pytest.fixture(scope="module")
def engine():
    with run_engine("faulty_engine", src=HERE, env={"CHARIOT_MODEL_ID": "faulty"}) as running:
        yield running


def test_repository_unload_and_load_are_refused_and_the_model_stays(engine):
    for verb in ("unload", "load"):
        response = requests.post(f"{engine.url}/v2/repository/models/m-faulty/{verb}", timeout=5)
        assert response.status_code == 403
        assert "CHARIOT_REPOSITORY_API" in response.json()["error"]
    with grpc.insecure_channel(engine.grpc_address) as channel:
        with pytest.raises(grpc.RpcError):
            ModelRepositoryServiceStub(channel).RepositoryModelUnload(
                repo_pb.RepositoryModelUnloadRequest(model_name="m-faulty")
            )
    assert requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code == 200


@pytest.mark.parametrize(
    "method, port, path",
    [
        ("GET", "http", "/openapi.json"),
        ("GET", "http", "/v2/docs"),
        ("GET", "http", "/v2/docs/dataplane.json"),
        ("GET", "http", "/v2/models/m-faulty/docs"),
        ("POST", "http", "/v2/models/m-faulty/generate"),
        ("GET", "metrics", "/docs"),
        ("GET", "metrics", "/openapi.json"),
    ],
)
def test_api_pages_and_generate_are_not_served(engine, method, port, path):
    base = engine.url if port == "http" else f"http://127.0.0.1:{engine.metrics_port}"
    response = requests.request(method, base + path, data="{}", timeout=5)
    assert response.status_code == 404, response.text[:200]


def test_made_up_model_names_do_not_grow_the_metrics(engine):
    body = json.dumps(chariot_request(image_input("image", PIXELS)))
    for i in range(200):
        response = requests.post(f"{engine.url}/v2/models/m-made-up-{i}/infer", data=body, timeout=5)
        assert response.status_code == 404
        response = requests.post(f"{engine.url}/v2/models/m-faulty/versions/v{i}/infer", data=body, timeout=5)
        assert response.status_code == 404
    assert requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=body, timeout=5).status_code == 200
    metrics = requests.get(f"http://127.0.0.1:{engine.metrics_port}/metrics", timeout=5).text
    assert "m-made-up" not in metrics
    assert 'version="v1' not in metrics


@pytest.mark.parametrize("name", ["m-faulty", "m-other"])
def test_infer_stream_is_refused_with_an_error_body_under_any_name(engine, name):
    body = json.dumps(chariot_request(image_input("image", PIXELS)))
    response = requests.post(f"{engine.url}/v2/models/{name}/infer_stream", data=body, timeout=5)
    assert response.status_code == (501 if name == "m-faulty" else 404), response.text[:300]
    assert ("does not stream" if name == "m-faulty" else "no model named") in response.json()["error"]
    assert requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=body, timeout=5).status_code == 200
