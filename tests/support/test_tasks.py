"""Unit tests of chariot_support.model.tasks: result types, their protocol dicts, their checks, and `select`."""

import json
import math

import cv2
import numpy as np
import orjson
import pytest
from fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from pydantic import ValidationError

from chariot_support.dev.testing import expect_error, same_corners
from chariot_support.errors import InvalidResult
from chariot_support.model.tasks import (
    Classification,
    Detection,
    OrientedDetection,
    PromptAnswer,
    Segmentation,
    TaskType,
    contours_from_mask,
    select,
    to_dicts,
    to_json,
    validate_results,
)

# The examples on Chariot's chariot-v2-kserve protocol page, one per result type.
PROTOCOL_EXAMPLES = [
    (Classification, {"label": "cat", "score": 0.7}),
    (Detection, {"label": "cat", "score": 0.6, "xmin": 7, "xmax": 17, "ymin": 50, "ymax": 77}),
    (OrientedDetection, {"label": "dog", "score": 0.99, "cx": 0.3, "cy": 0.7, "w": 0.08, "h": 0.04, "r": -0.1}),
    (
        Segmentation,
        {
            "label": "cat",
            "score": 0.5,
            "contour": [[{"x": 1.0, "y": 2.0}, {"x": 3.0, "y": 4.0}], [{"x": 5.0, "y": 6.0}, {"x": 7.0, "y": 8.0}]],
        },
    ),
    (PromptAnswer, {"prompt": "what in picture?", "answer": "dogs and cats"}),
]
BOX = {"label": "box", "score": 0.5, "xmin": 1.0, "xmax": 5.0, "ymin": 2.0, "ymax": 6.0}


def rotated_corners(cx: float, cy: float, w: float, h: float, radians: float) -> np.ndarray:
    """The corners of a box turned by `radians`, clockwise positive with x right and y down."""
    c, s = math.cos(radians), math.sin(radians)
    local = np.array([[-w / 2, -h / 2], [w / 2, -h / 2], [w / 2, h / 2], [-w / 2, h / 2]])
    return local @ np.array([[c, -s], [s, c]]).T + (cx, cy)


def invalid(call, *fragments: str) -> str:
    return expect_error(call, InvalidResult, *fragments)


# --- result types and their dicts ---------------------------------------------------------------------------


@pytest.mark.parametrize("result_type, example", PROTOCOL_EXAMPLES, ids=lambda v: getattr(v, "__name__", ""))
def test_results_serialise_to_the_protocol_dicts(result_type, example):
    (dumped,) = to_dicts([result_type(**example)])
    assert dumped == example
    assert list(dumped) == list(example)
    assert json.loads(json.dumps(dumped)) == example
    # The engine's own inference route writes the same JSON text straight from the results, fields in order.
    assert json.loads(to_json([result_type(**example)])) == [example]
    assert to_json([result_type(**example)]) == orjson.dumps([dumped])


LABELS = st.text(min_size=1, max_size=8, alphabet=st.sampled_from(["a", '"', "]", "[", ",", "}", "{", "\\", "é", ":"]))
CONTOUR = hnp.arrays(
    st.sampled_from([np.int32, np.int64, np.float32, np.float64]),
    st.tuples(st.integers(1, 12), st.sampled_from([(2,), (1, 2)])).map(lambda t: (t[0], *t[1])),
    elements={"min_value": -1e9, "max_value": 1e9, "allow_nan": False, "allow_infinity": False},
)


@settings(max_examples=examples(300))
@given(st.lists(st.tuples(LABELS, st.floats(0, 1), st.lists(CONTOUR, max_size=4)), max_size=4))
def test_to_json_writes_what_to_dicts_gives(regions):
    """Contours are written straight from their arrays by rewriting brackets; whatever the numbers and labels, the
    text must read back as the dicts every other route sends."""
    results = [Segmentation(label=label, score=score, contour=contours) for label, score, contours in regions]
    assert orjson.loads(to_json(results)) == to_dicts(results)
    assert json.loads(to_json(results)) == json.loads(json.dumps(to_dicts(results)))


def test_a_contour_reads_as_a_list_of_point_dicts():
    (contour,) = Segmentation(label="a", score=0.5, contour=[np.array([[[1, 2]], [[3, 4]], [[5, 6]]])]).contour
    assert len(contour) == 3
    assert contour[1] == {"x": 3.0, "y": 4.0}
    assert contour[-1] == {"x": 5.0, "y": 6.0}
    assert contour[:2] == [{"x": 1.0, "y": 2.0}, {"x": 3.0, "y": 4.0}]
    assert [p["x"] for p in contour] == [1.0, 3.0, 5.0]
    assert contour == [{"x": 1, "y": 2}, {"x": 3, "y": 4}, {"x": 5, "y": 6}]
    assert contour != [{"x": 1, "y": 2}]
    assert contour.xy.dtype == np.float64 and contour.xy.shape == (3, 2)


@pytest.mark.parametrize(
    "array, fragment",
    [
        (np.zeros((0, 2)), "x, y pairs"),
        (np.zeros((4, 3)), "got (4, 3)"),
        (np.zeros(4), "got (4,)"),
        (np.array([[1.0, np.nan]]), "finite"),
        (np.array([[1.0, np.inf]]), "finite"),
        (np.array([["1", "2"]]), "must hold numbers"),
        (np.array([[True, False]]), "must hold numbers"),
    ],
)
def test_segmentation_refuses_a_contour_array_that_is_not_points(array, fragment):
    invalid(
        lambda: validate_results(
            TaskType.IMAGE_SEGMENTATION, [[{"label": "a", "score": 0.5, "contour": [array]}]], ["photo"]
        ),
        "image 0 ('photo')",
        "field 'contour'",
        fragment,
    )


@pytest.mark.parametrize("swap", [{"xmin": 6.0}, {"ymax": 1.0}])
def test_detection_rejects_swapped_corners(swap):
    with pytest.raises(ValidationError, match="swapped"):
        Detection(**{**BOX, **swap})


def test_detection_allows_a_zero_size_box():
    assert Detection(**{**BOX, "xmax": 1.0, "ymax": 2.0}).xmax == 1.0


@pytest.mark.parametrize("field", ["xmin", "xmax", "ymin", "ymax"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_detection_rejects_non_finite_coordinates(field, value):
    with pytest.raises(ValidationError, match="finite"):
        Detection(**{**BOX, field: value})


@pytest.mark.parametrize("result_type, example", PROTOCOL_EXAMPLES[:4], ids=lambda v: getattr(v, "__name__", ""))
@pytest.mark.parametrize("score", [-0.01, 1.01, math.nan])
def test_scores_outside_zero_to_one_are_rejected(result_type, example, score):
    with pytest.raises(ValidationError):
        result_type(**{**example, "score": score})


def test_from_rotated_rect_normalises_by_width_and_height_and_keeps_the_sign():
    box = OrientedDetection.from_rotated_rect("a", 0.9, ((100.0, 50.0), (40.0, 30.0), 30.0), 400, 200)
    assert (box.cx, box.cy, box.w, box.h) == pytest.approx((0.25, 0.25, 0.1, 0.15))
    assert box.r == pytest.approx(math.pi / 6)
    turned_back = OrientedDetection.from_rotated_rect("a", 0.9, ((100.0, 50.0), (40.0, 30.0), -15.0), 400, 200)
    assert turned_back.r == pytest.approx(-math.pi / 12)


def test_from_rotated_rect_round_trips_a_drawn_clockwise_box():
    width, height = 400, 200
    centre, size, degrees = (150.0, 80.0), (120.0, 40.0), 30.0
    drawn = cv2.boxPoints((centre, size, degrees))
    # OpenCV's positive angle is clockwise on screen: the box's right end goes down.
    assert same_corners(drawn, rotated_corners(*centre, *size, math.radians(degrees)), 0.01)
    mask = np.zeros((height, width), np.uint8)
    cv2.fillPoly(mask, [np.round(drawn).astype(np.int32)], 255)
    (contour,) = contours_from_mask(mask)
    box = OrientedDetection.from_rotated_rect("blue", 0.8, cv2.minAreaRect(contour), width, height)
    corners = rotated_corners(box.cx * width, box.cy * height, box.w * width, box.h * height, box.r)
    assert same_corners(drawn, corners, 2.0)
    assert (box.r % (math.pi / 2)) == pytest.approx(math.pi / 6, abs=0.02)


def test_segmentation_takes_find_contours_arrays_or_point_dicts():
    mask = np.zeros((60, 80), np.uint8)
    mask[20:50, 10:50] = 1
    contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    from_arrays = Segmentation(label="a", score=0.5, contour=contours)
    points = [[{"x": float(x), "y": float(y)} for x, y in c.reshape(-1, 2)] for c in contours]
    assert from_arrays == Segmentation(label="a", score=0.5, contour=points)
    (outline,) = to_dicts([from_arrays])[0]["contour"]
    assert sorted((p["x"], p["y"]) for p in outline) == [(10, 20), (10, 49), (49, 20), (49, 49)]


def test_from_mask_contours_enclose_the_drawn_shapes():
    mask = np.zeros((120, 200), np.uint8)
    cv2.rectangle(mask, (10, 20), (49, 49), 1, -1)
    cv2.circle(mask, (140, 60), 25, 1, -1)
    segment = Segmentation.from_mask("shapes", 0.7, mask)
    areas = sorted(cv2.contourArea(np.array([(p["x"], p["y"]) for p in c], np.float32)) for c in segment.contour)
    assert areas[0] == pytest.approx(39 * 29)
    assert areas[1] == pytest.approx(math.pi * 25**2, rel=0.05)


def test_contours_from_mask_rejects_non_2d():
    with pytest.raises(ValueError, match="2-D"):
        contours_from_mask(np.zeros((4, 4, 3), np.uint8))
    assert contours_from_mask(np.zeros((4, 4), bool)) == []


# --- validate_results -----------------------------------------------------------------------------------------


def test_validate_results_accepts_dicts_and_instances():
    checked = validate_results(
        TaskType.IMAGE_CLASSIFICATION,
        [[{"label": "cat", "score": 0.7}], [Classification(label="dog", score=0.2)], []],
        ["a", "b", "c"],
    )
    assert checked == [[Classification(label="cat", score=0.7)], [Classification(label="dog", score=0.2)], []]


@pytest.mark.parametrize(
    "results, got",
    [([[]], "got a list of 1"), ([[], [], []], "got a list of 3"), ({"a": []}, "got dict"), (None, "got NoneType")],
)
def test_validate_results_needs_one_list_per_image(results, got):
    invalid(
        lambda: validate_results(TaskType.OBJECT_DETECTION, results, ["a", "b"]),
        "one list of Detection per image (2)",
        got,
    )


@pytest.mark.parametrize(
    "task, bad, fragments",
    [
        (TaskType.IMAGE_CLASSIFICATION, {"label": "cat"}, ["result 1", "field 'score'", "required"]),
        (TaskType.IMAGE_CLASSIFICATION, {"label": "cat", "score": "high"}, ["result 1", "field 'score'", "number"]),
        (TaskType.IMAGE_CLASSIFICATION, {"label": "cat", "score": 0.5, "box": 1}, ["result 1", "field 'box'"]),
        (TaskType.IMAGE_CLASSIFICATION, "cat", ["result 1", "valid dictionary"]),
        (TaskType.OBJECT_DETECTION, {**BOX, "xmin": 9.0}, ["result 1", "swapped"]),
        (
            TaskType.IMAGE_SEGMENTATION,
            {"label": "a", "score": 0.5, "contour": [[{"x": 1}]]},
            ["result 1", "field 'contour.y'", "required"],
        ),
        (TaskType.IMAGE_TEXT_TO_TEXT, {"prompt": "q"}, ["result 1", "field 'answer'"]),
    ],
)
def test_validate_results_names_image_result_and_field(task, bad, fragments):
    good = {
        TaskType.IMAGE_CLASSIFICATION: {"label": "dog", "score": 0.1},
        TaskType.OBJECT_DETECTION: BOX,
        TaskType.IMAGE_SEGMENTATION: {"label": "a", "score": 0.5, "contour": [[{"x": 1, "y": 2}]]},
        TaskType.IMAGE_TEXT_TO_TEXT: {"prompt": "q", "answer": "a"},
    }[task]
    invalid(
        lambda: validate_results(task, [[good], [good, bad]], ["first", "second"]), "image 1 ('second')", *fragments
    )


def test_validate_results_names_an_image_whose_results_are_not_a_list():
    invalid(
        lambda: validate_results(TaskType.IMAGE_CLASSIFICATION, [{"label": "cat", "score": 0.5}], ["only"]),
        "image 0 ('only')",
        "the result list",
        "valid list",
    )


# --- select -------------------------------------------------------------------------------------------------


SCORES = [Classification(label=label, score=score) for label, score in [("dog", 0.3), ("cat", 0.7), ("cow", 0.1)]]


def test_classification_predict_keeps_only_the_top_label():
    chosen = select(TaskType.IMAGE_CLASSIFICATION, SCORES, action="predict", score_threshold=None, prompts=())
    assert to_dicts(chosen) == [{"label": "cat", "score": 0.7}]


def test_classification_predict_proba_keeps_all_sorted_by_score():
    chosen = select(TaskType.IMAGE_CLASSIFICATION, SCORES, action="predict_proba", score_threshold=None, prompts=())
    assert [c.label for c in chosen] == ["cat", "dog", "cow"]


@pytest.mark.parametrize(
    "threshold, labels", [(0.3, ["cat", "dog"]), (0.31, ["cat"]), (0.0, ["cat", "dog", "cow"]), (0.9, [])]
)
def test_score_threshold_is_inclusive(threshold, labels):
    chosen = select(
        TaskType.IMAGE_CLASSIFICATION, SCORES, action="predict_proba", score_threshold=threshold, prompts=()
    )
    assert [c.label for c in chosen] == labels


def test_detections_are_filtered_but_keep_their_order():
    scored = [("a", 0.2), ("b", 0.9), ("c", 0.5)]
    boxes = [Detection(**{**BOX, "label": label, "score": score}) for label, score in scored]
    chosen = select(TaskType.OBJECT_DETECTION, boxes, action="detect", score_threshold=0.5, prompts=())
    assert [b.label for b in chosen] == ["b", "c"]


def test_answers_must_match_the_prompts_in_order():
    answers = [PromptAnswer(prompt="what?", answer="a cat"), PromptAnswer(prompt="where?", answer="on a mat")]
    kept = select(
        TaskType.IMAGE_TEXT_TO_TEXT, answers, action="predict", score_threshold=None, prompts=("what?", "where?")
    )
    assert kept == answers
    for prompts in [("where?", "what?"), ("what?",), ("what?", "where?", "why?")]:
        invalid(
            lambda prompts=prompts: select(
                TaskType.IMAGE_TEXT_TO_TEXT, answers, action="predict", score_threshold=None, prompts=prompts
            ),
            "must answer the prompts",
            repr(list(prompts)),
        )


def test_an_image_without_prompts_gets_one_answer_with_the_empty_prompt():
    itself = [PromptAnswer(answer="a cat on a mat")]
    assert to_dicts(itself) == [{"prompt": "", "answer": "a cat on a mat"}]
    kept = select(TaskType.IMAGE_TEXT_TO_TEXT, itself, action="predict", score_threshold=None, prompts=())
    assert kept == itself
    for answered in [[], [PromptAnswer(prompt="what?", answer="a cat")], itself * 2]:
        invalid(
            lambda answered=answered: select(
                TaskType.IMAGE_TEXT_TO_TEXT, answered, action="predict", score_threshold=None, prompts=()
            ),
            "sent without prompts",
            "PromptAnswer(answer=...)",
            "raise BadRequest if the model needs a prompt",
        )


def test_a_contour_is_a_frozen_copy_of_the_models_array():
    array = np.array([[1, 2], [3, 4]], np.int32)
    (contour,) = Segmentation(label="a", score=0.5, contour=[array]).contour
    array[0, 0] = 99  # the model reuses its buffer for the next image
    assert contour[0] == {"x": 1.0, "y": 2.0}
    with pytest.raises(ValueError, match="read-only"):
        contour.xy[0, 0] = 5
