"""Image Classification with the demo model: `predict` gives the top label, `predict_proba` every label with its score."""

import json

import numpy as np
import pytest
import requests

from chariot_support.dev.testing import as_image, chariot_request, image_input
from chariot_support.model.demo import DEMO_MODELS
from chariot_support.model.tasks import TaskType

TASK = TaskType.IMAGE_CLASSIFICATION
Model = DEMO_MODELS[TASK]


@pytest.fixture(scope="module")
def engine(demo_engine):
    return demo_engine(TASK)


def classify(engine, model_name, pixels, **parameters):
    body = chariot_request(image_input("image-0", pixels, **parameters))
    response = requests.post(f"{engine.url}/v2/models/{model_name}/infer", data=json.dumps(body), timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["outputs"][0]["data"][0]


def mostly(colour):
    pixels = np.zeros((120, 160, 3), np.uint8)
    pixels[10:110, 10:100] = colour
    pixels[50:60, 120:130] = (0, 0, 255)
    return pixels


def test_model_scores_every_label(tmp_path, scene):
    model = Model()
    model.load(tmp_path)
    (results,) = model.predict([as_image(scene.pixels)], {})
    assert sorted(r.label for r in results) == ["blue", "green", "red"]
    assert abs(sum(r.score for r in results) - 1) < 1e-6


def test_predict_gives_the_dominant_colour(engine, model_name):
    assert [r["label"] for r in classify(engine, model_name, mostly((255, 0, 0)), action="predict")] == ["red"]
    assert [r["label"] for r in classify(engine, model_name, mostly((0, 255, 0)))] == ["green"]


def test_predict_proba_gives_every_label_best_first(engine, model_name):
    results = classify(engine, model_name, mostly((0, 255, 0)), action="predict_proba")
    assert [r["label"] for r in results][0] == "green"
    assert sorted(r["label"] for r in results) == ["blue", "green", "red"]
    assert all(set(r) == {"label", "score"} for r in results)
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    assert abs(sum(r["score"] for r in results) - 1) < 1e-6


def test_score_threshold_applies_to_probabilities(engine, model_name):
    results = classify(engine, model_name, mostly((255, 0, 0)), action="predict_proba", score_threshold=0.5)
    assert [r["label"] for r in results] == ["red"]


def test_detect_is_not_a_classification_action(engine, model_name):
    body = chariot_request(image_input("image-0", mostly((255, 0, 0)), action="detect"))
    response = requests.post(f"{engine.url}/v2/models/{model_name}/infer", data=json.dumps(body), timeout=30)
    assert response.status_code == 400
    assert "'predict', 'predict_proba'" in response.json()["error"]


def test_client_prints_the_labels_and_writes_them_below_the_image(client_on_scene, scene):
    drawn = client_on_scene("--action", "predict_proba")
    lines = drawn.lines
    assert lines[0] == "samples/scene.png (image-0): 3 results"
    assert lines[1].split() == ["label", "score"]
    rows = [line.split() for line in lines[2:5]]
    assert [r[0] for r in rows][0] == "red" and {r[0] for r in rows} == {"red", "green", "blue"}
    assert abs(sum(float(r[1]) for r in rows) - 1) < 0.01
    before, after = drawn.before, drawn.after
    assert np.array_equal(before, after[: scene.height]), "the labels hide nothing of the picture"
    band = after[scene.height :]
    assert (band != band[0, 0]).any(axis=2).sum() > 100  # the labels, in a band below it
