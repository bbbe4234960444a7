"""The helpers a model builds its results with always give values Chariot can use: one canonical rotated box for
all of OpenCV's ways of describing it, no error for an empty mask, and BGR pixels for frameworks that want them."""

import math

import cv2
import numpy as np
import pytest
from fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from chariot_support.dev.testing import as_image, same_corners
from chariot_support.model.tasks import OrientedDetection, Segmentation, TaskType, select, validate_results


def corners(box: OrientedDetection, width: int, height: int) -> np.ndarray:
    rect = ((box.cx * width, box.cy * height), (box.w * width, box.h * height), math.degrees(box.r))
    return cv2.boxPoints(rect)


@pytest.mark.parametrize(
    "rect",
    [
        ((200, 100), (400, 40), 0.0),
        ((200, 100), (40, 400), 90.0),
        ((200, 100), (40, 400), -90.0),
        ((200, 100), (400, 40), 180.0),
    ],
)
def test_a_flat_line_of_text_is_wide_and_level_however_opencv_describes_it(rect):
    box = OrientedDetection.from_rotated_rect("text", 0.9, rect, 640, 480)
    assert (box.w, box.h, box.r) == pytest.approx((400 / 640, 40 / 480, 0.0))


def test_a_tall_page_keeps_its_sides_within_the_picture():
    # A 150x190 page in a 204x320 picture, that OpenCV may report as 190x150 turned -90 degrees.
    box = OrientedDetection.from_rotated_rect("page", 0.9, ((100, 160), (190, 150), -90.0), 204, 320)
    assert (box.w, box.h, box.r) == pytest.approx((150 / 204, 190 / 320, 0.0))
    assert 0 <= box.w <= 1 and 0 <= box.h <= 1


@settings(max_examples=examples(300))
@given(
    cx=st.floats(150, 250),
    cy=st.floats(100, 200),
    w=st.floats(1, 100),
    h=st.floats(1, 100),
    degrees=st.floats(-360, 360),
)
def test_every_description_of_a_box_becomes_the_same_corners_with_a_small_angle(cx, cy, w, h, degrees):
    width, height = 400, 300
    box = OrientedDetection.from_rotated_rect("x", 0.5, ((cx, cy), (w, h), degrees), width, height)
    assert abs(box.r) <= math.pi / 4 + 1e-9
    assert 0 <= box.w <= 1 and 0 <= box.h <= 1, "a box inside the picture has sides within 0..1"
    assert same_corners(corners(box, width, height), cv2.boxPoints(((cx, cy), (w, h), degrees)), tolerance=1e-3)


def test_an_empty_mask_gives_a_region_the_engine_leaves_out():
    empty = Segmentation.from_mask("nothing", 0.4, np.zeros((20, 30), np.uint8))
    mask = np.zeros((20, 30), np.uint8)
    mask[5:10, 5:15] = 1
    found = Segmentation.from_mask("something", 0.6, mask)
    (checked,) = validate_results(TaskType.IMAGE_SEGMENTATION, [[empty, found]], ["image"])
    kept = select(TaskType.IMAGE_SEGMENTATION, checked, action="predict", score_threshold=None, prompts=())
    assert [r.label for r in kept] == ["something"]


def test_bgr_is_the_pixels_in_opencvs_order_contiguous():
    pixels = np.zeros((4, 6, 3), np.uint8)
    pixels[..., 0] = 200  # red
    image = as_image(pixels)
    assert image.bgr.flags["C_CONTIGUOUS"] and image.bgr.shape == (4, 6, 3)
    assert (image.bgr[..., 2] == 200).all() and (image.bgr[..., 0] == 0).all()
    assert image.bgr is image.bgr, "made once per image"
    assert cv2.cvtColor(image.bgr, cv2.COLOR_BGR2RGB).tolist() == pixels.tolist()
    assert (image.width, image.height) == (6, 4)
