"""What an evaluation leaves in its output folder: metrics.json (valor-lite's metrics as their `to_dict()` writes
them, and for text each answer with its scores), report.md (a table per label, how to read the numbers), the
precision-recall curves and confusion matrix as pictures, and the images the engine got most wrong, drawn with the
ground truth and the engine's answers side by side."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from chariot_support.client import cli as client
from chariot_support.client import drawing
from chariot_support.evaluate.data import Dataset, Sample, truth_results
from chariot_support.evaluate.metrics import IOU, SCORE, Scores

HEADINGS = {"tp": "TP", "fp": "FP", "fn": "FN"}


def write(
    out: Path, dataset: Dataset, answers: dict[str, list[dict]], scores: Scores, about: dict[str, Any], worst: int
) -> list[str]:
    """Write everything into `out` (an empty folder); returns the names of the files written."""
    written = ["metrics.json", "report.md"]
    document = {**about, "labels": labels_section(scores), "metrics": [m.to_dict() for m in scores.metrics]}
    if scores.answers:
        document["answers"] = scores.answers
    (out / "metrics.json").write_text(json.dumps(document, indent=1, default=_plain) + "\n")
    pictures = []
    curves = [m for m in scores.metrics if _kind(m) == "PrecisionRecallCurve" and m.parameters["iou_threshold"] == IOU]
    if curves:
        _precision_recall(out / "precision-recall.png", curves, scores.per_label)
        pictures.append("precision-recall.png")
    matrices = [m for m in scores.metrics if _kind(m) == "ConfusionMatrix"]
    if matrices:
        _confusion(out / "confusion-matrix.png", matrices[0].value)
        pictures.append("confusion-matrix.png")
    by_uid = {s.uid: s for s in dataset.samples}
    if scores.worst and worst:
        (out / "worst").mkdir()
        for rank, (uid, _, why) in enumerate(scores.worst[:worst], start=1):
            name = f"worst/{rank:02d}-{Path(by_uid[uid].path).stem}.png"
            client.write_image(out / name, side_by_side(by_uid[uid], answers[uid], why))
            pictures.append(name)
    (out / "report.md").write_text(markdown(dataset, scores, about, pictures))
    return written + pictures


def labels_section(scores: Scores) -> dict[str, Any]:
    return {
        "only_in_dataset": scores.dataset_only,
        "only_from_engine": dict(sorted(scores.engine_only.items())),
    }


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _kind(metric: Any) -> str:
    return str(getattr(metric.type, "value", metric.type))


# --- tables ------------------------------------------------------------------------------------------------------


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return "-" if math.isnan(value) else f"{value:.4f}"


def rows(scores: Scores) -> tuple[list[str], list[list[str]]]:
    """The table per label: a heading row and one row per label, numbers formatted."""
    columns = list(next(iter(scores.per_label.values()), {}))
    heading = ["label", *(HEADINGS.get(c, c) for c in columns)]
    return heading, [[label, *(_number(values[c]) for c in columns)] for label, values in scores.per_label.items()]


def summary_lines(scores: Scores) -> list[str]:
    """The headline figures and the per-label table as aligned text, as the command prints them."""
    width = max(map(len, scores.summary), default=0) + 2
    lines = [f"{name:<{width}}{_number(value):>6}" for name, value in scores.summary.items()]
    heading, body = rows(scores)
    if body:
        widths = [max(len(r[i]) for r in [heading, *body]) for i in range(len(heading))]
        lines.append("")
        for row in [heading, *body]:
            cells = [row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))]
            lines.append("  ".join(cells))
    return lines


def markdown(dataset: Dataset, scores: Scores, about: dict[str, Any], pictures: Sequence[str]) -> str:
    threshold = about["score_threshold"]
    asked = f"action `{about['action']}`" + (f" and score_threshold {threshold:g}" if threshold is not None else "")
    parts = [
        f"# Evaluation of {about['engine']} on {dataset.source.name}",
        "",
        f"{about['task_type']}, {len(dataset.samples)} images, {about['requests']} requests in {about['seconds']:.2f} s;"
        f" answers asked with {asked}.",
    ]
    if dataset.task.value not in ("Image Classification", "Image Text to Text"):
        parts.append(f"A detection matches at IoU {IOU}; precision, recall and counts take answers scoring {SCORE}+.")
    parts += ["", "| metric | value |", "| --- | --- |"]
    parts += [f"| {name} | {_number(value)} |" for name, value in scores.summary.items()]
    if scores.notes:
        parts += ["", "## Reading these numbers", ""] + [f"- {note}" for note in scores.notes]
    heading, body = rows(scores)
    if body:
        parts += ["", "## Per label", "", "| " + " | ".join(heading) + " |", "|" + " --- |" * len(heading)]
        parts += ["| " + " | ".join(row) + " |" for row in body]
    if dataset.task.value != "Image Text to Text":  # answers have no labels
        parts += ["", "## Labels", ""]
        if scores.dataset_only:
            parts.append(
                f"- Only in the dataset (the engine never answered with them): {', '.join(scores.dataset_only)}"
            )
        if scores.engine_only:
            listed = ", ".join(f"{label} ({n} answers)" for label, n in sorted(scores.engine_only.items()))
            kept = (
                "scored as wrong answers" if dataset.task.value == "Image Classification" else "left out of the scores"
            )
            parts.append(f"- Only from the engine ({kept}): {listed}")
        if not scores.dataset_only and not scores.engine_only:
            parts.append("- The engine and the dataset know the same labels.")
        parts += [f"- {note}" for note in dataset.notes]
    for picture in pictures:
        parts += ["", f"![{picture}]({picture})"]
    return "\n".join(parts) + "\n"


# --- pictures ----------------------------------------------------------------------------------------------------


def _figure():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a CI machine
    from matplotlib import pyplot

    return pyplot


def _precision_recall(path: Path, curves: Sequence[Any], per_label: dict[str, dict[str, float]]) -> None:
    pyplot = _figure()
    figure, axes = pyplot.subplots(figsize=(5.5, 4.2), dpi=100)
    recall = np.linspace(0.0, 1.0, 101)  # valor-lite interpolates precision at 101 recall points, as COCO does
    for curve in sorted(curves, key=lambda c: c.parameters["label"]):
        label = curve.parameters["label"]
        ap = per_label.get(label, {}).get("AP", math.nan)
        axes.plot(recall, curve.value["precisions"], label=f"{label} (AP {ap:.2f})", linewidth=1.8)
    axes.set(xlabel="recall", ylabel="precision", xlim=(0, 1.01), ylim=(0, 1.05))
    axes.set_title(f"Precision-recall at IoU {IOU}")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower left", fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def _confusion(path: Path, value: dict) -> None:
    """Ground truth down, answers across; the last row holds answers that matched nothing, the last column ground
    truth nothing matched."""
    matrix = value["confusion_matrix"]
    labels = sorted(set(matrix) | {p for row in matrix.values() for p in row})
    missed = value.get("unmatched_ground_truths", {})
    extra = value.get("unmatched_predictions")
    columns = labels + ["(missed)"] * bool(missed)
    lines = labels + ["(nothing there)"] * (extra is not None)
    grid = np.zeros((len(lines), len(columns)), np.int64)
    for i, truth in enumerate(labels):
        for j, answer in enumerate(labels):
            grid[i, j] = matrix.get(truth, {}).get(answer, 0)
        if missed:
            grid[i, -1] = missed.get(truth, 0)
    if extra is not None:
        for j, answer in enumerate(labels):
            grid[-1, j] = extra.get(answer, 0)
    pyplot = _figure()
    side = max(3.5, 0.55 * len(columns) + 1.8)
    figure, axes = pyplot.subplots(figsize=(side + 0.8, side), dpi=100)
    axes.imshow(grid, cmap="Blues")
    axes.set_xticks(range(len(columns)), columns, rotation=45, ha="right")
    axes.set_yticks(range(len(lines)), lines)
    axes.set(xlabel="engine's answer", ylabel="ground truth")
    top = grid.max() or 1
    for (i, j), count in np.ndenumerate(grid):
        axes.text(j, i, str(count), ha="center", va="center", color="white" if count > top / 2 else "black")
    axes.set_title("Confusion matrix")
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def side_by_side(sample: Sample, results: Sequence[dict], why: str) -> np.ndarray:
    """The image twice: the ground truth drawn on the left, the engine's answers (those scoring SCORE or more) on the
    right, each under a caption, with why it is here written below."""
    pixels = client.read_image(sample.path)
    if all(r.keys() == {"label", "score"} for r in results):  # a classification: its top label is its answer
        shown = sorted(results, key=lambda r: -r["score"])[:1]
    else:
        shown = [r for r in results if r.get("score", 1.0) >= SCORE]
    left = _captioned(drawing.draw(pixels, truth_results(sample)), "ground truth")
    right = _captioned(drawing.draw(pixels, shown), "engine")
    height = max(left.shape[0], right.shape[0])
    left, right = (np.vstack([p, np.full((height - p.shape[0], p.shape[1], 3), 32, np.uint8)]) for p in (left, right))
    gap = np.full((height, 8, 3), 255, np.uint8)
    joined = np.hstack([left, gap, right])
    return _captioned(joined, f"{sample.uid}: {why}", below=True)


def _captioned(pixels: np.ndarray, text: str, *, below: bool = False) -> np.ndarray:
    """`pixels` with `text` in a dark band above (or below), wrapped to the picture's width."""
    scale = max(0.4, min(pixels.shape[1] / 900, 1.0))
    lines = drawing.wrap(text, scale, pixels.shape[1] - 12) or [""]
    (_, height), base = cv2.getTextSize("Ag", drawing.FONT, scale, 1)
    step = height + base + 6
    band = np.full((step * len(lines) + 6, pixels.shape[1], 3), 32, np.uint8)
    for index, line in enumerate(lines):
        cv2.putText(band, line, (6, step * index + height + 6), drawing.FONT, scale, (255, 255, 255), 1, cv2.LINE_AA)
    return np.vstack([pixels, band] if below else [band, pixels])
