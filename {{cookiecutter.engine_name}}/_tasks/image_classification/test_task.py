"""Your model's own test: what it should find in your pictures. When you put your model in, put your pictures in
samples/ and say in EXPECTED what it must find in each. This file is yours: template updates leave it alone
(test_model.py already holds any model to Chariot's result format)."""

from pathlib import Path

import pytest

from chariot_support.dev.model_check import picture_input, post_json
from chariot_support.dev.testing import answer, read_picture

ROOT = Path(__file__).resolve().parents[1]
# Skipped, saying why, when the model cannot load for want of its files and MODEL_DIR is not set (conftest.py).
pytestmark = pytest.mark.needs_weights

# Your pictures (paths from the engine's folder) and the label your model must give each (the top one, which is
# what action "predict" answers). The demo names the picture's most colourful colour; a cat/dog classifier might
# expect {"samples/chelsea.png": "cat"}. A classifier always gives a label, so no picture gets nothing: for a picture
# of none of your classes, expect the label your model gives such pictures (its "background" class, if it has one).
EXPECTED = {
    "samples/scene.png": "red",
    "samples/shapes.jpg": "red",
}


def served(engine, model_name, task, picture, **parameters) -> list[dict]:
    tensor = picture_input("image-0", ROOT / picture, task)
    tensor["parameters"] = parameters
    status, body = post_json(f"{engine.url}/v2/models/{model_name}/infer", {"inputs": [tensor]})
    assert status == 200, body
    return body["outputs"][0]["data"][0]


@pytest.mark.parametrize("picture, label", EXPECTED.items())
def test_model_gives_the_expected_label(model, picture, label):
    (top,) = answer(model, read_picture(ROOT / picture, action="predict"))
    assert top.label == label, f"{picture}: expected {label!r}, got {top.label!r} ({top.score:.2f})"


@pytest.mark.parametrize("picture, label", EXPECTED.items())
def test_engine_answers_the_expected_label(engine, model_name, model_class, picture, label):
    (top,) = served(engine, model_name, model_class.task_type, picture, action="predict")
    assert top["label"] == label, f"{picture}: expected {label!r}, the engine answered {top}"
