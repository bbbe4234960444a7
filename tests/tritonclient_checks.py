"""A baked engine held to the Open Inference Protocol by NVIDIA's tritonclient, over HTTP and gRPC, and to
the answers a plain REST request gets for the same image. Run by test_tritonclient.py."""

import json

import pytest

from tritonclient_support import (
    INVALID,
    MODEL,
    NOT_FOUND,
    PROMPTS,
    TASK,
    TRANSPORTS,
    Client,
    plain_rest,
    plain_rest_results,
    scene_png,
)

# The second action each task type takes, beside its default.
OTHER_ACTION = {
    "Image Classification": "predict_proba",
    "Object Detection": "detect",
    "Oriented Object Detection": "detect",
    "Image Segmentation": "detect",
    "Image Text to Text": "predict",
}
PLATFORM = "chariot-v2-kserve_" + TASK.lower().replace(" ", "_")


@pytest.fixture(scope="module", params=TRANSPORTS)
def client(request) -> Client:
    return Client(request.param)


def test_server_is_live_and_ready(client):
    assert client.client.is_server_live()
    assert client.client.is_server_ready()
    assert client.client.is_model_ready(MODEL)
    assert client.client.is_model_ready("m-deployed-by-chariot")


def test_metadata_declares_the_image_input_and_result_output(client):
    kwargs = {"as_json": True} if client.transport == "grpc" else {}
    server = client.client.get_server_metadata(**kwargs)
    assert server["name"] and "binary_tensor_data" in server["extensions"], server
    metadata = client.client.get_model_metadata("m-deployed-by-chariot", **kwargs)
    assert metadata["name"] == "m-deployed-by-chariot"
    assert metadata["platform"] == PLATFORM
    for tensors in (metadata["inputs"], metadata["outputs"]):
        assert [(t["datatype"], [int(d) for d in t["shape"]]) for t in tensors] == [("BYTES", [1])]


def test_repository_index_lists_the_model_as_ready(client):
    kwargs = {"as_json": True} if client.transport == "grpc" else {}
    index = client.client.get_model_repository_index(**kwargs)
    models = index["models"] if isinstance(index, dict) else index
    assert [(m["name"], m["state"]) for m in models] == [(MODEL, "READY")]


@pytest.mark.parametrize("action", [None, "other"])
def test_results_equal_a_plain_rest_request(client, action):
    images = {"image-0": scene_png(), "image-1": scene_png(flip=True)}
    settings = {"prompts": PROMPTS}
    if action:
        settings["action"] = OTHER_ACTION[TASK]
    expected = plain_rest_results(plain_rest(MODEL, images, settings))
    assert all(expected.values()), f"the demo found nothing in the scene: {expected}"
    result = client.infer(
        MODEL, [client.image(n, d) for n, d in images.items()], parameters=client.parameters(**settings)
    )
    assert [o["name"] for o in client.response(result)["outputs"]] == list(images)
    assert {name: client.results(result, name) for name in images} == expected


def test_a_numeric_score_threshold_arrives(client):
    # tritonclient sends a float as double_param, which MLServer's gRPC schema lacks; the engine still reads it.
    everything = plain_rest_results(plain_rest(MODEL, {"image-0": scene_png()}, {"prompts": PROMPTS}))["image-0"]
    scores = sorted(r["score"] for r in everything if "score" in r)
    threshold = (scores[0] + scores[-1]) / 2 if scores else 0.5
    settings = {"prompts": PROMPTS, "score_threshold": threshold}
    expected = plain_rest_results(plain_rest(MODEL, {"image-0": scene_png()}, settings))["image-0"]
    if len(set(scores)) > 1:
        assert len(expected) < len(everything), "the threshold should drop some results"
    result = client.infer(MODEL, [client.image("image-0", scene_png())], parameters=client.parameters(**settings))
    assert client.results(result, "image-0") == expected


def test_raw_image_bytes_equal_base64(client):
    # The file itself in a BYTES element: raw contents over gRPC, the binary tensor data extension over HTTP.
    as_file = client.infer(
        MODEL, [client.image("image-0", scene_png(), encode=False)], parameters=client.parameters(prompts=PROMPTS)
    )
    expected = plain_rest_results(plain_rest(MODEL, {"image-0": scene_png()}, {"prompts": PROMPTS}))
    assert client.results(as_file, "image-0") == expected["image-0"]


@pytest.mark.parametrize("inputs", ["binary", "json"])
@pytest.mark.parametrize("outputs", ["binary", "json", "default"])
def test_http_tensors_in_json_or_binary_data_give_the_same_results(inputs, outputs):
    """tritonclient's HTTP client sends tensors in the binary tensor data extension and asks for binary outputs
    unless told otherwise; each form, and each mix, answers what a plain JSON request gets."""
    client = Client("http")
    images = {"image-0": scene_png(), "image-1": scene_png(flip=True)}
    sent = [client.image(name, data, binary=inputs == "binary") for name, data in images.items()]
    requested = (
        None
        if outputs == "default"
        else [client.lib.InferRequestedOutput(n, binary_data=outputs == "binary") for n in images]
    )
    result = client.infer(MODEL, sent, outputs=requested, parameters=client.parameters(prompts=PROMPTS))
    expected = plain_rest_results(plain_rest(MODEL, images, {"prompts": PROMPTS}))
    assert {name: client.results(result, name) for name in images} == expected
    binary = ["binary_data_size" in result.get_output(name).get("parameters", {}) for name in images]
    assert binary == [outputs != "json"] * len(images), result.get_response()


def test_request_id_is_echoed_and_metadata_passes_through(client):
    metadata = json.dumps(
        {
            "standard_metadata": {"latitude": 51.5},
            "extended_metadata": [{"key": "camera", "type": "str", "value": "north-7"}],
        }
    )
    result = client.infer(
        MODEL,
        [client.image("image-0", scene_png())],
        request_id="trace-42",
        parameters=client.parameters(prompts=PROMPTS, metadata=metadata),
    )
    assert client.response(result)["id"] == "trace-42"
    assert client.metadata_parameter(result) == metadata


# Each mistake: the image element as sent (bytes of a file are base64-encoded, text is sent as it is), and the
# request parameters.
MISTAKES = {
    "bytes that are no image": (b"hello world, not a picture", {"prompts": PROMPTS}),
    "invalid base64": ("@@not base64@@", {"prompts": PROMPTS}),
    "unknown action": (scene_png(), {"prompts": PROMPTS, "action": "explode"}),
    "metadata not JSON": (scene_png(), {"prompts": PROMPTS, "metadata": "{oops"}),
}


@pytest.mark.parametrize("case", MISTAKES)
def test_client_mistakes_get_invalid_argument_and_the_rest_message(client, case):
    element, settings = MISTAKES[case]
    rest = plain_rest(MODEL, {"image-0": element}, settings)
    assert rest.status_code == 400, rest.text
    image = client.image("image-0", element) if isinstance(element, bytes) else client.text("image-0", element)
    error = client.error(lambda: client.infer(MODEL, [image], parameters=client.parameters(**settings)))
    assert error.status() == INVALID[client.transport], error
    assert error.message() == rest.json()["error"]
    assert client.client.is_server_ready()


def test_unknown_model_is_not_found(client):
    error = client.error(
        lambda: client.infer(
            "resnet50", [client.image("image-0", scene_png())], parameters=client.parameters(prompts=PROMPTS)
        )
    )
    assert error.status() == NOT_FOUND[client.transport]
    assert "no model named 'resnet50'" in error.message()
    error = client.error(lambda: client.client.get_model_metadata("resnet50"))
    assert error.status() == NOT_FOUND[client.transport]
