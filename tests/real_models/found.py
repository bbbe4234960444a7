"""What each real model must find in its photos, asked of the engine its suite started: test_real_models.py copies
this file into each real-model engine as tests/test_found.py, beside the author's test_task.py, so these checks share
that suite's engine. Precise where test_task.py's EXPECTED names only labels: where the face is, what the mask
covers, how the lines of text are turned, what the page says, which way up a line is. And the engine's log stays
one JSON object a line with what the model's runtime writes to stderr itself (LiteRT's line as it starts)."""

import json
import math
from pathlib import Path

import cv2
import numpy as np

from chariot_support.dev.model_check import picture_input, post_json
from chariot_support.model.tasks import TaskType

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
TURN = 8.0  # degrees clockwise the page is turned for the oriented detector


def the_face_is_found(ask):
    (face,) = ask("astronaut.png")
    assert face["label"] == "face" and face["score"] > 0.8
    # Eileen Collins' face in scikit-image's astronaut photo: eyes near (205, 115) and (245, 115), chin at y 170.
    assert 165 < face["xmin"] < 195 and 255 < face["xmax"] < 285, face
    assert 65 < face["ymin"] < 100 and 160 < face["ymax"] < 190, face


def the_mask_covers_the_astronaut_and_not_the_background(ask):
    (person,) = ask("astronaut.png")
    mask = np.zeros((512, 512), np.uint8)
    cv2.fillPoly(mask, [np.array([(p["x"], p["y"]) for p in c], np.int32) for c in person["contour"]], 1)
    assert person["label"] == "person" and person["score"] > 0.8
    for x, y in ((225, 120), (200, 350), (100, 450)):  # face, chest, arm
        assert mask[y, x], f"({x}, {y}) is on the astronaut"
    for x, y in ((420, 60), (30, 30), (480, 250)):  # the shuttle, the flag, the wall behind
        assert not mask[y, x], f"({x}, {y}) is background"
    assert 0.3 < mask.mean() < 0.7


def each_line_is_found_turned_as_the_page(ask):
    lines = ask("page.png")
    long_lines = [b for b in lines if b["w"] > 0.3]
    assert len(long_lines) >= 6, lines  # the heading, five lines of text and the line of code
    turns = sorted(math.degrees(b["r"]) for b in long_lines)
    assert abs(turns[len(turns) // 2] - TURN) < 1.5, turns  # clockwise is positive, as Chariot has it
    for box in long_lines:
        assert box["label"] == "text" and abs(math.degrees(box["r"]) - TURN) < 4, box
        assert 0 < box["w"] <= 1 and 0 < box["h"] <= 1 and abs(box["r"]) <= math.pi / 4
    assert len({round(b["cy"], 2) for b in long_lines}) == len(long_lines), "one box per line"


def the_page_is_read(ask):
    (answer,) = ask("page.png", prompts=["What does it say?"])
    text = answer["answer"]
    assert answer["prompt"] == "What does it say?"
    assert text.splitlines()[0].replace(" ", "").startswith("Region-based"), text
    for words in ("Let us first determine markers", "histogram of grey values"):
        assert words.replace(" ", "") in text.replace(" ", ""), text


def each_line_is_told_which_way_up(ask):
    for picture, label in (("line.png", "upright"), ("line-upside-down.png", "upside down")):
        results = ask(picture, action="predict_proba")
        assert results[0]["label"] == label and results[0]["score"] > 0.9, (picture, results)


CHECKS = {
    TaskType.OBJECT_DETECTION: the_face_is_found,
    TaskType.IMAGE_SEGMENTATION: the_mask_covers_the_astronaut_and_not_the_background,
    TaskType.ORIENTED_OBJECT_DETECTION: each_line_is_found_turned_as_the_page,
    TaskType.IMAGE_TEXT_TO_TEXT: the_page_is_read,
    TaskType.IMAGE_CLASSIFICATION: each_line_is_told_which_way_up,
}


def test_what_the_engine_finds_in_the_photos_is_right(engine, model_name, model_class):
    task = model_class.task_type

    def ask(picture: str, **parameters) -> list[dict]:
        tensor = picture_input("image-0", SAMPLES / picture, task)
        tensor["parameters"] = parameters
        status, answer = post_json(f"{engine.url}/v2/models/{model_name}/infer", {"inputs": [tensor]})
        assert status == 200, answer
        return answer["outputs"][0]["data"][0]

    CHECKS[task](ask)


# The tasks whose model runs in LiteRT, which writes its own line to fd 2 as each interpreter starts.
LITERT = {TaskType.OBJECT_DETECTION, TaskType.IMAGE_SEGMENTATION}


def test_the_engines_log_is_one_json_object_a_line_with_what_the_runtime_wrote(engine, model_class):
    entries = []
    for line in engine.log().splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"a line of the log is not JSON: {line[:200]}") from None
        assert isinstance(entries[-1], dict), line[:200]
    native = [e for e in entries if e["message"] == "INFO: Created TensorFlow Lite XNNPACK delegate for CPU."]
    if model_class.task_type in LITERT:
        assert native and {(e["logger"], e["level"]) for e in native} == {("stderr", "info")}, native
