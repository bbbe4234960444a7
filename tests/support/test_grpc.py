"""End to end over gRPC: the Open Inference Protocol service on real sockets, held to what REST answers."""

import base64
import json
import os
import subprocess
import sys

import grpc
import numpy as np
import pytest
import requests
from mlserver.grpc import dataplane_pb2 as pb
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub

from chariot_support.dev.grpc_client import grpc_request, grpc_results
from chariot_support.dev.testing import (
    chariot_metadata,
    chariot_request,
    encode_image,
    image_input,
    run_demo_engine,
)
from chariot_support.model.tasks import TaskType
from template_paths import SUPPORT_SRC

PROMPTS = ["what colours are in the picture?"]


@pytest.fixture(scope="module")
def stub(engine):
    with grpc.insecure_channel(engine.grpc_address) as channel:
        yield GRPCInferenceServiceStub(channel)


def rest(engine, model_name, body):
    return requests.post(f"{engine.url}/v2/models/{model_name}/infer", data=json.dumps(body), timeout=30)


def rest_results(response) -> dict[str, list]:
    assert response.status_code == 200, response.text
    return {output["name"]: output["data"][0] for output in response.json()["outputs"]}


def grpc_error(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def grpc_metric(engine, name: str, method: str, code: str | None = None) -> float:
    import re

    labels = f'grpc_method="{method}",grpc_service="inference.GRPCInferenceService",grpc_type="UNARY"'
    if code is not None:
        labels = f'grpc_code="{code}",{labels}'
    text = requests.get(f"http://127.0.0.1:{engine.metrics_port}/metrics", timeout=5).text
    found = re.search(rf"^{name}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_grpc_calls_count_in_mlservers_grpc_metrics_failed_ones_with_their_status(demo_engine):
    """Dashboards built on MLServer's gRPC metrics (py-grpc-prometheus's names) see every call: started, handled by
    status code (a call answered with an error too), and how long it took."""
    engine, model_name = demo_engine(TaskType.OBJECT_DETECTION), "m-demo"
    with grpc.insecure_channel(engine.grpc_address) as channel:
        stub = GRPCInferenceServiceStub(channel)
        names = {
            "started": ("grpc_server_started_total", None),
            "ok": ("grpc_server_handled_total", "OK"),
            "bad": ("grpc_server_handled_total", "INVALID_ARGUMENT"),
            "timed": ("grpc_server_handling_seconds_count", None),
        }
        before = {key: grpc_metric(engine, name, "ModelInfer", code) for key, (name, code) in names.items()}
        live = grpc_metric(engine, "grpc_server_handled_total", "ServerLive", "OK")
        body = chariot_request(image_input("image-0", np.zeros((16, 16, 3), np.uint8)))
        for _ in range(2):
            stub.ModelInfer(grpc_request(body, model_name), timeout=30)
        bad = grpc_request(
            chariot_request({"name": "image-0", "shape": [1], "datatype": "BYTES", "data": ["nope"]}), model_name
        )
        assert grpc_error(lambda: stub.ModelInfer(bad, timeout=30)).code() == grpc.StatusCode.INVALID_ARGUMENT
        assert stub.ServerLive(pb.ServerLiveRequest()).live
        after = {key: grpc_metric(engine, name, "ModelInfer", code) for key, (name, code) in names.items()}
        assert {key: after[key] - before[key] for key in names} == {"started": 3, "ok": 2, "bad": 1, "timed": 3}
        assert grpc_metric(engine, "grpc_server_handled_total", "ServerLive", "OK") == live + 1


def test_health_and_metadata_over_grpc(stub, model_name):
    assert stub.ServerLive(pb.ServerLiveRequest()).live
    assert stub.ServerReady(pb.ServerReadyRequest()).ready
    assert stub.ModelReady(pb.ModelReadyRequest(name="m-deployed-elsewhere")).ready
    assert stub.ServerMetadata(pb.ServerMetadataRequest()).name
    metadata = stub.ModelMetadata(pb.ModelMetadataRequest(name=model_name))
    assert metadata.name == model_name
    assert metadata.platform.startswith("chariot-v2-kserve_")
    assert [(t.datatype, list(t.shape)) for t in metadata.inputs] == [("BYTES", [1])]
    assert [(t.datatype, list(t.shape)) for t in metadata.outputs] == [("BYTES", [1])]


@pytest.mark.parametrize("raw", [False, True], ids=["bytes_contents", "raw_input_contents"])
def test_grpc_results_equal_rest_results(engine, stub, model_name, scene, raw):
    body = chariot_request(
        image_input("image-0", scene.pixels, prompts=PROMPTS),
        image_input("image-1", scene.pixels[:, ::-1].copy(), prompts=PROMPTS),
    )
    expected = rest_results(rest(engine, model_name, body))
    response = stub.ModelInfer(grpc_request(body, model_name, raw=raw))
    assert grpc_results(response) == expected
    assert [o.name for o in response.outputs] == ["image-0", "image-1"]
    assert all(o.datatype == "BYTES" and list(o.shape) == [1] for o in response.outputs)


def test_grpc_helpers_import_no_mlserver_and_build_mlservers_own_messages():
    """An engine's own tests speak gRPC without importing MLServer (its server costs a second of every test run);
    MLServer, imported later in the same process, has the very same message classes and reads what was built."""
    script = """
import sys
from chariot_support.dev import grpc_client
from chariot_support.dev.testing import grpc_request  # their home before grpc_client: authors' tests import it here
assert grpc_request is grpc_client.grpc_request
inputs = [{"name": "n", "shape": [2], "datatype": "FP32", "data": [1.5, 2]},
          {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["caf\u00e9"]}]
message = grpc_request({"id": "r-1", "inputs": inputs}, "m-x", raw=True)
assert [m for m in sys.modules if m.startswith("mlserver")] == ["mlserver.grpc.dataplane_pb2"]
from mlserver.grpc import dataplane_pb2
from mlserver.grpc.converters import ModelInferRequestConverter
assert type(message) is dataplane_pb2.ModelInferRequest
request = ModelInferRequestConverter.to_types(message)
print(request.id, [t.data.root for t in request.inputs])
"""
    env = {**os.environ, "PYTHONPATH": str(SUPPORT_SRC)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "r-1 [[1.5, 2.0], [b'caf\\xc3\\xa9']]"


def test_grpc_passes_metadata_through(stub, model_name, scene):
    metadata = chariot_metadata(site="north", frame=12)
    body = chariot_request(image_input("image-0", scene.pixels, prompts=PROMPTS), metadata=metadata)
    response = stub.ModelInfer(grpc_request(body, model_name))
    assert response.parameters["metadata"].string_param == metadata


def test_raw_image_bytes_are_read_like_base64(engine, stub, model_name, scene):
    body = chariot_request(image_input("image-0", scene.pixels, prompts=PROMPTS))
    request = grpc_request(body, model_name)
    request.inputs[0].contents.bytes_contents[0] = base64.b64decode(body["inputs"][0]["data"][0])
    assert grpc_results(stub.ModelInfer(request)) == rest_results(rest(engine, model_name, body))


# The message size limit is the transport's, whatever the model: one task type's engine shows it.
@pytest.mark.parametrize("task", [TaskType.OBJECT_DETECTION], ids=["object_detection"], indirect=True)
def test_a_photo_beyond_grpc_default_4_mib_is_served(stub, model_name):
    noise = np.random.default_rng(7).integers(0, 256, (1400, 1400, 3), dtype=np.uint8)
    body = chariot_request(
        {
            "name": "photo",
            "shape": [1],
            "datatype": "BYTES",
            "data": [encode_image(noise)],
            "parameters": {"prompts": PROMPTS},
        }
    )
    request = grpc_request(body, model_name)
    assert request.ByteSize() > 5 << 20
    assert "photo" in grpc_results(stub.ModelInfer(request))


def _with(scene, **tensor_overrides):
    tensor = image_input("image-0", scene.pixels, prompts=PROMPTS)
    tensor.update(tensor_overrides)
    return chariot_request(tensor)


CLIENT_MISTAKES = {
    "invalid base64": lambda s: _with(s, data=["@@not base64@@"]),
    "bytes that are no image": lambda s: _with(s, data=["aGVsbG8gd29ybGQ="]),
    "shape disagrees with data": lambda s: _with(s, shape=[3]),
    "unknown action": lambda s: _with(s, parameters={"action": "explode", "prompts": PROMPTS}),
    "metadata not JSON": lambda s: {**_with(s), "parameters": {"metadata": "{oops"}},
}


@pytest.mark.parametrize("case", CLIENT_MISTAKES)
def test_client_mistakes_are_invalid_argument_with_the_rest_message(engine, stub, model_name, scene, case):
    body = CLIENT_MISTAKES[case](scene)
    over_rest = rest(engine, model_name, body)
    assert over_rest.status_code == 400, over_rest.text
    error = grpc_error(lambda: stub.ModelInfer(grpc_request(body, model_name)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == over_rest.json()["error"]


def test_malformed_raw_contents_are_invalid_argument(stub, model_name, scene):
    request = grpc_request(_with(scene), model_name, raw=True)
    request.raw_input_contents[0] = b"\xff\xff\x00\x00short"
    error = grpc_error(lambda: stub.ModelInfer(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "raw_input_contents" in error.details() and "4-byte little-endian length" in error.details()


def test_unknown_model_is_not_found_on_every_call(engine, stub, scene):
    over_rest = rest(engine, "resnet50", _with(scene))
    assert over_rest.status_code == 404
    calls = {
        "ModelInfer": lambda: stub.ModelInfer(grpc_request(_with(scene), "resnet50")),
        "ModelReady": lambda: stub.ModelReady(pb.ModelReadyRequest(name="resnet50")),
        "ModelMetadata": lambda: stub.ModelMetadata(pb.ModelMetadataRequest(name="resnet50")),
    }
    for name, call in calls.items():
        error = grpc_error(call)
        assert error.code() == grpc.StatusCode.NOT_FOUND, name
        assert error.details() == over_rest.json()["error"], name
    assert "resnet50" in over_rest.json()["error"]


@pytest.fixture(scope="module")
def small_engine():
    """An engine of its own, whose model the repository tests unload, with a 1 MiB request limit."""
    env = {"CHARIOT_MAX_REQUEST_MB": "1", "CHARIOT_REPOSITORY_API": "1"}
    with run_demo_engine(TaskType.OBJECT_DETECTION, env=env) as running:
        with grpc.insecure_channel(running.grpc_address) as channel:
            yield running, GRPCInferenceServiceStub(channel)


def test_one_request_size_limit_on_both_transports(small_engine, model_name):
    engine, stub = small_engine
    oversize = chariot_request(
        {"name": "image-0", "shape": [1], "datatype": "BYTES", "data": [base64.b64encode(bytes(1 << 20)).decode()]}
    )
    declared = rest(engine, model_name, oversize)
    assert declared.status_code == 413
    assert "1,048,576 bytes" in declared.json()["error"] and "CHARIOT_MAX_REQUEST_MB" in declared.json()["error"]
    raw = json.dumps(oversize).encode()
    chunked = requests.post(
        f"{engine.url}/v2/models/{model_name}/infer",
        data=(raw[i : i + 65536] for i in range(0, len(raw), 65536)),
        timeout=30,
    )
    assert chunked.status_code == 413, chunked.text
    error = grpc_error(lambda: stub.ModelInfer(grpc_request(oversize, model_name)))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code == 200


def test_repository_index_unload_and_load_on_both_transports(small_engine, model_name, scene):
    engine, stub = small_engine
    body = _with(scene)
    for sent in ({"data": "{}"}, {}):  # tritonclient sends no body at all
        index = requests.post(f"{engine.url}/v2/repository/index", timeout=5, **sent).json()
        assert [(m["name"], m["state"]) for m in index] == [(model_name, "READY")]
    grpc_index = stub.RepositoryIndex(pb.RepositoryIndexRequest())
    assert [(m.name, m.state) for m in grpc_index.models] == [(model_name, "READY")]

    assert requests.post(f"{engine.url}/v2/repository/models/m-deployed/unload", timeout=30).status_code == 200
    assert not stub.ServerReady(pb.ServerReadyRequest()).ready
    assert requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code == 503
    unloaded = rest(engine, "m-deployed", body)
    assert unloaded.status_code == 404 and "not loaded" in unloaded.json()["error"]
    assert grpc_error(lambda: stub.ModelInfer(grpc_request(body, "m-deployed"))).code() == grpc.StatusCode.NOT_FOUND

    stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="m-deployed"))
    assert stub.ServerReady(pb.ServerReadyRequest()).ready
    assert rest(engine, "m-deployed", body).status_code == 200
    stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name=model_name))
    assert requests.get(f"{engine.url}/ready", timeout=5).status_code == 503
    assert requests.post(f"{engine.url}/v2/repository/models/{model_name}/load", timeout=30).status_code == 200
    assert requests.get(f"{engine.url}/ready", timeout=5).json() == {"status": "ready"}

    assert requests.post(f"{engine.url}/v2/repository/models/resnet50/load", timeout=30).status_code == 404
    error = grpc_error(lambda: stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="resnet50")))
    assert error.code() == grpc.StatusCode.NOT_FOUND


def test_streaming_is_refused_plainly(stub, model_name, scene):
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.ModelStreamInfer(iter([grpc_request(_with(scene), model_name)])))
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "ModelInfer" in caught.value.details()


@pytest.mark.parametrize("raw", [False, True], ids=["bytes_contents", "raw_input_contents"])
def test_the_engines_own_reading_answers_as_mlservers_converter_does(stub, model_name, scene, raw):
    """A plain request is read straight into the runtime's request; one with a numeric tensor goes through
    MLServer's converter. Both answer with the same results, ids, metadata and trailing metadata."""
    image = image_input("image-0", scene.pixels, prompts=PROMPTS, metadata=chariot_metadata(frame=3))
    plain = {**chariot_request(image, metadata=chariot_metadata(site="north")), "id": "same-id"}
    numeric = {**plain, "inputs": [image, {"name": "extra", "shape": [1], "datatype": "INT64", "data": [5]}]}
    answers = []
    for body in (plain, numeric):
        response, call = stub.ModelInfer.with_call(grpc_request(body, model_name, raw=raw))
        trailing = {key: value for key, value in call.trailing_metadata()}
        parameters = {key: value.string_param for key, value in response.parameters.items()}
        outputs = [
            (o.name, o.datatype, list(o.shape), {key: value.string_param for key, value in o.parameters.items()})
            for o in response.outputs
        ]
        answers.append((response.id, response.model_name, response.model_version, parameters, outputs, trailing))
        answers.append(grpc_results(response))
        assert bool(response.raw_output_contents) == raw
    assert answers[0] == answers[2]
    assert answers[1] == answers[3]
    assert answers[0][5]["ce-id"] == "same-id" and answers[0][3]["metadata"] == plain["parameters"]["metadata"]


def test_only_plain_grpc_requests_are_read_by_the_engine_itself(model_name, scene):
    from chariot_support.protocols.v2_grpc import plain_grpc_request

    body = chariot_request(image_input("image-0", scene.pixels, action="detect"), metadata="{}")
    plain = plain_grpc_request(grpc_request(body, model_name), 1_000_000)
    assert plain is not None and plain.inputs[0].data == [body["inputs"][0]["data"][0].encode()]
    assert plain.inputs[0].parameters == {"action": "detect"} and plain.parameters == {"metadata": "{}"}
    assert plain_grpc_request(grpc_request(body, model_name, raw=True), 1_000_000) == plain
    cut = grpc_request(body, model_name, raw=True)
    cut.raw_input_contents[0] = cut.raw_input_contents[0][:-1]
    assert plain_grpc_request(cut, 1_000_000) is None, "raw contents cut short: MLServer's converter says what is wrong"
    numeric = {**body, "inputs": [*body["inputs"], {"name": "n", "shape": [1], "datatype": "INT64", "data": [1]}]}
    assert plain_grpc_request(grpc_request(numeric, model_name), 1_000_000) is None
    typed = grpc_request(body, model_name)
    typed.inputs[0].parameters["content_type"].int64_param = 5
    assert plain_grpc_request(typed, 1_000_000) is None


@pytest.mark.parametrize("waits_for", ["a thread", "a model copy"])
def test_a_call_past_its_deadline_is_not_predicted_and_is_counted(waits_for, faulty_engine):
    """A client's deadline is honoured: a call that waits past its deadline, for the one thread or, with threads to
    spare, for the one copy of a model that is not thread-safe, gets DEADLINE_EXCEEDED, is never predicted (the
    thread or the copy is free as soon as the predict before it returns), and is counted and logged as such (504),
    not as the engine's failure."""
    import contextlib
    import re
    import time
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from chariot_support.dev.testing import run_engine

    pixels = np.zeros((32, 48, 3), np.uint8)
    refused = re.compile(r'^chariot_grpc_refused_total\{reason="deadline_exceeded"\} (\d+)\.0$', re.M)

    def call(stub, seconds: float, timeout: float):
        body = chariot_request(image_input("image-0", pixels, fault="sleep", seconds=seconds))
        return stub.ModelInfer(grpc_request(body, "m-faulty"), timeout=timeout)

    def refusals(engine) -> int:
        metrics = requests.get(f"http://127.0.0.1:{engine.metrics_port}/metrics", timeout=5).text
        found = refused.search(metrics)
        return int(found.group(1)) if found else 0

    with contextlib.ExitStack() as stack:
        if waits_for == "a thread":
            env = {"CHARIOT_THREADS": "1"}
            engine = stack.enter_context(run_engine("faulty_engine", src=Path(__file__).parent, env=env))
        else:  # the session's: several threads, one copy of a model that runs one predict at a time
            engine = faulty_engine
        before, logged = refusals(engine), len(engine.log())
        with grpc.insecure_channel(engine.grpc_address) as channel, ThreadPoolExecutor(1) as pool:
            stub = GRPCInferenceServiceStub(channel)
            call(stub, 0, 30)  # connected: the slow call below reaches the engine at once
            slow = pool.submit(call, stub, 2, 30)
            time.sleep(0.3)  # the one thread, or the one copy, is inside the slow predict
            # A deadline of 1.2 s, not less: a call whose client gives up before the engine has read it never
            # reaches the engine's code (gRPC drops it), and a busy machine may take a while to read it.
            with pytest.raises(grpc.RpcError) as late:
                call(stub, 1.5, 1.2)
            assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            slow.result(timeout=30)
            started = time.monotonic()
            call(stub, 0, 30)
            # Measured here: a few ms; had the late call been predicted, the model would be busy for 1.5 s more.
            assert time.monotonic() - started < 1.0
        assert refusals(engine) == before + 1
        log = engine.log()[logged:]
    assert re.search(r'"message": "ModelInfer /v2/models/m-faulty/infer 504 ', log), log[-3000:]


def test_a_call_its_client_gave_up_on_just_before_the_engines_deadline_counts_as_past_its_deadline():
    """The client's clock starts before the engine's, so its cancellation at its deadline arrives while the engine
    still has a few ms left (seen with the cores busy): that is the deadline passing (504), not a client that left."""
    from chariot_support.grpc.service import CLIENT_CLOCK_LEAD_S, _past_deadline

    class Context:
        def __init__(self, remaining):
            self.time_remaining = lambda: remaining

    assert _past_deadline(Context(0.002), CLIENT_CLOCK_LEAD_S) and _past_deadline(Context(0), CLIENT_CLOCK_LEAD_S)
    assert not _past_deadline(Context(5.0), CLIENT_CLOCK_LEAD_S), "a client that left with 5 s to go chose to"
    assert not _past_deadline(Context(None), CLIENT_CLOCK_LEAD_S), "a call without a deadline has none to pass"
