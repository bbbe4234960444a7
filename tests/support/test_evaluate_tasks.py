"""`python -m chariot_support.evaluate` end to end for Image Classification, Oriented Object Detection, Image
Segmentation and Image Text to Text, each against the real demo engine of its task type over real sockets; and the
text metrics (exact match, CER, WER, BLEU) against values worked out by hand."""

import json
from pathlib import Path

import pytest
from evaluation_scenes import HEIGHT, WIDTH, class_csv, class_folders, coco, dota, scenes, single_colour
from pycocotools import mask as coco_mask

from chariot_support.evaluate import cli as evaluate
from chariot_support.evaluate.data import Dataset, Sample
from chariot_support.evaluate.metrics import Bound, gate, score
from chariot_support.evaluate.text import bleu_weights, text_score
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


def prompts(folder, answers: list[str], prompt: str | None = "Is there anything red?"):
    """JSON lines asking about each scene's red shape (every scene has exactly one), or asking nothing."""
    from evaluation_scenes import write_images

    write_images(folder, SCENES)
    lines = [
        {"image": scene.name, "answer": answer} | ({"prompt": prompt} if prompt is not None else {})
        for scene, answer in zip(SCENES, answers, strict=True)
    ]
    path = folder / "prompts.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_character_error_rate_is_edits_over_the_references_characters():
    misread = text_score("CHARI0T", ["CHARIOT"])  # one substitution in seven characters
    assert (misread.exact, misread.cer, misread.wer, misread.bleu.value) == (False, 1 / 7, 1.0, 0.0)
    assert text_score("Chariot", ["CHARIOT"]).cer == 6 / 7  # case counts
    assert text_score("yes", ["no"]).cer == 3 / 2  # two substitutions and an insertion over two characters
    spaced = text_score("  CHARIOT \n", ["CHARIOT"])  # whitespace at the ends is not read
    assert (spaced.exact, spaced.cer, spaced.bleu.value) == (True, 0.0, 1.0)


def test_word_error_rate_is_word_edits_over_the_references_words():
    assert text_score("the red cat", ["the red car"]).wer == 1 / 3  # a substituted word
    assert text_score("the red cat", ["the red car"]).cer == 1 / 11
    assert text_score("red car", ["the red car"]).wer == 1 / 3  # a missing word
    assert text_score("the big red car", ["the red car"]).wer == 1 / 3  # an extra word
    assert text_score("the  red\tcar", ["the red car"]).exact  # runs of whitespace are one space


def test_several_references_are_scored_against_the_nearest():
    assert text_score("colour", ["color", "colour"]).exact
    assert text_score("colr", ["colour", "color"]).cer == 1 / 5  # 1 edit of 5, not 2 of 6


def test_bleu_counts_ngrams_up_to_the_references_words():
    assert bleu_weights(["CHARIOT"]) == [1.0]
    assert bleu_weights(["a red car"]) == [1 / 3] * 3
    assert bleu_weights(["the red car is here", "car"]) == [1.0]  # the shortest reference
    assert bleu_weights(["the red car is here today"]) == [0.25] * 4
    # BLEU-4 would give the exact one-word answer 0: it has no 4-gram.
    assert text_score("CHARIOT", ["CHARIOT"]).bleu.value == 1.0
    # Unigrams 4/5, bigrams 3/4, trigrams 2/3, 4-grams 1/2, as long as the reference: their geometric mean.
    assert text_score("the red car is there", ["the red car is here"]).bleu.value == pytest.approx(0.2**0.25)


def text_dataset(*pairs: tuple[str, str]):
    """A dataset of (engine's answer, reference) pairs, asked nothing, and the engine's answers: no image is read."""
    samples = [Sample(f"{i}.png", Path(f"{i}.png"), 8, 8, (truth,), prompt="") for i, (_, truth) in enumerate(pairs)]
    answers = {s.uid: [{"prompt": "", "answer": said}] for s, (said, _) in zip(samples, pairs, strict=True)}
    return Dataset(TaskType.IMAGE_TEXT_TO_TEXT, Path("lines.jsonl"), samples, []), answers


def test_the_rates_sum_edits_over_every_references_length_and_bound_with_max():
    dataset, answers = text_dataset(("CHARI0T", "CHARIOT"), ("yes", "no"), ("OPEN", "OPEN"))
    scores = score(dataset, answers)
    # Characters: (1 + 3 + 0) edits over 7 + 2 + 4; words: (1 + 1 + 0) over 1 + 1 + 1; BLEU-1: 0, 0 and 1.
    assert scores.summary == pytest.approx({"ExactMatch": 1 / 3, "CER": 4 / 13, "WER": 2 / 3, "BLEU": 1 / 3})
    assert [uid for uid, _, _ in scores.worst] == ["1.png", "0.png"]  # the higher CER first; exact answers left out
    assert scores.worst[1][2] == "CER 0.14, WER 1.00, BLEU 0.00: answered 'CHARI0T', not 'CHARIOT'"
    assert gate(scores, [Bound("CER", None, None, 0.31, upper=True), Bound("ExactMatch", None, None, 0.3)]) == []
    assert gate(scores, [Bound("CER", None, None, 0.3, upper=True)]) == ["CER is 0.3077, above the bound 0.3"]
    assert gate(scores, [Bound("ExactMatch", None, None, 0.5)]) == ["ExactMatch is 0.3333, below the bound 0.5"]
    assert scores.notes[0].startswith(
        "For short answers (OCR lines, yes/no, counts, a few words) read ExactMatch and CER"
    )
    assert "2 answers share no n-gram" in scores.notes[-1]


@pytest.mark.parametrize(
    "bounds, message",
    [
        (["--min", "CER=0.9"], "--min CER: CER is an error rate, lower is better; bound it with --max CER=VALUE"),
        (["--max", "BLEU=0.5"], "--max BLEU: higher is better for BLEU; bound it with --min BLEU=VALUE"),
        (["--max", "ROUGE=0.5"], "--max ROUGE: Image Text to Text has BLEU, CER, ExactMatch, WER"),
    ],
)
def test_a_bound_the_wrong_way_round_is_a_usage_mistake(answerer, tmp_path, capsys, bounds, message):
    code, _ = run(answerer, prompts(tmp_path / "data", ["yes, 1 red region."] * 4), tmp_path / "out", *bounds)
    assert code == 2 and message in capsys.readouterr().err


def test_answers_are_scored_by_exact_match_error_rates_and_bleu(answerer, tmp_path, capsys):
    right = "yes, 1 red region."
    code, metrics = run(answerer, prompts(tmp_path / "right", [right] * 4), tmp_path / "right-out")
    assert code == 0 and metrics["summary"] == {"ExactMatch": 1.0, "CER": 0.0, "WER": 0.0, "BLEU": 1.0}
    assert [m["type"] for m in metrics["metrics"]] == ["ExactMatch", "CER", "WER"] + ["BLEU"] * 4
    assert [a["answer"] for a in metrics["answers"]] == [right] * 4
    report = (tmp_path / "right-out" / "report.md").read_text()
    assert "| CER | 0.0000 |" in report and "read ExactMatch and CER" in report
    wrong = "no, there is nothing red in it."
    dataset = prompts(tmp_path / "mixed", [right, wrong, right, right])
    bounds = ["--min", "ExactMatch=0.9", "--max", "CER=0.05", "--min", "BLEU=0.5"]
    code, metrics = run(answerer, dataset, tmp_path / "mixed-out", *bounds)
    cer = metrics["summary"]["CER"]
    assert code == 1 and metrics["summary"]["ExactMatch"] == 0.75 and 0.05 < cer < 1
    failed = capsys.readouterr().err
    assert "ExactMatch is 0.7500, below the bound 0.9" in failed and f"CER is {cer:.4f}, above the bound 0.05" in failed
    assert "BLEU" not in failed  # three of four answers right: BLEU 0.75
    (drawn,) = (tmp_path / "mixed-out" / "worst").iterdir()
    assert drawn.name == "01-scene-01.png"


def test_a_line_without_a_prompt_sends_the_picture_bare(answerer, tmp_path):
    about = "I found 1 red region, 1 green region and 1 blue region."
    code, metrics = run(answerer, prompts(tmp_path / "data", [about] * 4, prompt=None), tmp_path / "out")
    assert code == 0 and metrics["summary"]["ExactMatch"] == 1.0
    assert {a["prompt"] for a in metrics["answers"]} == {""}
