"""Your model's own test: what it should find in your pictures. When you put your model in, put your pictures in
samples/ and say in EXPECTED what it must find in each. This file is yours: template updates leave it alone
(test_model.py already holds any model to Chariot's result format)."""

from pathlib import Path

import pytest

from chariot_support.dev.model_check import picture_input, post_json
from chariot_support.dev.testing import answer, check_found, read_picture

ROOT = Path(__file__).resolve().parents[1]
# Skipped, saying why, when the model cannot load for want of its files and MODEL_DIR is not set (conftest.py).
pytestmark = pytest.mark.needs_weights

# Your pictures (paths from the engine's folder) and the labels your model must find in each; set() for a picture in
# which it must find nothing at all. The demo finds the coloured shapes of the samples; a face detector might expect
# {"samples/team.jpg": {"face"}, "samples/empty-room.jpg": set()}.
# Results scoring under SCORE_THRESHOLD do not count, as Chariot's score_threshold drops them (None: all count). A
# model that returns every candidate with its score, however low, needs one for set() to hold.
EXPECTED = {
    "samples/scene.png": {"red", "green", "blue"},
    "samples/shapes.jpg": {"red", "green", "blue"},
}
SCORE_THRESHOLD = None


def served(engine, model_name, task, picture, **parameters) -> list[dict]:
    tensor = picture_input("image-0", ROOT / picture, task)
    tensor["parameters"] = {key: value for key, value in parameters.items() if value is not None}
    status, body = post_json(f"{engine.url}/v2/models/{model_name}/infer", {"inputs": [tensor]})
    assert status == 200, body
    return body["outputs"][0]["data"][0]


@pytest.mark.parametrize("picture, labels", EXPECTED.items())
def test_model_finds_the_expected_labels(model, picture, labels):
    check_found(picture, labels, answer(model, read_picture(ROOT / picture, score_threshold=SCORE_THRESHOLD)))


@pytest.mark.parametrize("picture, labels", EXPECTED.items())
def test_engine_answers_the_expected_labels(engine, model_name, model_class, picture, labels):
    answered = served(engine, model_name, model_class.task_type, picture, score_threshold=SCORE_THRESHOLD)
    check_found(picture, labels, answered, where="the engine answered")
