"""Tests for the demo colour-region "model" shipped in every baked engine."""

import json
import math

import cv2
import numpy as np
import pytest

from chariot_support.model.demo import LABELS, ColourFinder, ColourRegion

RED, GREEN, BLUE = (255, 0, 0), (0, 255, 0), (0, 0, 255)
H, W = 480, 640

RED_RECT = ((40, 50), (139, 119))  # inclusive corners: 100 x 70 px
GREEN_CIRCLE = ((300, 100), 50)
BLUE_BOX = ((450.0, 300.0), (160.0, 80.0), 30.0)


def blank() -> np.ndarray:
    return np.zeros((H, W, 3), np.uint8)


def square(img: np.ndarray, x: int, y: int, size: int, colour) -> np.ndarray:
    cv2.rectangle(img, (x, y), (x + size - 1, y + size - 1), colour, -1)
    return img


def scene() -> np.ndarray:
    img = blank()
    cv2.rectangle(img, *RED_RECT, RED, -1)
    cv2.circle(img, *GREEN_CIRCLE, GREEN, -1)
    corners = np.round(cv2.boxPoints(BLUE_BOX)).astype(np.int32)
    cv2.fillPoly(img, [corners], BLUE)
    return img


def by_label(regions: list[ColourRegion]) -> dict[str, ColourRegion]:
    return {r.label: r for r in regions}


def canonical_box(rotated_box):
    """(centre, long side, short side, angle of long side mod 180) — minAreaRect may swap w/h."""
    centre, (w, h), angle = rotated_box
    if w < h:
        w, h, angle = h, w, angle + 90.0
    return centre, w, h, angle % 180.0


def angle_diff(a: float, b: float) -> float:
    d = abs(a - b) % 180.0
    return min(d, 180.0 - d)


def test_scene_finds_one_region_per_shape():
    regions = ColourFinder().find(scene())
    assert sorted(r.label for r in regions) == sorted(LABELS)
    for r in regions:
        assert 0.0 < r.score <= 1.0
        assert r.contour.dtype == np.int32
        assert r.contour.ndim == 3 and r.contour.shape[1:] == (1, 2)


def test_red_rectangle_bbox_and_area_are_exact():
    red = by_label(ColourFinder().find(scene()))["red"]
    assert red.bbox == (40, 50, 140, 120)
    assert red.area == 100 * 70


def test_green_circle_area_close_to_pi_r_squared():
    green = by_label(ColourFinder().find(scene()))["green"]
    expected = math.pi * GREEN_CIRCLE[1] ** 2
    assert cv2.contourArea(green.contour) == pytest.approx(expected, rel=0.03)
    assert green.area == pytest.approx(expected, rel=0.03)
    (cx, cy), r = GREEN_CIRCLE
    assert green.bbox == pytest.approx((cx - r, cy - r, cx + r + 1, cy + r + 1), abs=1)


def test_blue_rotated_box_matches_drawn_box():
    blue = by_label(ColourFinder().find(scene()))["blue"]
    (cx, cy), long_side, short_side, angle = canonical_box(blue.rotated_box)
    (ex, ey), (ew, eh), eangle = BLUE_BOX
    assert cx == pytest.approx(ex, abs=1.0)
    assert cy == pytest.approx(ey, abs=1.0)
    assert long_side == pytest.approx(ew, abs=1.5)
    assert short_side == pytest.approx(eh, abs=1.5)
    assert angle_diff(angle, eangle) <= 1.0
    assert blue.area == pytest.approx(ew * eh, rel=0.03)


def test_find_is_sorted_by_score_descending():
    regions = ColourFinder().find(scene())
    scores = [r.score for r in regions]
    assert scores == sorted(scores, reverse=True)


def test_score_grows_with_size():
    img = square(blank(), 20, 20, 30, RED)
    square(img, 200, 200, 80, RED)
    small, big = sorted(ColourFinder().find(img), key=lambda r: r.area)
    assert big.score > small.score


def test_score_grows_with_saturation():
    pale_red = (255, 110, 110)  # HSV S = 145: still above the default threshold of 100
    img = square(blank(), 20, 20, 60, RED)
    square(img, 300, 300, 60, pale_red)
    regions = ColourFinder().find(img)
    assert [r.label for r in regions] == ["red", "red"]
    vivid, pale = regions
    assert vivid.area == pale.area == 3600
    assert vivid.bbox[0] == 20 and pale.bbox[0] == 300
    assert vivid.score > pale.score


def test_desaturated_colour_below_threshold_is_ignored():
    img = square(blank(), 20, 20, 60, (255, 200, 200))  # S = 55
    assert ColourFinder().find(img) == []


@pytest.mark.parametrize("value", [0, 128, 255])
def test_grey_and_black_images_have_no_regions(value):
    img = np.full((H, W, 3), value, np.uint8)
    finder = ColourFinder()
    assert finder.find(img) == []
    scores = finder.class_scores(img)
    assert list(scores) == list(LABELS)
    assert all(s == pytest.approx(1 / 3) for s in scores.values())


def test_dark_colour_below_min_value_is_ignored():
    img = square(blank(), 20, 20, 60, (60, 0, 0))
    assert ColourFinder().find(img) == []


def test_class_scores_rank_dominant_colour_first():
    img = square(blank(), 10, 10, 200, RED)
    square(img, 400, 300, 20, BLUE)
    scores = ColourFinder().class_scores(img)
    assert list(scores) == list(LABELS)
    assert sum(scores.values()) == pytest.approx(1.0)
    assert scores["red"] > scores["blue"] > scores["green"] == 0.0
    assert scores["red"] == pytest.approx(200 * 200 / (200 * 200 + 20 * 20))


def test_class_scores_sum_to_one_for_scene():
    scores = ColourFinder().class_scores(scene())
    assert sum(scores.values()) == pytest.approx(1.0)
    assert all(s > 0 for s in scores.values())


def test_specks_below_min_area_are_ignored():
    img = blank()
    img[5, 5] = RED  # single pixel: removed by the morphological open
    square(img, 100, 100, 5, RED)  # 25 px
    square(img, 200, 100, 7, RED)  # 49 px, just under the default of 50
    square(img, 300, 100, 8, GREEN)  # 64 px, kept
    regions = ColourFinder().find(img)
    assert [(r.label, r.area) for r in regions] == [("green", 64)]
    assert len(ColourFinder(min_area=20).find(img)) == 3
    assert len(ColourFinder(min_area=1).find(img)) == 3  # the lone pixel never survives


def test_area_counts_mask_pixels_not_enclosed_area():
    img = square(blank(), 100, 100, 40, RED)
    square(img, 104, 104, 32, (0, 0, 0))  # hollow it out: a 4 px thick ring
    # L shape: 9 x 9 bounding box (81 px) but only 45 pixels, so below min_area.
    cv2.rectangle(img, (300, 300), (302, 308), GREEN, -1)
    cv2.rectangle(img, (300, 306), (308, 308), GREEN, -1)
    regions = ColourFinder().find(img)
    assert [(r.label, r.area) for r in regions] == [("red", 40 * 40 - 32 * 32)]
    assert cv2.contourArea(regions[0].contour) > 1500
    assert [(r.label, r.area) for r in ColourFinder(min_area=40).find(img)][1] == ("green", 45)


def test_two_separate_squares_give_two_regions():
    img = square(blank(), 20, 20, 40, RED)
    square(img, 300, 200, 40, RED)
    regions = ColourFinder().find(img)
    assert [r.label for r in regions] == ["red", "red"]
    assert sorted(r.bbox for r in regions) == [(20, 20, 60, 60), (300, 200, 340, 240)]


def two_red_one_blue() -> np.ndarray:
    img = square(blank(), 20, 20, 40, RED)
    square(img, 300, 200, 40, RED)
    return square(img, 100, 300, 50, BLUE)


def test_describe_summarises_counts_and_colours():
    answer = ColourFinder().describe(two_red_one_blue(), "What is in this image?")
    assert "2 red regions" in answer
    assert "1 blue region" in answer and "1 blue regions" not in answer
    assert "green" not in answer


def test_describe_answers_about_named_colour():
    finder = ColourFinder()
    img = two_red_one_blue()
    assert "yes, 2 red regions" in finder.describe(img, "Are there any red shapes?")
    assert "no green regions" in finder.describe(img, "Is anything GREEN here?")


def test_describe_how_many_gives_total():
    answer = ColourFinder().describe(two_red_one_blue(), "How many shapes are there?")
    assert answer.startswith("3 regions in total")
    assert "2 red regions" in answer and "1 blue region" in answer


def test_describe_empty_image_and_determinism():
    finder = ColourFinder()
    assert "no red, green or blue regions" in finder.describe(blank(), "describe")
    img = scene()
    first = finder.describe(img, "describe")
    assert first == finder.describe(img.copy(), "describe")
    for count in ("1 red region", "1 green region", "1 blue region"):
        assert count in first


def test_from_dir_defaults_when_dir_or_file_missing(tmp_path):
    assert ColourFinder.from_dir(tmp_path / "does-not-exist") == ColourFinder()
    assert ColourFinder.from_dir(tmp_path) == ColourFinder()


def test_from_dir_applies_overrides(tmp_path):
    (tmp_path / "colours.json").write_text(json.dumps({"min_area": 10, "min_value": 40}))
    finder = ColourFinder.from_dir(tmp_path)
    assert finder == ColourFinder(min_area=10, min_saturation=100, min_value=40)
    img = square(blank(), 20, 20, 5, (60, 0, 0))  # small and dark: found only with overrides
    assert [r.label for r in finder.find(img)] == ["red"]
    assert ColourFinder().find(img) == []


def test_from_dir_rejects_unknown_key(tmp_path):
    (tmp_path / "colours.json").write_text(json.dumps({"min_area": 10, "min_hue": 3}))
    with pytest.raises(ValueError, match="min_hue") as excinfo:
        ColourFinder.from_dir(tmp_path)
    assert "min_saturation" in str(excinfo.value)


@pytest.mark.parametrize("content", ['{"min_area": "big"}', '{"min_value": 1.5}', '{"min_area": true}', "[1, 2]"])
def test_from_dir_rejects_bad_values(tmp_path, content):
    (tmp_path / "colours.json").write_text(content)
    with pytest.raises(ValueError):
        ColourFinder.from_dir(tmp_path)


def test_find_is_deterministic_on_vga_image():
    rng = np.random.default_rng(0)
    img = scene()
    noise = rng.integers(0, 60, size=img.shape, dtype=np.uint8)  # dark noise, below min_value
    img = cv2.add(img, noise)
    finder = ColourFinder()
    first, second = finder.find(img), finder.find(img.copy())
    assert len(first) == len(second) == 3
    for a, b in zip(first, second, strict=True):
        assert (a.label, a.score, a.area, a.bbox, a.rotated_box) == (b.label, b.score, b.area, b.bbox, b.rotated_box)
        assert np.array_equal(a.contour, b.contour)


def test_rejects_non_rgb_input():
    with pytest.raises(ValueError):
        ColourFinder().find(np.zeros((10, 10), np.uint8))


# --- explain by occlusion ---------------------------------------------------------------------------------


def test_occlusion_of_a_whole_region_takes_its_whole_score():
    from chariot_support.model.tasks import Detection, OrientedDetection, Segmentation

    finder, img = ColourFinder(), scene()
    regions = finder.find(img)
    results = [
        Detection(label=r.label, score=r.score, xmin=r.bbox[0], ymin=r.bbox[1], xmax=r.bbox[2], ymax=r.bbox[3])
        for r in regions
    ]
    results += [OrientedDetection.from_rotated_rect(r.label, r.score, r.rotated_box, W, H) for r in regions]
    results += [Segmentation(label=r.label, score=r.score, contour=[r.contour]) for r in regions]
    assert finder.occlusion(img, results) == pytest.approx([r.score for r in results])


def test_occlusion_of_part_of_a_region_leaves_the_rest_scoring():
    from chariot_support.model.tasks import Detection

    finder, img = ColourFinder(), scene()
    red = by_label(finder.find(img))["red"]
    (xmin, ymin, xmax, ymax) = red.bbox
    half = Detection(label="red", score=red.score, xmin=xmin, ymin=ymin, xmax=(xmin + xmax) // 2, ymax=ymax)
    (importance,) = finder.occlusion(img, [half])
    assert 0 < importance < red.score
    # Blanking where nothing of that colour is leaves no red region touching the box.
    elsewhere = Detection(label="red", score=0.4, xmin=0, ymin=400, xmax=30, ymax=470)
    assert finder.occlusion(img, [elsewhere]) == [pytest.approx(0.4)]


def test_occlusion_of_a_label_takes_its_share_away():
    from chariot_support.model.tasks import Classification

    finder, img = ColourFinder(), scene()
    shares = finder.class_scores(img)
    results = [Classification(label=label, score=score) for label, score in shares.items()]
    assert finder.occlusion(img, results) == pytest.approx(list(shares.values()))
    only_red = square(blank(), 10, 10, 60, RED)
    # With the only colour gone the demo falls back to equal thirds, so red keeps a third.
    assert finder.occlusion(only_red, [Classification(label="red", score=1.0)]) == [pytest.approx(2 / 3)]


def test_occlusion_of_an_answer_is_the_share_of_regions_it_depends_on():
    from chariot_support.model.tasks import PromptAnswer

    finder, img = ColourFinder(), scene()
    prompts = ["is there anything red?", "how many regions are there?"]
    answers = [PromptAnswer(prompt=p, answer=finder.describe(img, p)) for p in prompts]
    assert finder.occlusion(img, answers) == pytest.approx([1 / 3, 1.0])
    assert finder.occlusion(blank(), [PromptAnswer(prompt="red?", answer=finder.describe(blank(), "red?"))]) == [0.0]
