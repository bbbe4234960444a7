"""Real pretrained models in baked engines, as their authors would put them in: model.py replaced, the model's
files in MODEL_DIR, their own photos in samples/ and what they expect in test_task.py. Each engine's own suite is
green, and what the served engine finds in the photos is right (real_models/README.md lists the models)."""

import contextlib
import math
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest
import skimage.data

from baking import bake
from chariot_support.dev.testing import engine_package, run_engine

pytestmark = pytest.mark.bake

REAL_MODELS = Path(__file__).parent / "real_models"
# The wheels that carry the weights, and the files each gives MODEL_DIR.
WHEELS = {
    "rapidocr-onnxruntime==1.4.4": [
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
    ],
    "mediapipe==0.10.14": [
        "mediapipe/modules/face_detection/face_detection_short_range.tflite",
        "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
    ],
}
TURN = 8.0  # degrees clockwise the page is turned for the oriented detector


def page() -> np.ndarray:
    return np.repeat(skimage.data.page()[..., None], 3, axis=2)


def turned_page() -> np.ndarray:
    pixels = page()
    height, width = pixels.shape[:2]
    turn = cv2.getRotationMatrix2D((width / 2, height / 2), -TURN, 1.0)  # OpenCV turns counter-clockwise
    return cv2.warpAffine(pixels, turn, (width, height), borderValue=(255, 255, 255))


def first_line() -> np.ndarray:
    return np.ascontiguousarray(page()[5:40, 5:300])


# Per task: the photos put in samples/ (RGB), and the EXPECTED table its author writes in test_task.py.
PHOTOS = {
    "Image Classification": {
        "line.png": first_line,
        "line-upside-down.png": lambda: np.ascontiguousarray(first_line()[::-1, ::-1]),
    },
    "Object Detection": {"astronaut.png": skimage.data.astronaut},
    "Oriented Object Detection": {"page.png": turned_page},
    "Image Segmentation": {"astronaut.png": skimage.data.astronaut},
    "Image Text to Text": {"page.png": page},
}
EXPECTED = {
    "Image Classification": {"samples/line.png": "upright", "samples/line-upside-down.png": "upside down"},
    "Object Detection": {"samples/astronaut.png": {"face"}},
    "Oriented Object Detection": {"samples/page.png": {"text"}},
    "Image Segmentation": {"samples/astronaut.png": {"person"}},
    "Image Text to Text": {"samples/page.png": {"What does it say?": "markers"}},
}
SLUGS = {task: task.lower().replace(" ", "_") for task in PHOTOS}


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    """The models' files, taken out of their wheels from the package index, as Chariot unpacks a model."""
    wheels = tmp_path_factory.mktemp("wheels")
    folder = tmp_path_factory.mktemp("model")
    for requirement, members in WHEELS.items():
        download = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                "--disable-pip-version-check",
                "--dest",
                str(wheels),
                requirement,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert download.returncode == 0, download.stderr[-2000:]
        name = re.split("==", requirement)[0].replace("-", "_")
        (wheel,) = [w for w in wheels.glob("*.whl") if w.name.lower().startswith(name)]
        with zipfile.ZipFile(wheel) as archive:
            for member in members:
                (folder / Path(member).name).write_bytes(archive.read(member))
    return folder


def real_engine(task: str, out: Path) -> Path:
    """A baked engine with the real model, its photos and its author's expectations in place."""
    root = bake(task, out)
    package = root.name.replace("-", "_")
    shutil.copy(REAL_MODELS / f"{SLUGS[task]}.py", root / "src" / package / "model.py")
    for old in (root / "samples").iterdir():
        old.unlink()
    for name, photo in PHOTOS[task].items():
        cv2.imwrite(str(root / "samples" / name), cv2.cvtColor(photo(), cv2.COLOR_RGB2BGR))
    test_task = root / "tests" / "test_task.py"
    source = test_task.read_text()
    table = f"EXPECTED = {EXPECTED[task]!r}\n"
    source, replaced = re.subn(r"^EXPECTED = \{\n.*?^\}\n", table, source, count=1, flags=re.M | re.S)
    assert replaced == 1, "test_task.py has no EXPECTED table to fill in"
    test_task.write_text(source)
    return root


@pytest.fixture(scope="module")
def engines(tmp_path_factory) -> dict[str, Path]:
    return {task: real_engine(task, tmp_path_factory.mktemp(SLUGS[task])) for task in PHOTOS}


@pytest.mark.parametrize("task", PHOTOS)
def test_the_engines_suite_is_green_with_a_real_model(task, engines, model_dir):
    root = engines[task]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=root,
        env={**os.environ, "MODEL_DIR": str(model_dir)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "failed" not in result.stdout and "skipped" not in result.stdout and " passed" in result.stdout


@pytest.fixture(scope="module")
def running(engines, model_dir):
    """running(task) -> the real-model engine of `task`, serving, started once for this module's tests."""
    with contextlib.ExitStack() as stack:
        started = {}

        def engine(task: str):
            if task not in started:
                src = engines[task] / "src"
                env = {"MODEL_DIR": str(model_dir)}
                started[task] = stack.enter_context(run_engine(engine_package(src), src=src, env=env))
            return started[task]

        yield engine


@pytest.fixture
def served(engines, running):
    """served(task, picture, **parameters) -> what the real-model engine of `task` finds in one of its samples."""
    from chariot_support.dev.model_check import picture_input, post_json
    from chariot_support.model.tasks import TaskType

    def ask(task: str, picture: str, **parameters) -> list[dict]:
        tensor = picture_input("image-0", engines[task] / "samples" / picture, TaskType(task))
        tensor["parameters"] = parameters
        status, answer = post_json(f"{running(task).url}/infer", {"inputs": [tensor]})
        assert status == 200, answer
        return answer["outputs"][0]["data"][0]

    return ask


def test_the_face_detector_finds_the_astronauts_face(served):
    (face,) = served("Object Detection", "astronaut.png")
    assert face["label"] == "face" and face["score"] > 0.8
    # Eileen Collins' face in scikit-image's astronaut photo: eyes near (205, 115) and (245, 115), chin at y 170.
    assert 165 < face["xmin"] < 195 and 255 < face["xmax"] < 285, face
    assert 65 < face["ymin"] < 100 and 160 < face["ymax"] < 190, face


def test_the_segmenter_covers_the_astronaut_and_not_the_background(served):
    (person,) = served("Image Segmentation", "astronaut.png")
    mask = np.zeros((512, 512), np.uint8)
    cv2.fillPoly(mask, [np.array([(p["x"], p["y"]) for p in c], np.int32) for c in person["contour"]], 1)
    assert person["label"] == "person" and person["score"] > 0.8
    for x, y in ((225, 120), (200, 350), (100, 450)):  # face, chest, arm
        assert mask[y, x], f"({x}, {y}) is on the astronaut"
    for x, y in ((420, 60), (30, 30), (480, 250)):  # the shuttle, the flag, the wall behind
        assert not mask[y, x], f"({x}, {y}) is background"
    assert 0.3 < mask.mean() < 0.7


def test_the_text_detector_finds_each_line_turned_as_the_page(served):
    lines = served("Oriented Object Detection", "page.png")
    long_lines = [b for b in lines if b["w"] > 0.3]
    assert len(long_lines) >= 6, lines  # the heading, five lines of text and the line of code
    turns = sorted(math.degrees(b["r"]) for b in long_lines)
    assert abs(turns[len(turns) // 2] - TURN) < 1.5, turns  # clockwise is positive, as Chariot has it
    for box in long_lines:
        assert box["label"] == "text" and abs(math.degrees(box["r"]) - TURN) < 4, box
        assert 0 < box["w"] <= 1 and 0 < box["h"] <= 1 and abs(box["r"]) <= math.pi / 4
    assert len({round(b["cy"], 2) for b in long_lines}) == len(long_lines), "one box per line"


def test_the_reader_reads_the_page(served):
    (answer,) = served("Image Text to Text", "page.png", prompts=["What does it say?"])
    text = answer["answer"]
    assert answer["prompt"] == "What does it say?"
    assert text.splitlines()[0].replace(" ", "").startswith("Region-based"), text
    for words in ("Let us first determine markers", "histogram of grey values"):
        assert words.replace(" ", "") in text.replace(" ", ""), text


@pytest.mark.parametrize("picture, label", [("line.png", "upright"), ("line-upside-down.png", "upside down")])
def test_the_direction_classifier_tells_which_way_up(served, picture, label):
    results = served("Image Classification", picture, action="predict_proba")
    assert results[0]["label"] == label and results[0]["score"] > 0.9, results
