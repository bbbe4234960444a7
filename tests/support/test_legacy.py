"""End to end: the KServe V1 and TensorFlow Serving REST routes of the real engine, with the request shapes of
both protocols' documents sent with images, answered with the very results the V2 route gives."""

import base64
import json

import numpy as np
import pytest
import requests

from chariot_support.dev.testing import chariot_request, encode_image, image_input
from chariot_support.model.tasks import TaskType

PROMPTS = ["how many regions are there?", "is there anything red?"]


@pytest.fixture(scope="module")
def b64(scene) -> str:
    return encode_image(scene.pixels)


@pytest.fixture(scope="module")
def only_red(scene) -> np.ndarray:
    pixels = np.zeros_like(scene.pixels)
    pixels[20:80, 30:120] = (255, 0, 0)
    return pixels


def post(engine, path, body):
    raw = body if isinstance(body, str) else json.dumps(body)
    return requests.post(engine.url + path, data=raw, timeout=30)


def v2_results(engine, model_name, *images, **parameters):
    """What the V2 route answers for each image, sent as its own input with `parameters`."""
    body = chariot_request(*(image_input(f"image-{i}", pixels, **parameters) for i, pixels in enumerate(images)))
    response = post(engine, f"/v2/models/{model_name}/infer", body)
    assert response.status_code == 200, response.text
    return [output["data"][0] for output in response.json()["outputs"]]


def predictions(engine, path, body, count):
    response = post(engine, path, body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    assert list(answer) == ["predictions"]
    assert len(answer["predictions"]) == count
    return answer["predictions"]


# --- the example request shapes of both documents, each sent with images -----------------------------------


def golden_requests(scene, only_red):
    """name -> (path suffix, body, the images in order): each shape the documents show, carrying images."""
    b64, red_b64 = encode_image(scene), encode_image(only_red)
    both = [scene, only_red]
    return {
        # KServe V1: rows of named features, under instances and under inputs.
        "instances of named inputs": (
            ":predict",
            {
                "instances": [
                    {"image": {"b64": b64}, "prompts": PROMPTS},
                    {"image": {"b64": red_b64}, "prompts": PROMPTS},
                ]
            },
            both,
        ),
        "inputs of named inputs": (
            ":predict",
            {"inputs": [{"image": {"b64": b64}, "prompts": PROMPTS}, {"image": {"b64": red_b64}, "prompts": PROMPTS}]},
            both,
        ),
        # KServe V1's simpler payloads: each row a list of values, here the image's RGB pixels.
        "instances of value lists": (
            ":predict",
            {"instances": [scene.tolist(), only_red.tolist()], "parameters": {"prompts": PROMPTS}},
            both,
        ),
        "inputs of value lists": (
            ":predict",
            {"inputs": [scene.tolist(), only_red.tolist()], "parameters": {"prompts": PROMPTS}},
            both,
        ),
        # TF Serving: one unnamed input per row, binary values as {"b64": ...}, or plain base64 strings.
        "instances of b64 values": (
            ":predict",
            {
                "signature_name": "serving_default",
                "instances": [{"b64": b64}, {"b64": red_b64}],
                "parameters": {"prompts": PROMPTS},
            },
            both,
        ),
        "instances of strings": (":predict", {"instances": [b64, red_b64], "parameters": {"prompts": PROMPTS}}, both),
        # TF Serving: several named inputs per row; the extra ones reach predict as the image's parameters.
        "instances of several named inputs": (
            ":predict",
            {
                "instances": [
                    {
                        "tag": "foo",
                        "signal": [1, 2, 3, 4, 5],
                        "sensor": [[1, 2], [3, 4]],
                        "image": {"b64": b64},
                        "prompts": PROMPTS,
                    },
                    {
                        "tag": "bar",
                        "signal": [3, 4, 1, 2, 5],
                        "sensor": [[4, 5], [6, 8]],
                        "image": {"b64": red_b64},
                        "prompts": PROMPTS,
                    },
                ]
            },
            both,
        ),
        # TF Serving: the columnar form, one list per named input.
        "columnar inputs": (
            ":predict",
            {"inputs": {"tag": ["foo", "bar"], "image": [{"b64": b64}, {"b64": red_b64}], "prompts": PROMPTS}},
            both,
        ),
        # TF Serving: the image under a name of the client's choosing, e.g. a `_bytes` tensor.
        "instances with image_bytes": (
            ":predict",
            {"instances": [{"image_bytes": {"b64": b64}, "prompts": PROMPTS}]},
            [scene],
        ),
        # TF Serving's JSON conformance example: NaN and Infinity among the inputs.
        "NaN and Infinity": (
            ":predict",
            '{"instances": [{"image": {"b64": "' + b64 + '"}, "sensor_readings": [1.0, -3.14, '
            'NaN, Infinity, -Infinity]}], "parameters": {"prompts": ' + json.dumps(PROMPTS) + "}}",
            [scene],
        ),
        # TF Serving's version and label paths.
        "a version path": (
            "/versions/1:predict",
            {"instances": [{"b64": b64}], "parameters": {"prompts": PROMPTS}},
            [scene],
        ),
        "a label path": (
            "/labels/stable:predict",
            {"instances": [{"b64": b64}], "parameters": {"prompts": PROMPTS}},
            [scene],
        ),
    }


TINY = np.zeros((1, 1, 3), np.uint8)


# How a documented body shape is read (protocols/legacy.py) does not depend on the task type: each is shown on Image
# Text to Text's engine, whose answers also show that the prompts travel in every shape. Each task's V1 answers are
# shown beside V2's by the tests below.
@pytest.mark.parametrize("task", [TaskType.IMAGE_TEXT_TO_TEXT], ids=["image_text_to_text"], indirect=True)
@pytest.mark.parametrize("case", golden_requests(TINY, TINY))
def test_documented_predict_shapes_answer_what_v2_answers(engine, model_name, scene, only_red, case):
    suffix, body, images = golden_requests(scene.pixels, only_red)[case]
    found = predictions(engine, f"/v1/models/{model_name}{suffix}", body, len(images))
    assert found == v2_results(engine, model_name, *images, prompts=PROMPTS)
    assert found[0], "the scene has results for every task type"


def test_settings_travel_per_instance_and_at_the_top_level(engine, model_name, task, scene, b64):
    if task is TaskType.IMAGE_TEXT_TO_TEXT:
        settings = {"prompts": ["is there anything green?"]}
    else:
        everything = v2_results(engine, model_name, scene.pixels, action=task.actions[-1])[0]
        settings = {"action": task.actions[-1], "score_threshold": sorted(r["score"] for r in everything)[1]}
    expected = v2_results(engine, model_name, scene.pixels, **settings)
    path = f"/v1/models/{model_name}:predict"
    assert predictions(engine, path, {"instances": [{"image": {"b64": b64}, **settings}]}, 1) == expected
    assert predictions(engine, path, {"instances": [{"b64": b64}], "parameters": settings}, 1) == expected
    assert predictions(engine, path, {"inputs": {"image": {"b64": b64}, **settings}}, 1) == expected
    # An instance's own setting wins over the request's, as in V2.
    mixed = {"instances": [{"image": {"b64": b64}, **settings}], "parameters": {"prompts": PROMPTS}}
    assert predictions(engine, path, mixed, 1) == expected


# Which model name a V1 path carries is read before the task type matters: one task type's engine shows it.
@pytest.mark.parametrize("task", [TaskType.OBJECT_DETECTION], ids=["object_detection"], indirect=True)
def test_any_chariot_model_id_reaches_the_model(engine, model_name, b64):
    body = {"instances": [{"b64": b64}], "parameters": {"prompts": PROMPTS}}
    assert predictions(engine, "/v1/models/m-0a1b2c3d:predict", body, 1) == predictions(
        engine, f"/v1/models/{model_name}:predict", body, 1
    )


def test_explain_gives_predictions_and_one_explanation_per_instance(engine, model_name, task, scene, b64, only_red):
    body = {"instances": [{"b64": b64}, {"b64": encode_image(only_red)}], "parameters": {"prompts": PROMPTS}}
    response = post(engine, f"/v1/models/{model_name}:explain", body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert list(answer) == ["predictions", "explanations"]
    assert answer["predictions"] == v2_results(engine, model_name, scene.pixels, only_red, prompts=PROMPTS)
    assert len(answer["explanations"]) == 2
    for results, explanation in zip(answer["predictions"], answer["explanations"], strict=True):
        scores = explanation["importance_scores"]
        assert len(scores) == len(results) and all(0 <= s <= 1 for s in scores)
        assert max(scores) > 0, "blanking what the model found changes its answer"
        if task is not TaskType.IMAGE_TEXT_TO_TEXT:
            assert all(s <= r["score"] + 1e-9 for s, r in zip(scores, results, strict=True))
    columnar = post(
        engine, f"/v1/models/{model_name}:explain", {"inputs": {"image": [{"b64": b64}], "prompts": PROMPTS}}
    )
    assert columnar.json()["explanations"] == answer["explanations"][:1]


def test_classify_answers_label_score_pairs_for_image_classification(engine, model_name, task, scene, b64, only_red):
    body = {
        "signature_name": "classify",
        "context": {"prompts": PROMPTS},
        "examples": [
            {"image": {"b64": b64}, "caption": "seaside"},
            {"image": {"b64": encode_image(only_red)}, "caption": "mountains"},
        ],
    }
    response = post(engine, f"/v1/models/{model_name}:classify", body)
    if task is not TaskType.IMAGE_CLASSIFICATION:
        assert response.status_code == 400
        assert ":classify is for Image Classification" in response.json()["error"]
        return
    assert response.status_code == 200, response.text
    answer = response.json()
    assert list(answer) == ["results"]
    expected = v2_results(engine, model_name, scene.pixels, only_red, action="predict_proba")
    assert answer["results"] == [[[r["label"], r["score"]] for r in per_image] for per_image in expected]
    assert answer["results"][1][0][0] == "red"
    top = post(engine, f"/v1/models/{model_name}:classify", {**body, "context": {"action": "predict"}}).json()
    assert [len(per_image) for per_image in top["results"]] == [1, 1]


def test_list_status_and_metadata(engine, model_name, task):
    assert requests.get(f"{engine.url}/v1/models", timeout=5).json() == {"models": [model_name]}
    for suffix in ("", "/versions/1", "/labels/latest"):
        response = requests.get(f"{engine.url}/v1/models/{model_name}{suffix}", timeout=5)
        assert response.status_code == 200, response.text
        assert response.json() == {
            "name": model_name,
            "ready": True,
            "model_version_status": [
                {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
            ],
        }
        metadata = requests.get(f"{engine.url}/v1/models/{model_name}{suffix}/metadata", timeout=5).json()
        assert metadata["model_spec"] == {"name": model_name, "signature_name": "", "version": "1"}
        signatures = metadata["metadata"]["signature_def"]["signature_def"]
        default = signatures["serving_default"]
        assert default["method_name"] == "tensorflow/serving/predict"
        assert default["inputs"]["image"]["dtype"] == "DT_STRING"
        assert set(default["inputs"]) == {"image", "action", "score_threshold", "prompts"}
        assert set(default["outputs"]) == {"predictions"}
        assert ("classify" in signatures) == (task is TaskType.IMAGE_CLASSIFICATION)


# --- every error ------------------------------------------------------------------------------------------


def _bad(b64):
    image = {"b64": b64}
    return [
        (
            "both instances and inputs",
            ":predict",
            {"instances": [image], "inputs": [image]},
            400,
            "both 'instances' and 'inputs'",
        ),
        (
            "neither instances nor inputs",
            ":predict",
            {"signature_name": "serving_default"},
            400,
            "neither 'instances' nor 'inputs'",
        ),
        ("empty instances", ":predict", {"instances": []}, 400, "'instances' must be a non-empty list"),
        (
            "bad b64",
            ":predict",
            {"instances": [{"b64": "@@not base64@@"}]},
            400,
            "instances[0].b64 is not valid base64",
        ),
        (
            "b64 of no image",
            ":predict",
            {"instances": [{"b64": base64.b64encode(b"hello").decode()}], "parameters": {"prompts": PROMPTS}},
            400,
            "input 'instances[0]': data[0] is not an image",
        ),
        ("a number for an image", ":predict", {"instances": [1.0, 2.0, 5.0]}, 400, "instances[0] is not an image"),
        (
            "two images in one row",
            ":predict",
            {"instances": [{"a": image, "b": image}]},
            400,
            "instances[0] holds 2 images",
        ),
        ("pixels out of range", ":predict", {"instances": [[[[0, 0, 256]]]]}, 400, "whole numbers from 0 to 255"),
        ("NaN pixels", ":predict", '{"instances": [[[[0, 0, NaN]]]]}', 400, "whole numbers from 0 to 255"),
        ("grey pixels", ":predict", {"instances": [[[1, 2], [3, 4]]]}, 400, "height x width x 3"),
        (
            "unknown action",
            ":predict",
            {"instances": [{"image": image, "action": "explode", "prompts": PROMPTS}]},
            400,
            "unknown action 'explode'",
        ),
        (
            "score_threshold NaN",
            ":predict",
            '{"instances": [{"image": {"b64": "' + b64 + '"}, "score_threshold": NaN, "prompts": ["a"]}]}',
            400,
            "score_threshold",
        ),
        ("unknown top-level key", ":predict", {"instance": [image]}, 400, "unknown key 'instance'"),
        (
            "unknown signature",
            ":predict",
            {"signature_name": "tensorflow/serving/regress", "instances": [image]},
            400,
            "signature_name",
        ),
        ("malformed JSON", ":predict", "{not json", 400, "not valid JSON"),
        ("body not an object", ":predict", "[1, 2]", 400, "JSON object"),
        (
            "regress",
            ":regress",
            {"signature_name": "tensorflow/serving/regress", "examples": [{"x": 1.0}, {"x": 2.0}]},
            400,
            "does not regress",
        ),
        ("unknown verb", ":train", {"instances": [image]}, 404, "the verbs are"),
        ("unknown version", "/versions/7:predict", {"instances": [image]}, 404, "has no version '7'"),
    ]


BAD_CASES = [case[0] for case in _bad("")]


@pytest.fixture(scope="module")
def detector(demo_engine):
    """A request is refused before its task type matters: the refusals run on one task type's engine."""
    return demo_engine(TaskType.OBJECT_DETECTION)


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_requests_get_a_clear_error_and_the_engine_keeps_serving(detector, model_name, b64, case):
    engine = detector
    ((_, suffix, body, status, message),) = [c for c in _bad(b64) if c[0] == case]
    response = post(engine, f"/v1/models/{model_name}{suffix}", body)
    assert response.status_code == status, response.text
    assert message in response.json()["error"]
    good = post(
        engine, f"/v1/models/{model_name}:predict", {"instances": [{"b64": b64}], "parameters": {"prompts": PROMPTS}}
    )
    assert good.status_code == 200 and engine.alive()


def test_classify_errors(engine, model_name, task, b64):
    path = f"/v1/models/{model_name}:classify"
    if task is not TaskType.IMAGE_CLASSIFICATION:
        assert post(engine, path, {"examples": [{"image": {"b64": b64}}]}).status_code == 400
        return
    no_examples = post(engine, path, {"instances": [{"b64": b64}]})
    assert no_examples.status_code == 400 and "unknown key 'instances'" in no_examples.json()["error"]
    repeated = post(
        engine, path, {"context": {"action": "predict"}, "examples": [{"image": {"b64": b64}, "action": "predict"}]}
    )
    assert repeated.status_code == 400 and "examples[0] repeats 'action' from 'context'" in repeated.json()["error"]


# Which model name or version a V1 path carries is read before the task type matters: one task type's engine shows it.
@pytest.mark.parametrize("task", [TaskType.OBJECT_DETECTION], ids=["object_detection"], indirect=True)
def test_unknown_model_or_version_is_404(engine, model_name):
    refused = requests.post(
        f"{engine.url}/v1/models/half:predict", json={"instances": [1.0, 5.0]}, headers={"X-Request-ID": "v1-404"}
    )
    assert refused.status_code == 404
    engine.wait_for_log('"request_id": "v1-404"')  # the 404 is logged with the request's id
    for path in (
        "/v1/models/half",
        f"/v1/models/{model_name}/versions/2",
        f"/v1/models/{model_name}/versions/2/metadata",
    ):
        response = requests.get(engine.url + path, timeout=5)
        assert response.status_code == 404 and response.json()["error"], path
    assert "no route" in requests.get(f"{engine.url}/v1/models/{model_name}/signatures", timeout=5).json()["error"]
