"""Results inside their image, as Chariot requires since 0.26.0: boxes, oriented boxes and contours that spill past
an edge are clipped to the image, and one wholly outside is dropped, for every task type and on every protocol."""

import json
import math
from pathlib import Path

import cv2
import grpc
import numpy as np
import pytest
import requests
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub

from chariot_support.dev.grpc_client import grpc_request, grpc_results
from chariot_support.dev.testing import chariot_request, encode_image, image_input, run_engine
from chariot_support.model.clipping import inside_image
from chariot_support.model.tasks import (
    Classification,
    Detection,
    OrientedDetection,
    PromptAnswer,
    Segmentation,
    TaskType,
)

W, H = 64, 48


def corners(box: dict) -> np.ndarray:
    rect = ((box["cx"] * W, box["cy"] * H), (box["w"] * W, box["h"] * H), math.degrees(box["r"]))
    return cv2.boxPoints(rect)


def test_a_box_past_an_edge_is_clipped_and_one_wholly_outside_is_dropped():
    boxes = [
        Detection(label="a", score=0.5, xmin=-15, ymin=-10, xmax=20, ymax=12),
        Detection(label="b", score=0.5, xmin=50, ymin=40, xmax=99, ymax=60),
        Detection(label="c", score=0.5, xmin=2, ymin=3, xmax=9, ymax=8),
        Detection(label="d", score=0.5, xmin=W, ymin=0, xmax=W + 9, ymax=9),  # touching the edge from outside
    ]
    kept = inside_image(TaskType.OBJECT_DETECTION, boxes, W, H)
    assert [(b.label, b.xmin, b.ymin, b.xmax, b.ymax) for b in kept] == [
        ("a", 0, 0, 20, 12),
        ("b", 50, 40, W, H),
        ("c", 2, 3, 9, 8),
    ]
    assert kept[2] is boxes[2], "a box inside is passed on as it is"


def test_an_oriented_box_past_the_edges_is_clipped_to_what_lies_inside():
    boxes = [
        OrientedDetection(label="corner", score=0.5, cx=0.0, cy=0.0, w=0.5, h=0.3, r=0.4),
        OrientedDetection(label="all", score=0.5, cx=0.5, cy=0.5, w=1.4, h=1.2, r=-0.3),
        OrientedDetection(label="in", score=0.5, cx=0.5, cy=0.5, w=0.1, h=0.1, r=0.0),
    ]
    kept = inside_image(TaskType.ORIENTED_OBJECT_DETECTION, boxes, W, H)
    assert [b.label for b in kept] == ["corner", "all", "in"] and kept[2] is boxes[2]
    for box in kept:
        points = corners(box.model_dump())
        assert points.min() >= 0 and (points[:, 0] <= W).all() and (points[:, 1] <= H).all(), (box, points)
        assert box.w > 0 and box.h > 0, box
    # The whole image turned a little is clipped to most of the image, not shrunk to a speck.
    assert kept[1].w * W * kept[1].h * H > 0.5 * W * H


def test_a_contour_past_the_edges_is_clipped_and_a_region_wholly_outside_is_dropped():
    around = [{"x": -5, "y": -5}, {"x": W + 5, "y": -5}, {"x": W + 5, "y": H + 5}, {"x": -5, "y": H + 5}]
    outside = [{"x": W + 1, "y": 0}, {"x": W + 9, "y": 0}, {"x": W + 9, "y": 9}]
    regions = [
        Segmentation(label="around", score=0.5, contour=[around, outside]),
        Segmentation(label="outside", score=0.5, contour=[outside]),
    ]
    kept = inside_image(TaskType.IMAGE_SEGMENTATION, regions, W, H)
    assert [r.label for r in kept] == ["around"]
    assert kept[0].contour == [[{"x": 0, "y": 0}, {"x": W, "y": 0}, {"x": W, "y": H}, {"x": 0, "y": H}]]


def test_results_without_a_place_in_the_image_pass_unchanged():
    labels = [Classification(label="cat", score=0.5)]
    answers = [PromptAnswer(prompt="what?", answer="a cat")]
    assert inside_image(TaskType.IMAGE_CLASSIFICATION, labels, W, H) == labels
    assert inside_image(TaskType.IMAGE_TEXT_TO_TEXT, answers, W, H) == answers


def within(task: str, results: list[dict]) -> bool:
    for r in results:
        if task == "Object Detection":
            if not (0 <= r["xmin"] <= r["xmax"] <= W and 0 <= r["ymin"] <= r["ymax"] <= H):
                return False
        elif task == "Oriented Object Detection":
            points = corners(r)
            if points.min() < 0 or (points[:, 0] > W).any() or (points[:, 1] > H).any():
                return False
        else:
            for contour in r["contour"]:
                if any(not (0 <= p["x"] <= W and 0 <= p["y"] <= H) for p in contour):
                    return False
    return True


KEPT = {
    "Object Detection": ["top-left", "bottom-right", "inside"],
    "Oriented Object Detection": ["corner", "everything", "inside"],
    "Image Segmentation": ["around"],
}


# The runtime clips every task type's results at one place (ChariotRuntime, after validating them), which the tests
# above check for each task type: the engine is shown applying it, on every protocol, with the oriented boxes, whose
# clipping is the most involved. The spilling engine serves the others' spills, too (`args=[task]`).
@pytest.mark.parametrize("task", ["Oriented Object Detection"])
def test_the_engine_answers_results_inside_the_image_on_every_protocol(task):
    pixels = np.zeros((H, W, 3), np.uint8)
    b64 = encode_image(pixels)
    with run_engine("spilling_engine", src=Path(__file__).parent, args=[task]) as engine:
        answers = {}
        v2 = requests.post(
            f"{engine.url}/v2/models/m-spilling/infer", json=chariot_request(image_input("image-0", pixels)), timeout=30
        )
        answers["v2"] = v2.json()["outputs"][0]["data"][0]
        root = requests.post(f"{engine.url}/infer", json={"input": b64}, timeout=30)
        answers["chariot-v2"] = root.json()["output"]
        v1 = requests.post(f"{engine.url}/v1/models/m-spilling:predict", json={"instances": [{"b64": b64}]}, timeout=30)
        answers["v1"] = v1.json()["predictions"][0]
        with grpc.insecure_channel(engine.grpc_address) as channel:
            reply = GRPCInferenceServiceStub(channel).ModelInfer(
                grpc_request(chariot_request(image_input("image-0", pixels)), "m-spilling"), timeout=30
            )
        answers["grpc"] = grpc_results(reply)["image-0"]
    for protocol, results in answers.items():
        assert [r["label"] for r in results] == KEPT[task], (protocol, results)
        assert within(task, results), (protocol, results)
    assert len({json.dumps(r, sort_keys=True) for r in answers.values()}) == 1, "every protocol answers the same"
