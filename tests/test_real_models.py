"""Real pretrained models in baked engines, as their authors would put them in: model.py replaced, the model's
files in MODEL_DIR, their own photos in samples/ and what they expect in test_task.py. Each engine's own suite is
green, and what the served engine finds in the photos is right: real_models/found.py, which joins the suite and asks
its engine (real_models/README.md lists the models)."""

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
from real_models.found import TURN

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
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check"]
        + ["--dest", str(wheels), *WHEELS],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert download.returncode == 0, download.stderr[-2000:]
    for requirement, members in WHEELS.items():
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
    shutil.copy(REAL_MODELS / "found.py", root / "tests" / "test_found.py")
    return root


@pytest.mark.parametrize("task", PHOTOS)
def test_the_engines_suite_is_green_with_a_real_model(task, model_dir, tmp_path):
    root = real_engine(task, tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"],
        cwd=root,
        env={**os.environ, "MODEL_DIR": str(model_dir)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "failed" not in result.stdout and "skipped" not in result.stdout and " passed" in result.stdout
    assert "PASSED tests/test_found.py::test_what_the_engine_finds_in_the_photos_is_right" in result.stdout
