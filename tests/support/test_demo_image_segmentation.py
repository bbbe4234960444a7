"""Image Segmentation with the demo model: OpenCV contours in pixels, checked against the shapes drawn in the test."""

import json
import math

import cv2
import numpy as np
import pytest
import requests

from chariot_support.dev.testing import as_image, changed_near, chariot_request, image_input
from chariot_support.model.demo import DEMO_MODELS
from chariot_support.model.tasks import TaskType

TASK = TaskType.IMAGE_SEGMENTATION
Model = DEMO_MODELS[TASK]


@pytest.fixture(scope="module")
def engine(demo_engine):
    return demo_engine(TASK)


def segment(engine, model_name, scene, **parameters):
    body = chariot_request(image_input("image-0", scene.pixels, **parameters))
    response = requests.post(f"{engine.url}/v2/models/{model_name}/infer", data=json.dumps(body), timeout=30)
    assert response.status_code == 200, response.text
    return {r["label"]: r for r in response.json()["outputs"][0]["data"][0]}


def polygon(points):
    return np.array([[p["x"], p["y"]] for p in points], np.float32)


def test_model_finds_each_drawn_shape(tmp_path, scene):
    model = Model()
    model.load(tmp_path)
    (results,) = model.predict([as_image(scene.pixels)], {})
    assert sorted(r.label for r in results) == ["blue", "green", "red"]


def test_contours_outline_the_drawn_shapes(engine, model_name, scene):
    found = segment(engine, model_name, scene)
    assert set(found) == {"red", "green", "blue"}
    for result in found.values():
        assert set(result) == {"label", "score", "contour"}
        assert all(set(point) == {"x", "y"} for part in result["contour"] for point in part)
    (red,) = found["red"]["contour"]
    xmin, ymin, xmax, ymax = scene.red_box
    x, y, w, h = cv2.boundingRect(polygon(red))
    assert (x, y, x + w, y + h) == (xmin, ymin, xmax, ymax)
    assert cv2.contourArea(polygon(red)) == (xmax - xmin - 1) * (ymax - ymin - 1)
    (green,) = found["green"]["contour"]
    assert (
        abs(cv2.contourArea(polygon(green)) - math.pi * scene.green_radius**2) < 0.08 * math.pi * scene.green_radius**2
    )
    (blue,) = found["blue"]["contour"]
    assert cv2.pointPolygonTest(polygon(blue), scene.blue_centre, False) > 0


def test_score_threshold_applies(engine, model_name, scene):
    scores = sorted(r["score"] for r in segment(engine, model_name, scene).values())
    assert len(segment(engine, model_name, scene, score_threshold=scores[-1])) == 1


def test_client_prints_the_contours_and_draws_them(client_on_scene, scene):
    drawn = client_on_scene()
    lines = drawn.lines
    assert lines[0] == "samples/scene.png (image-0): 3 results"
    assert lines[1].split()[:4] == ["label", "score", "contours", "points"]
    rows = {line.split()[0]: line for line in lines[2:5]}
    assert set(rows) == {"red", "green", "blue"}
    xmin, ymin, xmax, ymax = scene.red_box
    assert rows["red"].endswith(f"{xmin}, {ymin}, {xmax - 1}, {ymax - 1}")
    before, after = drawn.before, drawn.after
    assert changed_near(before, after, (xmin + xmax) / 2, ymax - 1)  # the outline
    centre = ((ymin + ymax) // 2, (xmin + xmax) // 2)
    assert not np.array_equal(before[centre], after[centre])  # the tint
    assert not changed_near(before, after, 5, scene.height - 5, radius=4)
