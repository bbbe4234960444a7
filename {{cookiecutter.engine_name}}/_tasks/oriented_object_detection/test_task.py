"""Your model's own test: what it should find in your pictures. When you put your model in, put your pictures in
samples/ and say in EXPECTED what it must find in each. This file is yours: template updates leave it alone
(test_model.py already holds any model to Chariot's result format)."""

from pathlib import Path

import pytest

from chariot_support.dev.model_check import picture_input, post_json
from chariot_support.dev.testing import answer, read_picture

ROOT = Path(__file__).resolve().parents[1]

# Your pictures (paths from the engine's folder) and the labels your model must find in each. The demo finds the
# coloured shapes of the samples; a text detector might expect {"samples/receipt.jpg": {"text"}}.
EXPECTED = {
    "samples/scene.png": {"red", "green", "blue"},
    "samples/shapes.jpg": {"red", "green", "blue"},
}


def served(engine, model_name, task, picture, **parameters) -> list[dict]:
    tensor = picture_input("image-0", ROOT / picture, task)
    tensor["parameters"] = parameters
    status, body = post_json(f"{engine.url}/v2/models/{model_name}/infer", {"inputs": [tensor]})
    assert status == 200, body
    return body["outputs"][0]["data"][0]


@pytest.mark.parametrize("picture, labels", EXPECTED.items())
def test_model_finds_the_expected_labels(model, picture, labels):
    found = {r.label for r in answer(model, read_picture(ROOT / picture))}
    assert labels <= found, f"{picture}: expected {sorted(labels)}, found {sorted(found)}"


@pytest.mark.parametrize("picture, labels", EXPECTED.items())
def test_engine_answers_the_expected_labels(engine, model_name, model_class, picture, labels):
    found = {r["label"] for r in served(engine, model_name, model_class.task_type, picture)}
    assert labels <= found, f"{picture}: expected {sorted(labels)}, the engine found {sorted(found)}"
