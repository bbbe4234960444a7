"""`python -m chariot_support.evaluate` on a real detector: MediaPipe's BlazeFace (weights from the mediapipe wheel,
model.py from real_models/) served by a real engine, on scikit-image photos whose faces were labelled by hand. The
figures are worked out below from the detector's answers, and pycocotools computes the same ones."""

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import cv2
import numpy as np
import pytest
import skimage.data
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from chariot_support.dev.testing import run_engine
from chariot_support.evaluate import cli as evaluate

REAL_MODELS = Path(__file__).parents[1] / "real_models"
WHEEL, WEIGHTS = "mediapipe==0.10.14", "mediapipe/modules/face_detection/face_detection_short_range.tflite"


def mirrored(pixels: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(pixels[:, ::-1])


def grey(pixels: np.ndarray) -> np.ndarray:
    return np.repeat(pixels[..., None], 3, axis=2)


# Each photo (RGB) and its faces (xmin, ymin, xmax, ymax), labelled by hand from eyebrows to chin and ear to ear, or
# cheek to nose tip for the cameraman's profile; mirrored photos have their boxes mirrored.
PHOTOS = {
    "astronaut.png": (skimage.data.astronaut, [(178, 80, 270, 178)]),
    "astronaut-mirrored.png": (lambda: mirrored(skimage.data.astronaut()), [(242, 80, 334, 178)]),
    "camera.png": (lambda: grey(skimage.data.camera()), [(180, 128, 255, 198)]),
    "camera-mirrored.png": (lambda: mirrored(grey(skimage.data.camera())), [(257, 128, 332, 198)]),
    "chelsea-mirrored.png": (lambda: mirrored(skimage.data.chelsea()), []),  # a cat: BlazeFace sees a face
    "coffee.png": (skimage.data.coffee, []),
}


@pytest.fixture(scope="module")
def face_engine(tmp_path_factory):
    """BlazeFace served as an engine serves its model.py, with the weights from mediapipe's wheel in MODEL_DIR."""
    wheels, model_dir = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("model")
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check"]
        + ["--dest", str(wheels), WHEEL],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert download.returncode == 0, download.stderr[-2000:]
    (wheel,) = wheels.glob("mediapipe-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (model_dir / Path(WEIGHTS).name).write_bytes(archive.read(WEIGHTS))
    src = tmp_path_factory.mktemp("src")
    (src / "faces").mkdir()
    shutil.copy(REAL_MODELS / "object_detection.py", src / "faces" / "model.py")
    (src / "faces" / "__init__.py").write_text("")
    (src / "faces" / "__main__.py").write_text(
        "from chariot_support.server.server import serve\nfrom faces.model import Model\n\nserve(Model, default_model_id='faces')\n"
    )
    with run_engine("faces", src=src, env={"MODEL_DIR": str(model_dir)}) as running:
        yield running


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("faces")
    images, annotations = [], []
    for image_id, (name, (photo, faces)) in enumerate(PHOTOS.items(), start=1):
        pixels = photo()
        cv2.imwrite(str(folder / name), cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR))
        images.append({"id": image_id, "file_name": name, "width": pixels.shape[1], "height": pixels.shape[0]})
        for x0, y0, x1, y1 in faces:
            box = [x0, y0, x1 - x0, y1 - y0]
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": 1,
                    "bbox": box,
                    "area": box[2] * box[3],
                }
                | {"iscrowd": 0}
            )
    path = folder / "faces.json"
    path.write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "face"}]})
    )
    return path


@pytest.mark.slow
def test_the_face_detector_scores_what_its_answers_say(face_engine, dataset, tmp_path, capsys):
    out = tmp_path / "out"
    code = evaluate.main([str(dataset), "--url", face_engine.url, "--out", str(out), "--model-id", "faces"])
    assert code == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    summary = metrics["summary"]
    # BlazeFace finds all four faces and, on the mirrored cat, a fifth that scores between the cameraman's two.
    # Ranked: astronaut x2 (right), camera (right), cat (wrong), camera mirrored (right). At IoU 0.5 precision is 1
    # up to recall 0.75 and 4/5 after: 76 of COCO's 101 recall points at 1, 25 at 0.8.
    assert summary["mAP"] == pytest.approx((76 + 25 * 0.8) / 101, abs=1e-6)
    # At IoU 0.75 the cameraman's boxes (IoU 0.63 and 0.74 with the profile's) miss too: only the astronaut's two are
    # right, ranked first, so precision is 1 up to recall 0.5 and nothing after.
    assert summary["mAP@0.75"] == pytest.approx(51 / 101, abs=1e-6)
    counts = next(
        m["value"] for m in metrics["metrics"] if m["type"] == "Counts" and m["parameters"]["iou_threshold"] == 0.5
    )
    assert counts == {"tp": 4, "fp": 1, "fn": 0}
    assert sorted(p.name for p in (out / "worst").iterdir()) == ["01-chelsea-mirrored.png"]
    stats = pycocotools_stats(dataset, face_engine)
    assert summary["mAPAveragedOverIOUs"] == pytest.approx(stats[0], abs=1e-3)
    assert summary["mAP"] == pytest.approx(stats[1], abs=1e-3)
    assert summary["mAP@0.75"] == pytest.approx(stats[2], abs=1e-3)
    assert summary["mAR"] == pytest.approx(stats[8], abs=1e-3)


def pycocotools_stats(dataset: Path, engine) -> list[float]:
    """pycocotools' twelve figures for the engine's answers, asked here independently of the command."""
    from chariot_support.client import cli as client

    truth = COCO(str(dataset))
    detections = []
    for image in truth.dataset["images"]:
        body = client.build_request([("image-0", (dataset.parent / image["file_name"]).read_bytes())], action="detect")
        (answer,) = client.post(client.infer_url(engine.url, "faces"), body)["outputs"]
        for r in answer["data"][0]:
            box = [r["xmin"], r["ymin"], r["xmax"] - r["xmin"], r["ymax"] - r["ymin"]]
            detections.append({"image_id": image["id"], "category_id": 1, "bbox": box, "score": r["score"]})
    assert len(detections) == 5
    check = COCOeval(truth, truth.loadRes(detections), "bbox")
    check.evaluate()
    check.accumulate()
    check.summarize()
    return list(check.stats)
