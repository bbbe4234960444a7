"""Oriented Object Detection with the demo model: rotated boxes normalised by the image size, r in radians clockwise."""

import json
import math

import cv2
import pytest
import requests

from chariot_support.dev.testing import (
    as_image,
    changed_near,
    chariot_request,
    image_input,
    same_corners,
)
from chariot_support.model.demo import DEMO_MODELS
from chariot_support.model.tasks import TaskType

TASK = TaskType.ORIENTED_OBJECT_DETECTION
Model = DEMO_MODELS[TASK]


@pytest.fixture(scope="module")
def engine(demo_engine):
    return demo_engine(TASK)


def detect(engine, model_name, scene, **parameters):
    body = chariot_request(image_input("image-0", scene.pixels, **parameters))
    response = requests.post(f"{engine.url}/v2/models/{model_name}/infer/", data=json.dumps(body), timeout=30)
    assert response.status_code == 200, response.text
    return {r["label"]: r for r in response.json()["outputs"][0]["data"][0]}


def corners(result, width, height):
    """Back to pixel corners, using Chariot's convention: cx, w by width; cy, h by height; r clockwise."""
    rect = (
        (result["cx"] * width, result["cy"] * height),
        (result["w"] * width, result["h"] * height),
        math.degrees(result["r"]),
    )
    return cv2.boxPoints(rect)


def test_model_finds_each_drawn_shape(tmp_path, scene):
    model = Model()
    model.load(tmp_path)
    (results,) = model.predict([as_image(scene.pixels)], {})
    assert sorted(r.label for r in results) == ["blue", "green", "red"]


def test_rotated_box_matches_the_drawn_one(engine, model_name, scene):
    found = detect(engine, model_name, scene, action="detect")
    blue = found["blue"]
    assert set(blue) == {"label", "score", "cx", "cy", "w", "h", "r"}
    assert abs(blue["cx"] - scene.blue_centre[0] / scene.width) < 0.01
    assert abs(blue["cy"] - scene.blue_centre[1] / scene.height) < 0.01
    drawn = cv2.boxPoints((scene.blue_centre, scene.blue_size, scene.blue_degrees))
    assert same_corners(corners(blue, scene.width, scene.height), drawn, tolerance=2.5)


def test_rotation_is_clockwise_positive(engine, model_name, scene):
    # Drawn turned 30 degrees clockwise on screen: the same box read anticlockwise would miss its corners.
    blue = detect(engine, model_name, scene)["blue"]
    mirrored = dict(blue, r=-blue["r"])
    drawn = cv2.boxPoints((scene.blue_centre, scene.blue_size, scene.blue_degrees))
    assert not same_corners(corners(mirrored, scene.width, scene.height), drawn, tolerance=2.5)


def test_values_are_normalised(engine, model_name, scene):
    for result in detect(engine, model_name, scene).values():
        assert 0 <= result["cx"] <= 1 and 0 <= result["cy"] <= 1
        assert 0 < result["w"] <= 1 and 0 < result["h"] <= 1
    red = detect(engine, model_name, scene)["red"]
    xmin, ymin, xmax, ymax = scene.red_box
    assert abs(red["cx"] - (xmin + xmax - 1) / 2 / scene.width) < 0.005
    assert abs(red["cy"] - (ymin + ymax - 1) / 2 / scene.height) < 0.005


def test_client_prints_the_rotated_boxes_and_draws_them(client_on_scene, scene):
    drawn = client_on_scene()
    lines = drawn.lines
    assert lines[0] == "samples/scene.png (image-0): 3 results"
    assert lines[1].split() == ["label", "score", "cx", "cy", "w", "h", "r", "(rad)"]
    rows = {line.split()[0]: [float(v) for v in line.split()[1:]] for line in lines[2:5]}
    assert set(rows) == {"red", "green", "blue"}
    _, cx, cy, _, _, _ = rows["blue"]
    assert abs(cx - scene.blue_centre[0] / scene.width) < 0.01 and abs(cy - scene.blue_centre[1] / scene.height) < 0.01
    before, after = drawn.before, drawn.after
    # The midpoints of the blue box's long sides, as drawn in the scene: the outline must pass there.
    (bx, by), (_, height), degrees = scene.blue_centre, scene.blue_size, scene.blue_degrees
    nx, ny = -math.sin(math.radians(degrees)), math.cos(math.radians(degrees))
    for sign in (1, -1):
        assert changed_near(before, after, bx + sign * nx * height / 2, by + sign * ny * height / 2)
    assert not changed_near(before, after, bx, by, radius=5)
    assert not changed_near(before, after, 5, scene.height - 5, radius=4)
