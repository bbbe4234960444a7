"""Object Detection with the demo model: boxes in pixels, y down, checked against the shapes drawn in the test."""

import json

import pytest
import requests

from chariot_support.dev.testing import as_image, changed_near, chariot_request, image_input
from chariot_support.model.demo import DEMO_MODELS
from chariot_support.model.tasks import TaskType

TASK = TaskType.OBJECT_DETECTION
Model = DEMO_MODELS[TASK]


@pytest.fixture(scope="module")
def engine(demo_engine):
    return demo_engine(TASK)


def by_label(results):
    return {r["label"]: r for r in results}


def detect(engine, model_name, scene, **parameters):
    body = chariot_request(image_input("image-0", scene.pixels, **parameters))
    response = requests.post(f"{engine.url}/v2/models/{model_name}/infer", data=json.dumps(body), timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["outputs"][0]["data"][0]


def test_model_finds_each_drawn_shape(tmp_path, scene):
    model = Model()
    model.load(tmp_path)
    (results,) = model.predict([as_image(scene.pixels)], {})
    assert sorted(r.label for r in results) == ["blue", "green", "red"]


def test_boxes_match_the_drawn_shapes(engine, model_name, scene):
    found = by_label(detect(engine, model_name, scene, action="detect"))
    assert set(found) == {"red", "green", "blue"}
    red = found["red"]
    assert (red["xmin"], red["ymin"], red["xmax"], red["ymax"]) == scene.red_box
    cx, cy = scene.green_centre
    r = scene.green_radius
    green = found["green"]
    assert abs(green["xmin"] - (cx - r)) <= 1 and abs(green["xmax"] - (cx + r + 1)) <= 1
    assert abs(green["ymin"] - (cy - r)) <= 1 and abs(green["ymax"] - (cy + r + 1)) <= 1
    blue = found["blue"]
    assert blue["xmin"] < scene.blue_centre[0] < blue["xmax"] and blue["ymin"] < scene.blue_centre[1] < blue["ymax"]
    for result in found.values():
        assert set(result) == {"label", "score", "xmin", "xmax", "ymin", "ymax"}
        assert 0 < result["score"] <= 1


def test_score_threshold_drops_weaker_results(engine, model_name, scene):
    everything = detect(engine, model_name, scene)
    scores = sorted(r["score"] for r in everything)
    cut = (scores[0] + scores[1]) / 2
    kept = detect(engine, model_name, scene, score_threshold=cut)
    assert len(kept) == len(everything) - 1
    assert all(r["score"] >= cut for r in kept)


def test_empty_image_has_no_detections(engine, model_name, scene):
    assert detect(engine, model_name, type(scene)(pixels=scene.pixels * 0)) == []


def test_client_prints_the_boxes_and_draws_them(client_on_scene, scene):
    drawn = client_on_scene()
    lines = drawn.lines
    assert lines[0] == "samples/scene.png (image-0): 3 results"
    assert lines[1].split() == ["label", "score", "xmin", "ymin", "xmax", "ymax"]
    rows = {line.split()[0]: line.split() for line in lines[2:5]}
    assert set(rows) == {"red", "green", "blue"}
    assert [float(v) for v in rows["red"][2:]] == list(scene.red_box)
    before, after = drawn.before, drawn.after
    xmin, ymin, xmax, ymax = scene.red_box
    assert changed_near(before, after, (xmin + xmax) / 2, ymin) and changed_near(before, after, xmax, (ymin + ymax) / 2)
    cx, cy = scene.green_centre
    assert changed_near(before, after, cx, cy + scene.green_radius + 1)
    assert not changed_near(before, after, (xmin + xmax) / 2, (ymin + ymax) / 2, radius=5)
    assert not changed_near(before, after, 5, scene.height - 5, radius=4)
