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

# Your pictures (paths from the engine's folder), prompts, and words each answer must contain (case aside). The demo
# counts coloured shapes; a captioner might expect {"samples/beach.jpg": {"Describe the picture.": "beach"}}.
EXPECTED = {
    "samples/scene.png": {"how many regions are there?": "3 regions", "is there anything red?": "yes"},
    "samples/shapes.jpg": {"is there anything green?": "green"},
}


def served(engine, model_name, task, picture, **parameters) -> list[dict]:
    tensor = picture_input("image-0", ROOT / picture, task)
    tensor["parameters"] = parameters
    status, body = post_json(f"{engine.url}/v2/models/{model_name}/infer", {"inputs": [tensor]})
    assert status == 200, body
    return body["outputs"][0]["data"][0]


@pytest.mark.parametrize("picture, asked", EXPECTED.items())
def test_model_answers_the_prompts(model, picture, asked):
    answers = answer(model, read_picture(ROOT / picture, prompts=list(asked)))
    for result, (prompt, words) in zip(answers, asked.items(), strict=True):
        assert words.lower() in result.answer.lower(), f"{picture}, {prompt!r}: expected {words!r} in {result.answer!r}"


@pytest.mark.parametrize("picture, asked", EXPECTED.items())
def test_engine_answers_the_prompts(engine, model_name, model_class, picture, asked):
    answers = served(engine, model_name, model_class.task_type, picture, prompts=list(asked))
    assert [r["prompt"] for r in answers] == list(asked)
    for result, (prompt, words) in zip(answers, asked.items(), strict=True):
        assert words.lower() in result["answer"].lower(), f"{picture}, {prompt!r}: expected {words!r} in {result}"
