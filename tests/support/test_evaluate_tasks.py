"""`python -m chariot_support.evaluate` end to end for Image Classification, Oriented Object Detection, Image
Segmentation and Image Text to Text, each against the real demo engine of its task type over real sockets."""

import json

import pytest
from evaluation_scenes import HEIGHT, WIDTH, class_csv, class_folders, coco, dota, scenes, single_colour
from pycocotools import mask as coco_mask

from chariot_support.evaluate import cli as evaluate
from chariot_support.model.tasks import TaskType

SCENES = scenes(4, seed=3)


def started(task: TaskType):
    @pytest.fixture(scope="module")
    def engine(demo_engine):
        return demo_engine(task)

    return engine


classifier = started(TaskType.IMAGE_CLASSIFICATION)
oriented = started(TaskType.ORIENTED_OBJECT_DETECTION)
segmenter = started(TaskType.IMAGE_SEGMENTATION)
answerer = started(TaskType.IMAGE_TEXT_TO_TEXT)


def run(engine, dataset, out, *extra) -> tuple[int, dict]:
    code = evaluate.main([str(dataset), "--url", engine.url, "--out", str(out), *extra])
    metrics = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").exists() else {}
    return code, metrics


# --- Image Classification ----------------------------------------------------------------------------------------


def test_a_folder_per_class_is_classified_right(classifier, tmp_path, capsys):
    dataset = class_folders(tmp_path / "data", single_colour(9))
    code, metrics = run(classifier, dataset, tmp_path / "out", "--min", "Accuracy=1", "--min", "ROCAUC=0.99")
    assert code == 0, capsys.readouterr().err
    assert metrics["action"] == "predict_proba"  # every label's score, which ROC AUC needs
    assert metrics["summary"] == {"Accuracy": 1.0, "mROCAUC": 1.0}
    (matrix,) = [m for m in metrics["metrics"] if m["type"] == "ConfusionMatrix"]
    assert {t: row[t] for t, row in matrix["value"]["confusion_matrix"].items()} == {"red": 3, "green": 3, "blue": 3}
    assert not (tmp_path / "out" / "worst").exists()  # nothing was wrong, so nothing is drawn


def test_wrong_labels_in_a_csv_show_in_accuracy_the_matrix_and_the_worst_images(classifier, tmp_path, capsys):
    pictures = single_colour(9)
    labels = [label for label, _ in pictures]
    labels[0], labels[4] = "green", "red"  # picture 0 is red, picture 4 green
    dataset = class_csv(tmp_path / "data", pictures, labels)
    code, metrics = run(classifier, dataset, tmp_path / "out", "--min", "Accuracy=0.9")
    assert code == 1
    assert metrics["summary"]["Accuracy"] == pytest.approx(7 / 9)
    (matrix,) = [m for m in metrics["metrics"] if m["type"] == "ConfusionMatrix"]
    assert matrix["value"]["confusion_matrix"]["green"]["red"] == 1
    assert matrix["value"]["confusion_matrix"]["red"]["green"] == 1
    assert sorted(p.name for p in (tmp_path / "out" / "worst").iterdir()) == ["01-picture-00.png", "02-picture-04.png"]
    assert f"Accuracy is {7 / 9:.4f}, below the bound 0.9" in capsys.readouterr().err


# --- Oriented Object Detection -----------------------------------------------------------------------------------


def test_dota_labels_are_found_as_polygons(oriented, tmp_path):
    code, metrics = run(oriented, dota(tmp_path / "data", SCENES), tmp_path / "out", "--min", "mAP=1")
    assert code == 0
    assert metrics["action"] == "detect"
    assert metrics["summary"]["mAP"] == 1.0 and metrics["summary"]["mAPAveragedOverIOUs"] > 0.8
    assert (tmp_path / "out" / "precision-recall.png").is_file()


def test_dota_scores_fall_as_the_corners_move(oriented, tmp_path):
    averaged = []
    for shift in (0, 8, 60):
        _, metrics = run(oriented, dota(tmp_path / f"data-{shift}", SCENES, shift=shift), tmp_path / f"out-{shift}")
        averaged.append(metrics["summary"]["mAPAveragedOverIOUs"])
    assert averaged[0] > averaged[1] > averaged[2] == 0.0, averaged


# --- Image Segmentation ------------------------------------------------------------------------------------------


def compressed_rle(path):
    """The dataset's masks rewritten as COCO's compact RLE strings, encoded by pycocotools."""
    document = json.loads(path.read_text())
    for annotation in document["annotations"]:
        truth = coco_mask.decode(coco_mask.frPyObjects(annotation["segmentation"], HEIGHT, WIDTH))
        rle = coco_mask.encode(truth)
        annotation["segmentation"] = {"size": rle["size"], "counts": rle["counts"].decode()}
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("kind", ["polygon", "rle", "compressed rle"])
def test_masks_in_every_coco_form_are_matched(segmenter, tmp_path, kind):
    dataset = coco(tmp_path / "data", SCENES, masks="rle" if "rle" in kind else kind)
    if kind == "compressed rle":
        compressed_rle(dataset)
    code, metrics = run(segmenter, dataset, tmp_path / "out")
    assert code == 0
    # Masks drawn from the same pixels the demo outlines: IoU near 1, so AP holds to the strictest IoU.
    assert metrics["summary"]["mAP"] == 1.0 and metrics["summary"]["mAPAveragedOverIOUs"] > 0.95, metrics["summary"]


def test_masks_that_move_score_less(segmenter, tmp_path):
    averaged = []
    for shift in (0, 6, 50):
        dataset = coco(tmp_path / f"data-{shift}", SCENES, masks="polygon", shift=shift)
        _, metrics = run(segmenter, dataset, tmp_path / f"out-{shift}")
        averaged.append(metrics["summary"]["mAPAveragedOverIOUs"])
    assert averaged[0] > averaged[1] > averaged[2] == 0.0, averaged


# --- Image Text to Text ------------------------------------------------------------------------------------------


def prompts(folder, answers: list[str]):
    """JSON lines asking about each scene's red shape; every scene has exactly one."""
    from evaluation_scenes import write_images

    write_images(folder, SCENES)
    lines = [
        {"image": scene.name, "prompt": "Is there anything red?", "answer": answer}
        for scene, answer in zip(SCENES, answers, strict=True)
    ]
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_answers_are_scored_with_bleu(answerer, tmp_path, capsys):
    right = "yes, 1 red region."
    code, metrics = run(answerer, prompts(tmp_path / "right", [right] * 4), tmp_path / "right-out")
    assert code == 0 and metrics["summary"] == {"BLEU": 1.0}
    assert [m["type"] for m in metrics["metrics"]] == ["BLEU"] * 4
    wrong = "no, there is nothing red in it."
    dataset = prompts(tmp_path / "mixed", [right, wrong, right, right])
    code, metrics = run(answerer, dataset, tmp_path / "mixed-out", "--min", "BLEU=0.9")
    assert code == 1 and metrics["summary"]["BLEU"] == pytest.approx(0.75)
    assert "BLEU is 0.7500, below the bound 0.9" in capsys.readouterr().err
    (drawn,) = (tmp_path / "mixed-out" / "worst").iterdir()
    assert drawn.name == "01-scene-01.png"
