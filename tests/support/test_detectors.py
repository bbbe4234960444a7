"""The detector helpers against values worked out by hand and against OpenCV's own non-maximum suppression:
letterbox and its inverse, boxes from centre and size, an oriented box's corners, class-aware NMS, softmax and
sigmoid."""

import math
import warnings

import cv2
import numpy as np
import pytest

from chariot_support.model.detectors import (
    PAD_GREY,
    Letterbox,
    corners,
    iou,
    letterbox,
    nms,
    oriented_corners,
    sigmoid,
    softmax,
)
from chariot_support.model.tasks import OrientedDetection

RED = (255, 0, 0)


def picture(width: int, height: int, box: tuple[int, int, int, int]) -> np.ndarray:
    pixels = np.zeros((height, width, 3), np.uint8)
    x0, y0, x1, y1 = box
    pixels[y0:y1, x0:x1] = RED
    return pixels


def test_a_wide_picture_is_scaled_to_the_width_and_padded_above_and_below():
    # 320 x 240 into 640 x 640: scale 2, 640 x 480 of picture, 80 rows of grey above and below.
    canvas, fit = letterbox(picture(320, 240, (20, 30, 100, 90)), 640, 640)
    assert canvas.shape == (640, 640, 3) and canvas.dtype == np.uint8
    assert fit == Letterbox(scale=2.0, left=0, top=80, width=320, height=240)
    assert (canvas[:80] == PAD_GREY).all() and (canvas[560:] == PAD_GREY).all()
    # The red box (20, 30)-(100, 90) lands at (40, 140)-(200, 260), its inside exactly red.
    assert (canvas[142:258, 42:198] == RED).all()
    assert (canvas[100:138, 0:640] == 0).all() and (canvas[262:560, 202:640] == 0).all()


def test_a_tall_picture_is_padded_left_and_right_and_a_small_one_may_stay_small():
    canvas, fit = letterbox(np.zeros((100, 50, 3), np.uint8), 64, 64)
    assert fit == Letterbox(scale=0.64, left=16, top=0, width=50, height=100)
    assert (canvas[:, :16] == PAD_GREY).all() and (canvas[:, 48:] == PAD_GREY).all() and (canvas[:, 16:48] == 0).all()
    canvas, fit = letterbox(np.zeros((10, 20, 3), np.uint8), 64, 64, scale_up=False, fill=0)
    assert fit == Letterbox(scale=1.0, left=22, top=27, width=20, height=10)
    grey = letterbox(np.zeros((8, 8), np.uint8), 16, 32)[0]
    assert grey.shape == (32, 16), "a single-channel picture stays single-channel"
    with pytest.raises(ValueError, match="positive input size"):
        letterbox(np.zeros((8, 8, 3), np.uint8), 0, 32)


def test_boxes_go_back_to_the_picture_and_are_clipped_to_it():
    fit = Letterbox(scale=2.0, left=0, top=80, width=320, height=240)
    boxes = fit.to_picture(np.array([[40, 140, 200, 260], [-10, 60, 700, 600]]))
    assert boxes.tolist() == [[20, 30, 100, 90], [0, 0, 320, 240]]
    fit = Letterbox(scale=0.64, left=16, top=0, width=50, height=100)
    assert fit.to_picture([16 + 6.4, 12.8, 16 + 32, 64]) == pytest.approx(np.array([[10, 20, 50, 100]]))


def test_corners_from_centre_and_size():
    assert corners([[100, 50, 20, 10], [0, 0, 4, 2]]).tolist() == [[90, 45, 110, 55], [-2, -1, 2, 1]]


def test_an_oriented_boxs_corners_in_pixels_from_the_result_or_its_json():
    # On a 200 x 100 image: centre (100, 25), 40 x 10 pixels, a quarter turn: 10 wide and 40 high.
    box = OrientedDetection(label="a", score=0.5, cx=0.5, cy=0.25, w=0.2, h=0.1, r=math.pi / 2)
    found = oriented_corners(box, 200, 100)
    assert sorted(map(tuple, np.round(found).tolist())) == [(95, 5), (95, 45), (105, 5), (105, 45)]
    assert np.array_equal(oriented_corners(box.model_dump(), 200, 100), found)
    # Clockwise on screen (y down): a small positive r moves the right end of a flat box down.
    tilted = oriented_corners({"cx": 0.5, "cy": 0.5, "w": 0.5, "h": 0.0, "r": 0.1}, 200, 100)
    right = tilted[np.argmax(tilted[:, 0])]
    assert right[1] > 50


def test_iou_by_hand():
    # Two 10 x 10 squares overlapping in a 5 x 10 strip: 50 / (100 + 100 - 50).
    assert iou(np.array([0, 0, 10, 10.0]), np.array([[5, 0, 15, 10.0], [20, 20, 30, 30], [0, 0, 10, 10]])).tolist() == [
        pytest.approx(1 / 3),
        0.0,
        1.0,
    ]
    assert iou(np.array([0, 0, 0, 0.0]), np.array([[0, 0, 0, 0.0]])).tolist() == [0.0], "empty boxes do not divide by 0"


def test_nms_keeps_the_best_of_each_overlapping_group_of_a_class():
    boxes = np.array(
        [
            [0, 0, 10, 10],  # 0.9, class 0
            [1, 0, 11, 10],  # 0.8, class 0: IoU 0.82 with box 0, dropped
            [5, 0, 15, 10],  # 0.7, class 0: IoU 1/3 with box 0, kept
            [0, 0, 10, 10],  # 0.6, class 1: the same place as box 0, another class, kept
            [50, 50, 60, 60],  # 0.95, class 1
        ],
        dtype=np.float64,
    )
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.95])
    classes = np.array([0, 0, 0, 1, 1])
    assert nms(boxes, scores, classes, iou_threshold=0.5).tolist() == [4, 0, 2, 3]
    assert nms(boxes, scores, iou_threshold=0.5).tolist() == [4, 0, 2], "without classes, box 3 is box 0's duplicate"
    assert nms(boxes, scores, classes, iou_threshold=0.3).tolist() == [4, 0, 3], "1/3 is over 0.3"
    assert nms(boxes, scores, classes, iou_threshold=0.5, max_results=2).tolist() == [4, 0]
    assert nms(np.zeros((0, 4)), np.zeros(0)).tolist() == []
    with pytest.raises(ValueError, match="as many scores"):
        nms(boxes, scores[:2])


@pytest.mark.parametrize("seed", range(5))
def test_nms_agrees_with_opencv(seed):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 200, (300, 2))
    size = rng.uniform(10, 60, (300, 2))
    boxes = np.concatenate([xy, xy + size], axis=1)
    scores = rng.uniform(0, 1, 300)
    classes = rng.integers(0, 3, 300)
    rects = np.concatenate([xy, size], axis=1).tolist()  # OpenCV takes x, y, width, height
    agnostic = cv2.dnn.NMSBoxes(rects, scores.tolist(), 0.0, 0.45)
    assert nms(boxes, scores, iou_threshold=0.45).tolist() == np.asarray(agnostic).reshape(-1).tolist()
    batched = cv2.dnn.NMSBoxesBatched(rects, scores.tolist(), classes.tolist(), 0.0, 0.45)
    assert nms(boxes, scores, classes, iou_threshold=0.45).tolist() == np.asarray(batched).reshape(-1).tolist()


def test_sigmoid_and_softmax_by_hand_and_without_overflow():
    assert sigmoid([0.0, math.log(3), -math.log(3)]) == pytest.approx([0.5, 0.75, 0.25])
    assert softmax([0.0, math.log(2), math.log(3)]) == pytest.approx([1 / 6, 2 / 6, 3 / 6])
    assert softmax([[1.0, 1.0], [0.0, math.log(3)]], axis=1) == pytest.approx(np.array([[0.5, 0.5], [0.25, 0.75]]))
    assert softmax([[0.0, 0.0], [math.log(3), 0.0]], axis=0) == pytest.approx(np.array([[0.25, 0.5], [0.75, 0.5]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow in exp would warn
        assert sigmoid([-1000.0, 1000.0]).tolist() == [0.0, 1.0]
        assert softmax([1000.0, 1000.0]).tolist() == [0.5, 0.5]
