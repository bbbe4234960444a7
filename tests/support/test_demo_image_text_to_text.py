"""Image Text to Text with the demo model: one {prompt, answer} per prompt, per image, in prompt order."""

import json

import numpy as np
import pytest
import requests

from chariot_support.dev.testing import as_image, chariot_request, image_input
from chariot_support.model.demo import DEMO_MODELS
from chariot_support.model.tasks import TaskType

TASK = TaskType.IMAGE_TEXT_TO_TEXT
Model = DEMO_MODELS[TASK]


@pytest.fixture(scope="module")
def engine(demo_engine):
    return demo_engine(TASK)


PROMPTS = ["how many regions are there?", "is there anything red?", "is there anything green?"]


def ask(engine, model_name, body):
    return requests.post(f"{engine.url}/v2/models/{model_name}/infer", data=json.dumps(body), timeout=30)


def test_model_answers_each_prompt(tmp_path, scene):
    model = Model()
    model.load(tmp_path)
    (answers,) = model.predict([as_image(scene.pixels, prompts=PROMPTS)], {})
    assert [a.prompt for a in answers] == PROMPTS


def test_answers_follow_the_prompts_in_order(engine, model_name, scene):
    response = ask(engine, model_name, chariot_request(image_input("image-0", scene.pixels, prompts=PROMPTS)))
    assert response.status_code == 200, response.text
    answers = response.json()["outputs"][0]["data"][0]
    assert [a["prompt"] for a in answers] == PROMPTS
    assert all(set(a) == {"prompt", "answer"} for a in answers)
    assert "3" in answers[0]["answer"]
    assert "red" in answers[1]["answer"]


def test_request_level_prompts_apply_to_every_image(engine, model_name, scene):
    only_red = np.zeros_like(scene.pixels)
    only_red[10:60, 10:60] = (255, 0, 0)
    body = chariot_request(image_input("a", scene.pixels), image_input("b", only_red), prompts=PROMPTS[:2])
    outputs = ask(engine, model_name, body).json()["outputs"]
    assert [[a["prompt"] for a in o["data"][0]] for o in outputs] == [PROMPTS[:2], PROMPTS[:2]]
    assert outputs[0]["data"][0][0]["answer"] != outputs[1]["data"][0][0]["answer"]


def test_a_picture_without_prompts_gets_one_answer_about_itself(engine, model_name, scene):
    response = ask(engine, model_name, chariot_request(image_input("image-0", scene.pixels)))
    assert response.status_code == 200, response.text
    summary = "I found 1 red region, 1 green region and 1 blue region."
    assert response.json()["outputs"][0]["data"] == [[{"prompt": "", "answer": summary}]]


def test_client_prints_the_answers_and_writes_them_below_the_image(client_on_scene, scene):
    drawn = client_on_scene("--prompt", "is there anything red?", "--prompt", "what is here?")
    lines = drawn.lines
    assert lines[0] == "samples/scene.png (image-0): 2 results"
    assert lines[1].split() == ["prompt", "answer"]
    assert lines[2].startswith("is there anything red?") and lines[2].endswith("yes, 1 red region.")
    assert lines[3].startswith("what is here?") and "1 green region" in lines[3]
    before, after = drawn.before, drawn.after
    assert np.array_equal(before, after[: scene.height]), "the answers hide nothing of the picture"
    band = after[scene.height :]
    assert (band != band[0, 0]).any(axis=2).sum() > 100  # the answers, in a band below it
