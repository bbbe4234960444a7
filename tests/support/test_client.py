"""The command-line client's pieces: the request it builds, its tables, its drawings, and its exits on mistakes.
(The client against the running engine is tested in test_client_e2e.py and test_task.py.)"""

import base64
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

import chariot_support
from chariot_support.client import cli as client
from chariot_support.client import drawing
from chariot_support.dev.testing import changed_near, free_port
from chariot_support.model.tasks import Segmentation
from template_paths import ENGINE_TEMPLATE

SAMPLES = ENGINE_TEMPLATE / "samples"
DETECTIONS = [
    {"label": "red", "score": 0.9056, "xmin": 20.0, "xmax": 100.0, "ymin": 30.0, "ymax": 90.0},
    {"label": "green", "score": 0.85, "xmin": 221.0, "xmax": 281.0, "ymin": 31.0, "ymax": 91.0},
]


def bgr(scene) -> np.ndarray:
    return cv2.cvtColor(scene.pixels, cv2.COLOR_RGB2BGR)


def test_the_sample_scene_is_the_scene_the_tests_draw(scene):
    shipped = cv2.imread(str(SAMPLES / "scene.png"), cv2.IMREAD_COLOR_RGB)
    assert shipped is not None and np.array_equal(shipped, scene.pixels)
    assert cv2.imread(str(SAMPLES / "shapes.jpg")) is not None
    assert all(p.stat().st_size < 16_000 for p in SAMPLES.iterdir())


def test_request_has_one_bytes_input_per_image_and_metadata_on_the_request():
    metadata = json.dumps({"standard_metadata": {}, "extended_metadata": []})
    body = client.build_request(
        [("image-0", b"\x89PNG one"), ("image-1", b"two")],
        action="detect",
        prompts=["what?"],
        score_threshold=0.25,
        metadata=metadata,
    )
    assert [i["name"] for i in body["inputs"]] == ["image-0", "image-1"]
    for tensor, raw in zip(body["inputs"], (b"\x89PNG one", b"two"), strict=True):
        assert tensor["datatype"] == "BYTES" and tensor["shape"] == [1]
        assert base64.b64decode(tensor["data"][0], validate=True) == raw
        assert tensor["parameters"] == {"action": "detect", "prompts": ["what?"], "score_threshold": 0.25}
    assert body["parameters"] == {"metadata": metadata}
    bare = client.build_request([("image-0", b"x")])
    assert "parameters" not in bare and "parameters" not in bare["inputs"][0]


def test_the_url_is_the_one_chariot_calls():
    assert client.infer_url("http://h:8080/", "abc-1") == "http://h:8080/v2/models/m-abc-1/infer/"


def test_detection_table_aligns_numbers_under_their_headings():
    table = client.format_table(DETECTIONS).splitlines()
    assert table[0].split() == ["label", "score", "xmin", "ymin", "xmax", "ymax"]
    assert table[1].split() == ["red", "0.906", "20.0", "30.0", "100.0", "90.0"]
    assert table[2].split() == ["green", "0.850", "221.0", "31.0", "281.0", "91.0"]
    # Right-aligned: every row ends its xmax column where the heading does.
    end = table[0].index("xmax") + len("xmax")
    assert all(row[:end].endswith(value) for row, value in zip(table[1:], ("100.0", "281.0"), strict=True))


@pytest.mark.parametrize(
    "results, heading, row",
    [
        ([{"label": "cat", "score": 0.7}], ["label", "score"], ["cat", "0.700"]),
        (
            [{"label": "boat", "score": 0.5, "cx": 0.5, "cy": 0.71, "w": 0.31, "h": 0.17, "r": 0.5236}],
            ["label", "score", "cx", "cy", "w", "h", "r", "(rad)"],
            ["boat", "0.500", "0.500", "0.710", "0.310", "0.170", "0.524"],
        ),
        (
            [
                {
                    "label": "road",
                    "score": 0.9,
                    "contour": [
                        [{"x": 1, "y": 2}, {"x": 9, "y": 2}, {"x": 9, "y": 8}],
                        [{"x": 20, "y": 20}, {"x": 22, "y": 25}],
                    ],
                }
            ],
            ["label", "score", "contours", "points", "box", "(x0,", "y0,", "x1,", "y1)"],
            ["road", "0.900", "2", "5", "1,", "2,", "22,", "25"],
        ),
        (
            [{"prompt": "what colours?", "answer": "red and blue."}],
            ["prompt", "answer"],
            ["what", "colours?", "red", "and", "blue."],
        ),
        ([{"text": "hello", "n": 3}], ["text", "n"], ["hello", "3"]),
    ],
    ids=["classification", "oriented", "segmentation", "prompt-answer", "unknown-format"],
)
def test_each_result_format_has_its_columns(results, heading, row):
    lines = client.format_table(results).splitlines()
    assert lines[0].split() == heading
    assert lines[1].split() == row


def test_an_answer_of_several_lines_keeps_them_in_its_column():
    results = [{"prompt": "", "answer": "CHARIOT\nENGINE\r\n2"}, {"prompt": "what?", "answer": "one"}]
    assert client.format_table(results).splitlines() == [
        "prompt  answer",
        "        CHARIOT",
        "        ENGINE",
        "        2",
        "what?   one",
    ]


def test_the_usage_line_names_the_command_the_user_ran(run_client):
    helped = run_client("--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: python -m chariot_support.client [-h]")


def test_an_image_without_results_says_so():
    empty = client.Answer(path=Path("a.png"), name="image-0", results=[])
    assert client.describe(empty) == "a.png (image-0): no results"
    one = client.describe(client.Answer(path=Path("a.png"), name="image-0", results=DETECTIONS[:1]))
    assert one.splitlines()[0] == "a.png (image-0): 1 result"


def test_boxes_are_drawn_where_the_detections_are(scene):
    before = bgr(scene)
    after = drawing.draw(before, DETECTIONS)
    assert np.array_equal(before, bgr(scene)), "draw must not change its input"
    assert changed_near(before, after, 60, 30)  # top edge of the red box
    assert changed_near(before, after, 100, 60)  # its right edge
    assert changed_near(before, after, 251, 91)  # bottom edge of the green box
    assert not changed_near(before, after, 60, 60, radius=5)  # inside the box: the shape is left visible
    assert not changed_near(before, after, 300, 220, radius=10)  # far from every box


def test_rotated_boxes_are_drawn_turned_clockwise(scene):
    before = bgr(scene)
    w, h = scene.width, scene.height
    (cx, cy), (bw, bh), degrees = scene.blue_centre, scene.blue_size, scene.blue_degrees
    result = {
        "label": "blue",
        "score": 0.9,
        "cx": cx / w,
        "cy": cy / h,
        "w": bw / w,
        "h": bh / h,
        "r": math.radians(degrees),
    }
    after = drawing.draw(before, [result])
    # The long side's midpoints, half the box height from the centre, at 30 degrees clockwise (y down).
    for sign in (1, -1):
        nx, ny = -math.sin(math.radians(degrees)), math.cos(math.radians(degrees))
        assert changed_near(before, after, cx + sign * nx * bh / 2, cy + sign * ny * bh / 2)
    # The same box turned the other way would cross this point, which must stay untouched.
    mirrored = cv2.boxPoints(((cx, cy), (bw, bh), -degrees))
    assert not changed_near(before, after, *mirrored[0], radius=1)
    assert not changed_near(before, after, cx, cy, radius=5)


def test_contours_are_outlined_and_tinted(scene):
    before = bgr(scene)
    mask = np.zeros(scene.pixels.shape[:2], np.uint8)
    xmin, ymin, xmax, ymax = scene.red_box
    mask[ymin:ymax, xmin:xmax] = 1
    result = Segmentation.from_mask("red", 0.9, mask).model_dump()
    after = drawing.draw(before, [result])
    assert changed_near(before, after, 60, ymax - 1, radius=2)  # the outline, with its dark edge beside it
    assert not np.array_equal(before[60, 60], after[60, 60])  # the tint inside
    assert not changed_near(before, after, 300, 220, radius=10)


@pytest.mark.parametrize(
    "results",
    [
        [{"label": "red", "score": 0.62}, {"label": "blue", "score": 0.38}],
        [{"prompt": "What colours are in the picture?", "answer": "I found 1 red region and 1 blue region."}],
    ],
    ids=["classification", "prompt-answer"],
)
def test_labels_and_answers_are_written_below_the_picture_hiding_nothing(scene, results):
    before = bgr(scene)
    after = drawing.draw(before, results)
    assert after.shape[0] > before.shape[0] and after.shape[1:] == before.shape[1:]
    assert np.array_equal(before, after[: scene.height]), "the picture itself is left as it was"
    band = after[scene.height :]
    assert (band != band[0, 0]).any(axis=2).sum() > 100, "the text is in the band"


def test_an_answer_about_the_picture_itself_is_drawn_without_a_question(scene):
    before = bgr(scene)
    asked = drawing.draw(before, [{"prompt": "what is this?", "answer": "a scene"}])
    itself = drawing.draw(before, [{"prompt": "", "answer": "a scene"}])
    assert np.array_equal(itself[: scene.height], before)
    assert asked.shape[0] > itself.shape[0] > before.shape[0], "one line fewer: no empty Q: line"


def test_drawings_go_to_the_file_for_one_image_and_a_folder_for_several(tmp_path):
    assert client.drawing_paths([Path("a/x.jpg")], tmp_path / "out.png") == [tmp_path / "out.png"]
    paths = client.drawing_paths([Path("a/x.jpg"), Path("b/x.png"), Path("y.jpg")], tmp_path)
    assert paths == [tmp_path / "x.png", tmp_path / "x-2.png", tmp_path / "y.png"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--metadata", "{oops"], "--metadata is not valid JSON"),
        (["--metadata", "[1]"], "--metadata must be a JSON object"),
        (["--score-threshold", "2"], "--score-threshold must be between 0 and 1"),
        (["--header", "no-colon"], "--header 'no-colon' must look like 'Name: value'"),
    ],
)
def test_usage_mistakes_exit_2_before_sending(capsys, args, message):
    assert client.main([str(SAMPLES / "scene.png"), "--url", "http://127.0.0.1:9", *args]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_image_file_is_named(capsys, tmp_path):
    assert client.main([str(tmp_path / "nope.png")]) == 2
    assert f"no such file: {tmp_path / 'nope.png'}" in capsys.readouterr().err


def test_an_engine_that_is_not_there_exits_1_with_the_reason(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    assert client.main([str(SAMPLES / "scene.png"), "--url", url, "--timeout", "5"]) == 1
    captured = capsys.readouterr()
    assert "cannot reach" in captured.err and "is the engine running" in captured.err
    assert captured.out == ""


def test_the_client_starts_without_importing_the_server():
    """The client needs no MLServer; importing it would cost every run a second or more."""
    src = str(Path(chariot_support.__file__).resolve().parents[1])
    check = (
        "import sys, chariot_support.client.cli; print(sorted(m for m in sys.modules if m.split('.')[0] == 'mlserver'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_every_name_the_support_package_exports_resolves():
    assert sorted(chariot_support.__all__) == sorted(chariot_support._EXPORTS)
    for name in chariot_support.__all__:
        assert getattr(chariot_support, name).__name__ == name
