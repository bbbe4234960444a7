"""Unit tests of chariot_support.protocols.legacy: V1 / TF Serving bodies read into V2's parsed request, and the answers."""

import base64
import json
import math

import cv2
import numpy as np
import pytest

from chariot_support.dev.testing import encode_image, expect_error
from chariot_support.errors import BadRequest, InvalidResult
from chariot_support.model.tasks import TaskType
from chariot_support.protocols.chariot_v2_kserve import parse_request
from chariot_support.protocols.images import decode_image
from chariot_support.protocols.legacy import STATUS_PATH, VERB_PATH, read_body, read_classify, read_predict, render
from chariot_support.protocols.request import Answer, Answered
from chariot_support.rest.legacy_routes import model_metadata, model_status
from chariot_support.runtime.runtime import validate_explanations
from chariot_support.settings import DEFAULTS, EngineSettings

PIXELS = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3) * 4
B64 = encode_image(PIXELS)
OD, IC, ITT = TaskType.OBJECT_DETECTION, TaskType.IMAGE_CLASSIFICATION, TaskType.IMAGE_TEXT_TO_TEXT


def parse_predict(body, task, limits=DEFAULTS):
    """A `:predict` body as the runtime checks it: read by the protocol, then by the engine's parser."""
    return parse_request(read_predict(body), task, limits)


def parse_classify(body, task, limits=DEFAULTS):
    return parse_request(read_classify(body), task, limits)


def bad(call, *fragments):
    return expect_error(call, BadRequest, *fragments)


def test_nan_and_infinity_are_read_as_tensorflow_serving_reads_them():
    body = read_body(b'{"instances": [{"x": [NaN, Infinity, -Infinity]}]}')
    values = body["instances"][0]["x"]
    assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf]
    bad(lambda: read_body(b"{oops"), "not valid JSON")
    bad(lambda: read_body(b"[1]"), "must be a JSON object, got list")


@pytest.mark.parametrize(
    "body",
    [
        {"instances": [{"b64": B64}]},
        {"instances": [B64]},
        {"instances": [PIXELS.tolist()]},
        {"inputs": [{"image": {"b64": B64}}]},
        {"inputs": {"image": [{"b64": B64}]}},
        {"inputs": {"image": {"b64": B64}}},
        {"inputs": {"photo": [{"b64": B64}]}},
        {"instances": [{"image_bytes": {"b64": B64}}]},
    ],
)
def test_every_image_form_decodes_to_the_same_pixels(body):
    (image,) = parse_predict(body, OD).images
    assert np.array_equal(decode_image(image.encoded, "image"), PIXELS)
    assert image.action == "detect" and image.score_threshold is None


def test_rows_are_named_after_where_they_sit():
    parsed = parse_predict({"instances": [{"b64": B64}, {"b64": B64}]}, OD)
    assert [i.name for i in parsed.images] == ["instances[0]", "instances[1]"]
    assert [i.name for i in parse_predict({"inputs": {"image": [B64]}}, OD).images] == ["inputs.image[0]"]


def test_settings_beside_the_image_win_over_the_request_parameters():
    body = {
        "instances": [{"image": {"b64": B64}, "score_threshold": 0.4, "camera": "north"}, {"b64": B64}],
        "parameters": {"score_threshold": 0.9, "action": "predict"},
    }
    first, second = parse_predict(body, OD).images
    assert (first.score_threshold, first.action, first.parameters["camera"]) == (0.4, "predict", "north")
    assert (second.score_threshold, second.action) == (0.9, "predict")


def test_columns_other_than_the_image_apply_to_every_image():
    images = parse_predict({"inputs": {"image": [B64, B64], "prompts": ["q?"], "tag": ["a", "b"]}}, ITT).images
    assert [i.prompts for i in images] == [("q?",), ("q?",)]
    assert images[1].parameters["tag"] == ["a", "b"]


def test_prompts_are_optional_for_image_text_to_text():
    assert [i.prompts for i in parse_predict({"instances": [{"b64": B64}]}, ITT).images] == [()]


def test_classify_defaults_to_every_label_and_keeps_context_apart():
    (image,) = parse_classify({"examples": [{"image": {"b64": B64}, "caption": "x"}], "context": {"tag": 1}}, IC).images
    assert image.action == "predict_proba" and image.parameters == {"action": "predict_proba", "tag": 1, "caption": "x"}
    (top,) = parse_classify({"examples": [{"b64": B64}], "context": {"action": "predict"}}, IC).images
    assert top.action == "predict"
    bad(
        lambda: parse_classify({"examples": [{"image": B64, "tag": 2}], "context": {"tag": 1}}, IC),
        "examples[0] repeats 'tag' from 'context'",
    )
    bad(lambda: parse_classify({"context": {}}, IC), "no 'examples'")


@pytest.mark.parametrize(
    "body, fragments",
    [
        ({"instances": [B64], "inputs": [B64]}, ["both 'instances' and 'inputs'"]),
        ({}, ["neither 'instances' nor 'inputs'"]),
        ({"instances": {}}, ["'instances' must be a non-empty list"]),
        ({"instances": [{"b64": "@@"}]}, ["instances[0].b64 is not valid base64"]),
        ({"instances": ["@@"]}, ["instances[0] is not valid base64"]),
        ({"instances": [{"b64": ""}]}, ["instances[0].b64 is empty"]),
        ({"instances": [{"b64": B64, "x": 1}]}, ['instances[0] must be {"b64"']),
        ({"instances": [{"b64": 7}]}, ['instances[0] must be {"b64"']),
        ({"instances": [3.5]}, ["instances[0] is not an image"]),
        ({"instances": [{"tag": "foo"}]}, ["instances[0] holds no image"]),
        ({"instances": [{"image": 3}]}, ["instances[0].image is not an image"]),
        ({"instances": [{"a": {"b64": B64}, "b": {"b64": B64}}]}, ["instances[0] holds 2 images (a, b)"]),
        ({"instances": [[[1, 2], [3, 4]]]}, ["shape [2, 2]", "height x width x 3"]),
        ({"instances": [[[[1, 2, "x"]]]]}, ["instances[0] is not an image"]),
        ({"instances": [[[[1.5, 2, 3]]]]}, ["whole numbers from 0 to 255"]),
        ({"instances": [[[[-1, 2, 3]]]]}, ["whole numbers from 0 to 255"]),
        ({"instances": [[[[float("nan"), 2, 3]]]]}, ["whole numbers from 0 to 255"]),
        ({"inputs": {"tag": ["a"]}}, ["'inputs' holds no image column"]),
        ({"inputs": {"image": [{"image": {"b64": B64}, "action": "predict"}]}}, ["inputs.image[0] must be an image"]),
        ({"instances": [B64], "parameters": []}, ["'parameters' must be a JSON object"]),
        ({"instances": [B64], "parameters": {"content_type": "str"}}, ["'content_type' is not a setting"]),
        ({"instances": [{"image": B64, "headers": {}}]}, ["instances[0]: 'headers' is not a setting"]),
        ({"instances": [B64], "signature_name": "other"}, ["signature_name 'other'", "'serving_default'"]),
        ({"instances": [B64], "id": "x"}, ["unknown key 'id'"]),
        ({"instances": [{"image": B64, "action": "explode"}]}, ["input 'instances[0]'", "unknown action 'explode'"]),
        ({"instances": [{"image": B64, "score_threshold": float("nan")}]}, ["'score_threshold'", "between 0 and 1"]),
    ],
)
def test_bad_bodies_are_rejected_naming_the_place(body, fragments):
    bad(lambda: parse_predict(body, OD), *fragments)


def test_the_input_limit_holds_for_rows_too():
    bad(lambda: parse_predict({"instances": [B64] * 3}, OD, EngineSettings(max_inputs=2)), "3 inputs", "at most 2")


def test_pixels_beyond_the_pixel_limit_are_refused_as_the_request_is_read():
    limits = EngineSettings(max_image_pixels=10)
    bad(lambda: parse_predict({"instances": [PIXELS.tolist()]}, OD, limits), "instances[0]", "5x4", "more than the 10")


def test_a_grey_png_is_still_an_rgb_image():
    ok, grey = cv2.imencode(".png", np.full((3, 3), 200, np.uint8))
    (image,) = parse_predict({"instances": [{"b64": base64.b64encode(grey.tobytes()).decode()}]}, OD).images
    assert decode_image(image.encoded, "x").shape == (3, 3, 3)


@pytest.mark.parametrize(
    "path, expected",
    [
        ("m-demo", ("m-demo", None, None, None)),
        ("m-demo/versions/3", ("m-demo", "3", None, None)),
        ("m-demo/labels/stable/metadata", ("m-demo", None, "stable", "/metadata")),
    ],
)
def test_status_paths(path, expected):
    match = STATUS_PATH.fullmatch(path)
    assert (match["name"], match["version"], match["label"], match["metadata"]) == expected


def test_verb_paths():
    match = VERB_PATH.fullmatch("m-demo/versions/1:predict")
    assert (match["name"], match["version"], match["verb"]) == ("m-demo", "1", "predict")
    assert VERB_PATH.fullmatch("m-demo/labels/canary:classify")["label"] == "canary"
    assert VERB_PATH.fullmatch("m-demo/versions/1") is None


def test_status_says_loading_until_ready():
    assert model_status("m-x", "2", True)["model_version_status"][0]["state"] == "AVAILABLE"
    loading = model_status("m-x", "2", False)
    assert loading["ready"] is False and loading["model_version_status"][0]["state"] == "LOADING"


def test_metadata_offers_classify_only_for_image_classification():
    assert set(model_metadata("m", "1", IC)["metadata"]["signature_def"]["signature_def"]) == {
        "serving_default",
        "classify",
    }
    assert set(model_metadata("m", "1", OD)["metadata"]["signature_def"]["signature_def"]) == {"serving_default"}


def answer_of(*results: bytes, explanations=None) -> Answer:
    answered = Answered(
        names=tuple(f"instances[{i}]" for i in range(len(results))),
        results=results,
        image_metadata=(None,) * len(results),
        explanations=explanations,
    )
    return Answer(answered, "id-1", "m-demo", "1", {})


def test_classify_renders_label_score_pairs():
    answer = answer_of(b'[{"label":"a","score":0.7},{"label":"b","score":0.3}]', b"[]")
    assert json.loads(render("classify", answer)) == {"results": [[["a", 0.7], ["b", 0.3]], []]}


def test_predict_and_explain_render_each_images_results_in_order():
    answer = answer_of(b'[{"label":"a","score":0.7}]', b"[]", explanations=({"saliency": [1]}, {"saliency": [2]}))
    assert json.loads(render("predict", answer)) == {"predictions": [[{"label": "a", "score": 0.7}], []]}
    assert json.loads(render("explain", answer)) == {
        "predictions": [[{"label": "a", "score": 0.7}], []],
        "explanations": [{"saliency": [1]}, {"saliency": [2]}],
    }


def test_explanations_must_be_one_json_object_per_image():
    assert validate_explanations([{"importance_scores": [0.5]}], 1) == [{"importance_scores": [0.5]}]
    expect_error(
        lambda: validate_explanations([{}], 2), InvalidResult, "one JSON object per image (2), got a list of 1"
    )
    expect_error(lambda: validate_explanations(None, 1), InvalidResult, "got NoneType")
    expect_error(lambda: validate_explanations([[0.5]], 1), InvalidResult, "a list for image 0")
    expect_error(lambda: validate_explanations([{"s": float("nan")}], 1), InvalidResult, "image 0 that is not JSON")
    expect_error(lambda: validate_explanations([{"s": object()}], 1), InvalidResult, "image 0 that is not JSON")
