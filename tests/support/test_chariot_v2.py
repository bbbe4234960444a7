"""chariot-v2 at the root /infer, over real sockets, for every task type: JSON, JSONL and the image file itself,
each answering what chariot-v2-kserve answers for the same image and parameters, and a 400 naming the fault."""

import base64
import json
import zlib

import pytest
import requests

from chariot_support.dev.testing import chariot_request, encode_image, run_demo_engine
from chariot_support.model.tasks import TaskType

HEADER = "chariot-inference-parameters"


def settings(task: TaskType, **extra) -> dict:
    """Parameters every task accepts: its own non-default action, and prompts for Image Text to Text."""
    values = {"action": task.actions[-1]}
    if task is TaskType.IMAGE_TEXT_TO_TEXT:
        values["prompts"] = ["what colours are in the picture?", "is there any red?"]
    return {**values, **extra}


def kserve_results(engine, image_b64: str, parameters: dict) -> list:
    body = {
        "inputs": [{"name": "image", "shape": [1], "datatype": "BYTES", "data": [image_b64], "parameters": parameters}]
    }
    reply = requests.post(f"{engine.url}/v2/models/m-demo/infer", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()["outputs"][0]["data"][0]


def post(engine, data, content_type=None, **headers):
    if content_type is not None:
        headers["Content-Type"] = content_type
    return requests.post(f"{engine.url}/infer", data=data, headers=headers, timeout=30)


def error_of(reply, *fragments: str) -> str:
    assert reply.status_code == 400, (reply.status_code, reply.text)
    message = reply.json()["error"]
    missing = [f for f in fragments if f not in message]
    assert not missing, f"{missing} not in {message!r}"
    return message


@pytest.fixture(scope="module")
def image(scene) -> str:
    return encode_image(scene.pixels)


def test_json_answers_output_with_the_kserve_results(engine, task, image):
    parameters = settings(task)
    reply = post(engine, json.dumps({"input": image, "parameters": parameters}), "application/json")
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    assert reply.json() == {"output": kserve_results(engine, image, parameters)}


def test_json_without_parameters_uses_the_default_action(engine, task, image):
    reply = post(engine, json.dumps({"input": image}), "application/json")
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"output": kserve_results(engine, image, {})}


def test_jsonl_answers_one_line_per_input_in_order(engine, task, scene, image):
    flipped = encode_image(scene.pixels[:, ::-1].copy())
    lines = [
        {"input": image, "parameters": settings(task)},
        {"input": flipped, "parameters": settings(task)},
        {"input": image, "parameters": settings(task, score_threshold=0.95)},
    ]
    reply = post(engine, "\n".join(json.dumps(line) for line in lines) + "\n", "application/jsonl")
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("application/jsonl")
    answers = [json.loads(line) for line in reply.text.splitlines()]
    expected = [{"output": kserve_results(engine, line["input"], line["parameters"])} for line in lines]
    assert answers == expected
    assert len(answers) == 3


def test_the_image_file_as_the_body_with_parameters_in_the_header(engine, task, image):
    parameters = settings(task)
    reply = post(engine, base64.b64decode(image), "image/png", **{HEADER: json.dumps(parameters)})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"output": kserve_results(engine, image, parameters)}


def test_the_image_file_without_the_header_uses_the_defaults(engine, task, image):
    reply = post(engine, base64.b64decode(image), "application/octet-stream")
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"output": kserve_results(engine, image, {})}


SCORED = [t for t in TaskType if t is not TaskType.IMAGE_TEXT_TO_TEXT]


@pytest.mark.parametrize("task", SCORED, ids=[t.name.lower() for t in SCORED], indirect=True)
def test_score_threshold_filters_as_on_kserve(engine, task, image):
    everything = post(engine, json.dumps({"input": image}), "application/json").json()["output"]
    top = max(r["score"] for r in everything)
    kept = post(engine, base64.b64decode(image), "image/png", **{HEADER: json.dumps({"score_threshold": top})})
    assert [r["score"] for r in kept.json()["output"]] == [top]


def test_kserve_bodies_still_work_at_infer(engine, task, image):
    parameters = settings(task)
    body = chariot_request({"name": "a", "shape": [1], "datatype": "BYTES", "data": [image], "parameters": parameters})
    reply = post(engine, json.dumps(body))  # no content type: told apart by content
    assert reply.status_code == 200, reply.text
    assert reply.json()["outputs"][0]["data"][0] == kserve_results(engine, image, parameters)


# --- what is refused, and what the refusal says ---------------------------------------------------------------

# A body, header or line of the wrong form is refused by the chariot-v2 reader (protocols/chariot_v2.py), which knows
# no task type: shown on one task type's engine. Actions and images, which depend on the task, are shown on each.
ONE_TASK = pytest.mark.parametrize("task", [TaskType.OBJECT_DETECTION], ids=["object_detection"], indirect=True)


@ONE_TASK
def test_header_that_is_not_json(engine, image):
    reply = post(engine, base64.b64decode(image), "image/png", **{HEADER: "{action: detect"})
    error_of(reply, HEADER, "not valid JSON")


@ONE_TASK
@pytest.mark.parametrize("value", ['["detect"]', '"detect"', "3"])
def test_header_that_is_not_an_object(engine, image, value):
    reply = post(engine, base64.b64decode(image), "image/png", **{HEADER: value})
    error_of(reply, HEADER, "must be a JSON object")


def test_unknown_action_in_the_header(engine, image):
    reply = post(engine, base64.b64decode(image), "image/png", **{HEADER: '{"action": "dance"}'})
    message = error_of(reply, "unknown action 'dance'", HEADER)
    assert "input 'body'" not in message


def test_unknown_action_in_json(engine, image):
    reply = post(engine, json.dumps({"input": image, "parameters": {"action": "dance"}}), "application/json")
    error_of(reply, "unknown action 'dance'", "allowed")


@ONE_TASK
def test_bad_base64(engine):
    reply = post(engine, json.dumps({"input": "not base64!!"}), "application/json")
    error_of(reply, "'input'", "not valid base64")


@ONE_TASK
def test_data_url_prefix_is_named(engine, image):
    reply = post(engine, json.dumps({"input": f"data:image/png;base64,{image}"}), "application/json")
    error_of(reply, "data:image/png;base64,", "drop the prefix")


def test_a_body_that_is_not_an_image(engine, task):
    reply = post(engine, b"GIF89a this is not really a picture", "image/gif", **{HEADER: json.dumps(settings(task))})
    message = error_of(reply, "not an image this engine can read")
    assert "data[0]" not in message


def test_base64_of_something_that_is_not_an_image(engine, task):
    body = {"input": base64.b64encode(b"hello world").decode(), "parameters": settings(task)}
    reply = post(engine, json.dumps(body), "application/json")
    message = error_of(reply, "'input'", "not an image")
    assert "data[0]" not in message


@ONE_TASK
@pytest.mark.parametrize("content_type", ["image/png", "application/json", "application/jsonl", None])
def test_empty_body(engine, content_type):
    error_of(post(engine, b"", content_type), "empty")


@ONE_TASK
def test_json_that_is_not_an_object(engine):
    error_of(post(engine, "[1, 2]", "application/json"), "'inputs'")


@ONE_TASK
def test_json_with_an_unknown_key(engine, image):
    error_of(post(engine, json.dumps({"input": image, "params": {}}), "application/json"), "'params'")


@ONE_TASK
def test_parameters_that_are_not_an_object(engine, image):
    error_of(post(engine, json.dumps({"input": image, "parameters": [1]}), "application/json"), "'parameters'")


@ONE_TASK
def test_jsonl_with_a_bad_line_names_it(engine, image):
    lines = [json.dumps({"input": image}), json.dumps({"input": image}), "{oops", json.dumps({"input": image})]
    error_of(post(engine, "\n".join(lines), "application/jsonl"), "line 3", "not valid JSON")


def test_jsonl_with_a_bad_image_names_its_line(engine, task, image):
    text = base64.b64encode(b"plain text").decode()
    lines = [
        json.dumps({"input": image, "parameters": settings(task)}),
        json.dumps({"input": text, "parameters": settings(task)}),
    ]
    message = error_of(post(engine, "\n".join(lines), "application/jsonl"), "line 2", "not an image")
    assert "input 'line-2'" not in message


def test_jsonl_with_a_bad_action_names_its_line(engine, task, image):
    lines = [
        json.dumps({"input": image, "parameters": settings(task)}),
        json.dumps({"input": image, "parameters": settings(task, action="dance")}),
    ]
    error_of(post(engine, "\n".join(lines), "application/jsonl"), "line 2", "unknown action")


@ONE_TASK
def test_reserved_parameter_names_are_refused(engine, image):
    reply = post(engine, base64.b64decode(image), "image/png", **{HEADER: '{"content_type": "str"}'})
    error_of(reply, "'content_type'")


# --- CHARIOT_INFERENCE_PROTOCOL ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pinned():
    def run(protocol: str):
        return run_demo_engine(TaskType.OBJECT_DETECTION, env={"CHARIOT_INFERENCE_PROTOCOL": protocol})

    return run


def binary_request(image: str) -> tuple[bytes, dict]:
    """The image file itself in the binary tensor data extension, and the header giving its JSON's length."""
    raw = base64.b64decode(image)
    head = {
        "inputs": [{"name": "a", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 4 + len(raw)}}]
    }
    encoded = json.dumps(head).encode()
    return encoded + len(raw).to_bytes(4, "little") + raw, {"Inference-Header-Content-Length": str(len(encoded))}


def test_pinned_to_chariot_v2_reads_a_kserve_body_as_chariot_v2(pinned, image):
    with pinned("chariot-v2") as running:
        body = chariot_request({"name": "a", "shape": [1], "datatype": "BYTES", "data": [image]})
        error_of(post(running, json.dumps(body), "application/json"), "unknown key 'inputs'")
        # chariot-v2's binary form is the file as the body; the extension is read at the V2 route.
        data, headers = binary_request(image)
        error_of(post(running, data, **headers), "binary tensor data", "/v2/models/<name>/infer", "chariot-v2")
        assert requests.post(f"{running.url}/v2/models/m-demo/infer", data=data, headers=headers, timeout=30).ok
        ok = post(running, json.dumps({"input": image}), "application/json")
        assert ok.status_code == 200 and "output" in ok.json(), ok.text


def test_pinned_to_kserve_refuses_chariot_v2(pinned, image):
    with pinned("chariot-v2-kserve") as running:
        body = chariot_request({"name": "a", "shape": [1], "datatype": "BYTES", "data": [image]})
        assert post(running, json.dumps(body), "application/json").json()["outputs"]
        data, headers = binary_request(image)
        assert post(running, data, **headers).json()["outputs"]
        error_of(post(running, json.dumps({"input": image}), "application/json"), "inputs")
        error_of(post(running, base64.b64decode(image), "image/png"), "JSON")


def test_an_image_file_full_of_bracket_bytes_is_not_read_as_json(engine, task, scene):
    """A photo's compressed bytes hold '[' and '{' by chance (about one byte in 128): an image file sent as the body
    is an image, not a JSON document nesting hundreds of levels deep."""
    png = base64.b64decode(encode_image(scene.pixels))
    text = b"Comment\x00" + b"[{" * 400
    chunk = len(text).to_bytes(4, "big") + b"tEXt" + text + zlib.crc32(b"tEXt" + text).to_bytes(4, "big")
    bracketed = png[:-12] + chunk + png[-12:]  # a valid PNG: a text chunk before the closing IEND chunk
    reply = post(engine, bracketed, "image/png", **{HEADER: json.dumps(settings(task))})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"output": kserve_results(engine, encode_image(scene.pixels), settings(task))}
