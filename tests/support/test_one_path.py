"""Every inference request reaches the model one way: through the pipeline (pipeline.pipeline.Pipeline.answer),
whatever its protocol, body form and transport, with CORS or gzip on or off. The pipeline counts each request it
answers in MLServer's inference metrics: a request answered 200 that the count does not see came some other way."""

import base64
import gzip
import json
import re
import zlib

import grpc
import pytest
import requests
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub

from chariot_support.dev.grpc_client import grpc_request
from chariot_support.dev.testing import chariot_request, encode_image, image_input
from chariot_support.model.tasks import TaskType

CONFIGURATIONS = {
    "default": {},
    "cors": {"MLSERVER_CORS_SETTINGS": '{"allow_origins": ["https://app.example"]}'},
    "gzip": {"MLSERVER_GZIP_ENABLED": "true"},
}


@pytest.fixture(scope="module", params=list(CONFIGURATIONS))
def served(request, demo_engine):
    return request.param, demo_engine(TaskType.IMAGE_CLASSIFICATION, CONFIGURATIONS[request.param])


def answered(engine) -> float:
    """Requests the pipeline answered, by MLServer's inference counter: every one under the version that answered
    (CHARIOT_MODEL_VERSION, 1), whichever the request named (MLServer's own label says None when it names none)."""
    text = requests.get(f"http://127.0.0.1:{engine.metrics_port}/metrics", timeout=5).text
    found = re.findall(r'^model_infer_request_success_total\{model="m-demo",version="([^"]*)"\} (\S+)$', text, re.M)
    assert {version for version, _ in found} <= {"1"}, found
    return sum(float(value) for _, value in found)


def sends(scene) -> dict:
    """Each way a client can send one image, as (path, body, headers)."""
    b64 = encode_image(scene.pixels)
    v2 = json.dumps(chariot_request(image_input("image-0", scene.pixels)))
    unusual = json.loads(v2)
    unusual["inputs"][0]["shape"] = ["1"]  # read by MLServer's request model, into the same request
    line = json.dumps({"input": b64})
    return {
        "v2": ("/v2/models/m-demo/infer", v2, {}),
        # The binary tensor data extension: the file itself after the JSON; here the answer's results after its JSON.
        "v2-binary": ("/v2/models/m-demo/infer", *binary(b64, output=True)),
        "v2-slash": ("/v2/models/m-any/infer/", v2, {}),
        "v2-version": ("/v2/models/m-demo/versions/1/infer", v2, {}),
        "v2-unusual": ("/v2/models/m-demo/infer", json.dumps(unusual), {}),
        "v2-gzip": ("/v2/models/m-demo/infer", gzip.compress(v2.encode()), {"Content-Encoding": "gzip"}),
        "root-kserve": ("/infer", v2, {"Content-Type": "application/json"}),
        "root-slash": ("/infer/", v2, {"Content-Type": "application/json"}),
        "root-deflate": ("/infer", zlib.compress(line.encode()), {"Content-Encoding": "deflate"}),
        "root-binary": ("/infer", *binary(b64, output=False)),
        "root-json": ("/infer", line, {"Content-Type": "application/json"}),
        "root-jsonl": ("/infer", f"{line}\n{line}\n", {"Content-Type": "application/jsonl"}),
        "root-file": ("/infer", base64.b64decode(b64), {"Content-Type": "image/png"}),
        "v1-predict": ("/v1/models/m-demo:predict", json.dumps({"instances": [{"b64": b64}]}), {}),
        "v1-classify": ("/v1/models/m-demo:classify", json.dumps({"examples": [{"image": {"b64": b64}}]}), {}),
    }


def binary(b64: str, *, output: bool) -> tuple[bytes, dict]:
    """A body in the binary tensor data extension sending the image file itself, and its headers; with `output`, it
    asks for its output as binary data too."""
    raw = base64.b64decode(b64)
    head: dict = {"inputs": [{"name": "image-0", "shape": [1], "datatype": "BYTES"}]}
    head["inputs"][0]["parameters"] = {"binary_data_size": 4 + len(raw)}
    if output:
        head["outputs"] = [{"name": "image-0", "parameters": {"binary_data": True}}]
    encoded = json.dumps(head).encode()
    headers = {"Inference-Header-Content-Length": str(len(encoded)), "Content-Type": "application/octet-stream"}
    return encoded + len(raw).to_bytes(4, "little") + raw, headers


@pytest.mark.parametrize(
    "kind",
    [
        "v2",
        "v2-binary",
        "v2-slash",
        "v2-version",
        "v2-unusual",
        "v2-gzip",
        "root-kserve",
        "root-slash",
        "root-deflate",
        "root-binary",
        "root-json",
        "root-jsonl",
        "root-file",
        "v1-predict",
        "v1-classify",
    ],
)
def test_every_rest_request_is_answered_by_the_pipeline(served, scene, kind):
    configuration, engine = served
    path, body, headers = sends(scene)[kind]
    headers = {**headers, "Origin": "https://app.example", "Accept-Encoding": "gzip"}
    before = answered(engine)
    reply = requests.post(f"{engine.url}{path}", data=body, headers=headers, timeout=30)
    assert reply.status_code == 200, reply.text[:300]
    assert answered(engine) == before + 1, f"{kind} was answered without the pipeline counting it"
    # One policy of headers for every protocol: the request id, and MLServer's CloudEvents headers carrying it.
    assert reply.headers.get("x-request-id") and reply.headers.get("ce-id") == reply.headers["x-request-id"], (
        reply.headers
    )
    # What the configuration adds to every answer, inference included.
    origin = reply.headers.get("access-control-allow-origin")
    assert (origin == "https://app.example") is (configuration == "cors"), reply.headers
    # gzip compresses answers of 500 bytes and more (Starlette's threshold, as MLServer configures it).
    compressed = configuration == "gzip" and len(reply.content) >= 500
    assert (reply.headers.get("content-encoding") == "gzip") is compressed, (len(reply.content), reply.headers)


def results_of(kind: str, reply: requests.Response) -> list:
    """The one image's results, whatever the form of the answer."""
    if kind == "v2-binary":  # its output asked for as binary data: the results after the JSON, one BYTES element
        assert reply.headers["content-type"] == "application/octet-stream", reply.headers
        return [json.loads(reply.content[int(reply.headers["inference-header-content-length"]) + 4 :])]
    if kind.startswith(("v2", "root-kserve", "root-slash", "root-binary")):
        return [reply.json()["outputs"][0]["data"][0]]
    if kind == "root-jsonl":
        return [json.loads(line)["output"] for line in reply.text.splitlines()]
    if kind.startswith("root"):
        return [reply.json()["output"]]
    return reply.json()["predictions"]


def test_every_body_form_gets_the_same_results(served, scene):
    _, engine = served
    answers = {}
    for kind, (path, body, headers) in sends(scene).items():
        if kind == "v1-classify":  # another answer format, checked below
            continue
        reply = requests.post(f"{engine.url}{path}", data=body, headers=headers, timeout=30)
        assert reply.status_code == 200, (kind, reply.text[:300])
        answers[kind] = results_of(kind, reply)
    expected = answers["v2"][0]
    assert expected, "the demo classifies the scene"
    for kind, results in answers.items():
        assert all(r == expected for r in results), (kind, results, expected)
    path, body, headers = sends(scene)["v1-classify"]
    classified = requests.post(f"{engine.url}{path}", data=body, headers=headers, timeout=30).json()["results"][0]
    assert classified[0][0] == expected[0]["label"]


def test_grpc_requests_are_answered_by_the_pipeline(served, scene):
    _, engine = served
    body = chariot_request(image_input("image-0", scene.pixels))
    with grpc.insecure_channel(engine.grpc_address) as channel:
        stub = GRPCInferenceServiceStub(channel)
        for raw in (False, True):
            before = answered(engine)
            _, call = stub.ModelInfer.with_call(grpc_request(body, "m-demo", raw=raw), timeout=30)
            assert answered(engine) == before + 1
            trailing = dict(call.trailing_metadata())  # REST's response headers, as gRPC carries them
            assert trailing.get("x-request-id") and trailing.get("ce-id") == trailing["x-request-id"], trailing


@pytest.mark.parametrize("served", ["gzip"], indirect=True)
def test_a_gzipped_answer_is_the_plain_answer_compressed(served, scene):
    configuration, engine = served
    assert configuration == "gzip"
    path, body, _ = sends(scene)["root-jsonl"]
    body = body * 6  # twelve lines: an answer long enough to compress
    jsonl = {"Content-Type": "application/jsonl"}
    compressed = requests.post(
        f"{engine.url}{path}", data=body, headers={**jsonl, "Accept-Encoding": "gzip"}, timeout=30, stream=True
    )
    raw = compressed.raw.read(decode_content=False)
    plain = requests.post(
        f"{engine.url}{path}", data=body, headers={**jsonl, "Accept-Encoding": "identity"}, timeout=30
    )
    assert compressed.headers["content-encoding"] == "gzip" and len(plain.content) >= 500
    assert gzip.decompress(raw) == plain.content
    assert "content-encoding" not in plain.headers


def test_mlservers_own_app_has_no_inference_route_left(released_metrics):
    """The REST app behind the front answers no inference: a request that got past the front would find no route."""
    import asyncio

    from chariot_support.model.demo import DEMO_MODELS
    from chariot_support.server.server import build_server
    from chariot_support.settings import EngineSettings

    async def build():  # MLServer's constructor sets signal handlers on the running loop
        return build_server(DEMO_MODELS[TaskType.OBJECT_DETECTION], "x", EngineSettings())

    app = asyncio.run(build())._rest_server._app
    posts = sorted(route.path for route in app.router.routes if "POST" in (getattr(route, "methods", None) or ()))
    assert not [p for p in posts if p.endswith(("/infer", "/infer/")) or p.startswith("/v1/models/")], posts
    assert posts, "the app should keep its other POST routes (repository, infer_stream)"


def test_the_runtime_is_reached_only_through_the_pipeline():
    """Only the pipeline calls the runtime's entry (by name, so that it crosses to parallel workers), and MLServer's
    own ways to a model are closed: its data plane's infer refuses, and the runtime has no predict of its own."""
    import ast
    import asyncio
    from pathlib import Path

    from mlserver import MLModel

    import chariot_support
    from chariot_support.errors import ChariotError
    from chariot_support.pipeline.data_plane import ChariotDataPlane
    from chariot_support.runtime.runtime import ChariotRuntime

    package = Path(chariot_support.__file__).parent
    callers = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", "")) == "call_runtime"
            ):
                callers.add(path.relative_to(package).as_posix())
    assert callers == {"pipeline/pipeline.py"}, callers
    assert ChariotRuntime.predict is MLModel.predict, "the runtime must not answer MLServer's predict itself"
    with pytest.raises(ChariotError, match="pipeline"):
        asyncio.run(ChariotDataPlane.infer(None, None, "m-demo"))


def test_a_method_not_allowed_is_logged_with_the_request_id(served):
    _, engine = served
    refused = requests.get(f"{engine.url}/v2/models/m-demo/infer", headers={"X-Request-ID": "get-405"}, timeout=10)
    assert refused.status_code == 405
    engine.wait_for_log('"request_id": "get-405"')  # the 405 is logged with the request's id


def test_each_image_is_read_from_its_base64_once_whatever_the_protocol(released_metrics, monkeypatch, scene):
    """Three images per request, counted through the base64 decoder every reader uses: three decodes for each JSON
    form (V2, Chariot's KServe-style root body, its JSON and JSONL lines, TF Serving's V1 predict and classify), none
    for a file sent as it is."""
    import asyncio
    import binascii

    from chariot_support.after_answer import afterwards
    from chariot_support.model.demo import DEMO_MODELS
    from chariot_support.server.server import build_server
    from chariot_support.settings import EngineSettings

    b64 = encode_image(scene.pixels)
    line = json.dumps({"input": b64})
    forms = {
        "v2": (
            "/v2/models/m-demo/infer",
            json.dumps(chariot_request(*(image_input(f"i{n}", scene.pixels) for n in range(3)))),
        ),
        "root-kserve": ("/infer", json.dumps(chariot_request(*(image_input(f"i{n}", scene.pixels) for n in range(3))))),
        "root-jsonl": ("/infer", "\n".join([line] * 3)),
        "v1-predict": ("/v1/models/m-demo:predict", json.dumps({"instances": [{"b64": b64}] * 3})),
        "v1-classify": ("/v1/models/m-demo:classify", json.dumps({"examples": [{"image": {"b64": b64}}] * 3})),
    }
    content_types = {"root-jsonl": b"application/jsonl"}
    decodes = []
    real = binascii.a2b_base64
    monkeypatch.setattr(binascii, "a2b_base64", lambda *a, **k: decodes.append(1) or real(*a, **k))

    async def call(app, path: str, body: bytes, content_type: bytes) -> int:
        sent = []

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            sent.append(message)

        headers = [(b"content-type", content_type), (b"content-length", b"%d" % len(body))]
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http"}
        scope |= {"path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": headers}
        await app({**scope, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {}}, receive, send)
        return sent[0]["status"]

    async def count() -> dict:
        server = build_server(DEMO_MODELS[TaskType.IMAGE_CLASSIFICATION], "demo", EngineSettings())
        await server._model_registry.load(server.model)
        app = server._rest_server._app
        counted = {}
        try:
            for kind, (path, body) in forms.items():
                decodes.clear()
                status = await call(app, path, body.encode(), content_types.get(kind, b"application/json"))
                counted[kind] = (status, len(decodes))
            file = base64.b64decode(b64)
            decodes.clear()
            status = await call(app, "/infer", file, b"image/png")
            counted["root-file"] = (status, len(decodes))
        finally:
            await server._model_registry.unload(server.model.name)
            afterwards.flush()  # the requests' log lines, written while this test's output is captured
        return counted

    counted = asyncio.run(count())
    assert counted == {**{kind: (200, 3) for kind in forms}, "root-file": (200, 0)}
