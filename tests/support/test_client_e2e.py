"""The engine's command-line client against the running engine, as a user runs it: several images, drawings,
metadata, and the engine's own error message when a request is refused."""

import json
import re

import cv2
import pytest

from chariot_support.dev.testing import chariot_metadata
from chariot_support.model.tasks import TaskType
from template_paths import ENGINE_TEMPLATE

# Prompts go to every task type; Image Text to Text needs them, the others pass them to predict.
PROMPT = ["--prompt", "what colours are in the picture?"]
# What the client does with a request and its answer apart from drawing (batches, metadata, the engine's refusal) is
# the same for every task type: shown on the one that reads the prompts too. Drawing is shown for each.
ONE_TASK = pytest.mark.parametrize("task", [TaskType.IMAGE_TEXT_TO_TEXT], ids=["image_text_to_text"], indirect=True)


def test_several_images_get_a_table_each_a_drawing_each_and_a_counter(engine, run_client, tmp_path):
    out = tmp_path / "drawn"
    result = run_client("samples/scene.png", "samples/shapes.jpg", "--url", engine.url, "--draw", out, *PROMPT)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^samples/scene.png \(image-0\): \d+ results?$", result.stdout, re.MULTILINE), result.stdout
    assert "samples/shapes.jpg (image-1):" in result.stdout
    assert "[1/2] samples/scene.png" in result.stderr and "[2/2] samples/shapes.jpg" in result.stderr
    for name, sample in (("scene.png", "samples/scene.png"), ("shapes.png", "samples/shapes.jpg")):
        drawn, original = cv2.imread(str(out / name)), cv2.imread(str(ENGINE_TEMPLATE / sample))
        # Boxes and contours are drawn on the picture; labels and answers in a band added below it.
        assert drawn is not None and drawn.shape[1:] == original.shape[1:] and drawn.shape[0] >= original.shape[0]
        height = original.shape[0]
        on_picture = (cv2.absdiff(drawn[:height], original) > 40).any(axis=2).sum()
        band = drawn[height:]
        in_band = (band != band[0, 0]).any(axis=2).sum() if len(band) else 0
        assert on_picture > 50 or in_band > 100, f"nothing drawn on {name}"


@ONE_TASK
def test_a_batch_of_images_travels_in_one_request(engine, run_client):
    result = run_client(
        "samples/scene.png", "samples/shapes.jpg", "--url", engine.url, "--batch", "2", "--json", *PROMPT
    )
    assert result.returncode == 0, result.stderr
    (reply,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert [o["name"] for o in reply["outputs"]] == ["image-0", "image-1"]


@ONE_TASK
def test_metadata_comes_back_unchanged(engine, run_client):
    metadata = chariot_metadata(site="north", camera=7)
    result = run_client("samples/scene.png", "--url", engine.url, "--metadata", metadata, *PROMPT)
    assert result.returncode == 0, result.stderr
    assert f"metadata: {metadata}" in result.stdout


@ONE_TASK
def test_a_refused_request_prints_the_engines_error_and_exits_1(engine, run_client, tmp_path):
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("these are notes, not pixels")
    result = run_client(not_an_image, "--url", engine.url, *PROMPT)
    assert result.returncode == 1
    assert "HTTP 400" in result.stderr and "is not an image this engine can read" in result.stderr
    assert result.stdout == ""
    refused = run_client("samples/scene.png", "--url", engine.url, "--action", "explode", *PROMPT)
    assert refused.returncode == 1 and "unknown action 'explode'" in refused.stderr
    wrong_model = run_client("samples/scene.png", "--url", engine.url, "--model-id", "Not_Chariot", *PROMPT)
    assert wrong_model.returncode == 1 and "HTTP 404" in wrong_model.stderr
