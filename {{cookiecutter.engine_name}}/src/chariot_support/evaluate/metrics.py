"""The engine's answers scored against a dataset with valor-lite, Striveworks' evaluation library: the metrics
Chariot's evaluations report, a table per label, the images it got most wrong, and the `--min` gate."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from chariot_support.evaluate.data import Box, Dataset, Mask, Quad, Sample
from chariot_support.evaluate.text import NORMALISATION, text_notes, text_score
from chariot_support.model.detectors import oriented_corners
from chariot_support.model.tasks import TaskType

# Chariot's defaults: a detection matches at IoU 0.5 and counts at score 0.5; AP is also averaged over COCO's
# IoUs 0.5, 0.55 ... 0.95. A classification's answer is its top label (hardmax), whatever its score.
IOU = 0.5
IOUS = [round(0.5 + 0.05 * step, 2) for step in range(10)]
SCORE = 0.5
CLASSIFICATION_SCORE = 0.0


@dataclass(frozen=True)
class Bound:
    """A `--min` (or, with `upper`, a `--max`): the metric type, the IoU it is taken at (None: IOU), the label (None:
    every label), and the least (greatest) value it may have."""

    metric: str
    iou: float | None
    label: str | None
    value: float
    upper: bool = False

    @property
    def option(self) -> str:
        return "--max" if self.upper else "--min"


@dataclass
class Scores:
    """What the report, the pictures and the gate need from one evaluation."""

    metrics: list  # valor-lite Metric objects, as computed
    summary: dict[str, float]  # headline metric, named as --min takes it -> value
    per_label: dict[str, dict[str, float]]  # label -> column -> value (counts are ints)
    worst: list[tuple[str, float, str]]  # (sample uid, how wrong, why), worst first
    engine_only: Counter = field(default_factory=Counter)  # labels only the engine answered with -> answers
    dataset_only: list[str] = field(default_factory=list)  # labels the dataset has that the engine never gave
    answers: list[dict] = field(default_factory=list)  # each text answer with its references and scores
    notes: list[str] = field(default_factory=list)  # how to read the numbers


def score(dataset: Dataset, answers: dict[str, list[dict]], engine_labels: Sequence[str] = ()) -> Scores:
    """Score `answers` (sample uid -> the engine's result dicts) against `dataset`. `engine_labels` are the labels
    the model declares, when known; labels are matched by name."""
    if dataset.task is TaskType.IMAGE_TEXT_TO_TEXT:
        return _text(dataset, answers)
    answered = Counter(r["label"] for results in answers.values() for r in results if "label" in r)
    known = set(dataset.labels)
    if dataset.task is TaskType.IMAGE_CLASSIFICATION:
        scores = _classification(dataset, answers)
    else:
        scores = _located(dataset, answers, known)
    scores.engine_only = Counter({label: n for label, n in answered.items() if label not in known})
    offered = set(answered) | set(engine_labels)
    scores.dataset_only = sorted(known - offered)
    for label in sorted(set(engine_labels) - known):
        scores.engine_only.setdefault(label, 0)
    return scores


# --- located tasks: boxes, oriented boxes, masks ---------------------------------------------------------------


def _located(dataset: Dataset, answers: dict[str, list[dict]], known: set[str]) -> Scores:
    from valor_lite.object_detection import Detection, Loader, MetricType

    loader = Loader.in_memory()
    for sample in dataset.samples:
        truths = [_truth(f"{sample.uid}#truth{i}", item) for i, item in enumerate(sample.truth)]
        # The dataset says nothing about labels it does not have: answers with them are neither right nor wrong.
        chosen = [r for r in answers[sample.uid] if r.get("label") in known]
        found = [p for i, r in enumerate(chosen) if (p := _prediction(f"{sample.uid}#answer{i}", r, sample))]
        if dataset.task is TaskType.IMAGE_SEGMENTATION:
            _crop_masks(truths + found)
            loader.add_bitmasks([Detection(uid=sample.uid, groundtruths=truths, predictions=found)])
        elif dataset.task is TaskType.ORIENTED_OBJECT_DETECTION:
            loader.add_polygons([Detection(uid=sample.uid, groundtruths=truths, predictions=found)])
        else:
            loader.add_bounding_boxes([Detection(uid=sample.uid, groundtruths=truths, predictions=found)])
    evaluator = _finalize(loader)
    metrics: list = []
    if evaluator is None:
        return Scores(metrics, {}, {}, [])
    computed = evaluator.compute_precision_recall(iou_thresholds=IOUS, score_thresholds=[SCORE])
    for each in computed.values():
        metrics.extend(each)
    metrics.extend(evaluator.compute_confusion_matrix(iou_thresholds=[IOU], score_thresholds=[SCORE]))
    examples = evaluator.compute_examples(iou_thresholds=[IOU], score_thresholds=[SCORE])

    def value(kind: MetricType, label: str | None = None, iou: Any = IOU) -> float:
        for metric in computed.get(kind, []):
            p = metric.parameters
            if p.get("label") == label and p.get("iou_threshold", iou) == iou:
                return float(metric.value)
        return math.nan

    summary = {
        "mAP": value(MetricType.mAP),
        "mAP@0.75": value(MetricType.mAP, iou=0.75),
        "mAPAveragedOverIOUs": value(MetricType.mAPAveragedOverIOUs),
        "mAR": value(MetricType.mAR),
    }
    per_label = {}
    counts = {
        m.parameters["label"]: m.value for m in computed[MetricType.Counts] if m.parameters["iou_threshold"] == IOU
    }
    for label in sorted(counts):
        per_label[label] = {
            "AP": value(MetricType.AP, label),
            "APAveragedOverIOUs": value(MetricType.APAveragedOverIOUs, label),
            "Precision": value(MetricType.Precision, label),
            "Recall": value(MetricType.Recall, label),
            "F1": value(MetricType.F1, label),
            **{key: int(counts[label][key]) for key in ("tp", "fp", "fn")},
        }
    worst = []
    for example in examples:
        v = example.value
        missed, extra = len(v["false_negatives"]), len(v["false_positives"])
        if missed or extra:
            why = [f"{missed} missed"] * bool(missed) + [f"{extra} wrong or extra answer{'s' * (extra > 1)}"] * bool(
                extra
            )
            worst.append((v["datum_id"], float(missed + extra), ", ".join(why)))
    worst.sort(key=lambda w: -w[1])
    return Scores(metrics, summary, per_label, worst)


def _finalize(loader):
    from valor_lite.exceptions import EmptyCacheError

    try:
        return loader.finalize()
    except EmptyCacheError:  # no ground truth and no answer anywhere: nothing to score
        return None


def _truth(uid: str, item: Box | Quad | Mask):
    from shapely.geometry import Polygon as Shape
    from valor_lite.object_detection import Bitmask, BoundingBox, Polygon

    if isinstance(item, Box):
        return BoundingBox(uid=uid, xmin=item.xmin, xmax=item.xmax, ymin=item.ymin, ymax=item.ymax, labels=[item.label])
    if isinstance(item, Quad):
        return Polygon(uid=uid, shape=Shape(item.corners), labels=[item.label])
    return Bitmask(uid=uid, mask=item.mask, labels=[item.label])


def _prediction(uid: str, result: dict, sample: Sample):
    """A valor-lite prediction from one result dict; None for a region that covers no pixel."""
    from shapely.geometry import Polygon as Shape
    from valor_lite.object_detection import Bitmask, BoundingBox, Polygon

    labels, scores = [result["label"]], [float(result["score"])]
    if "contour" in result:
        mask = np.zeros((sample.height, sample.width), np.uint8)
        polygons = [np.round([(p["x"], p["y"]) for p in part]).astype(np.int32) for part in result["contour"] if part]
        cv2.fillPoly(mask, polygons, 1)
        return Bitmask(uid=uid, mask=mask.astype(bool), labels=labels, scores=scores) if mask.any() else None
    if "cx" in result:
        return Polygon(
            uid=uid, shape=Shape(oriented_corners(result, sample.width, sample.height)), labels=labels, scores=scores
        )
    box = {key: float(result[key]) for key in ("xmin", "xmax", "ymin", "ymax")}
    return BoundingBox(uid=uid, **box, labels=labels, scores=scores)


def _crop_masks(annotations: list) -> None:
    """Cut every mask of one image down to the box around all of them: IoUs are unchanged, and valor-lite holds a
    pair of masks per (truth, answer) pair at once, so the smaller they are the less memory that takes."""
    masks = [a.mask for a in annotations]
    if not masks:
        return
    rows = np.flatnonzero(np.logical_or.reduce([m.any(axis=1) for m in masks]))
    columns = np.flatnonzero(np.logical_or.reduce([m.any(axis=0) for m in masks]))
    window = (slice(rows[0], rows[-1] + 1), slice(columns[0], columns[-1] + 1))
    for annotation in annotations:
        annotation.mask = np.ascontiguousarray(annotation.mask[window])


# --- classification --------------------------------------------------------------------------------------------


def _classification(dataset: Dataset, answers: dict[str, list[dict]]) -> Scores:
    from valor_lite.classification import Classification, Loader, MetricType

    loader = Loader.in_memory()
    items = []
    worst = []
    # A label an engine leaves out of an answer (a top-k engine) scored 0 there: ROC AUC needs every label's score.
    every = sorted(set(dataset.labels) | {r["label"] for results in answers.values() for r in results})
    for sample in dataset.samples:
        results = answers[sample.uid]
        truth = sample.truth[0]
        given = {r["label"]: float(r["score"]) for r in results}
        items.append(
            Classification(
                uid=sample.uid,
                groundtruth=truth,
                predictions=every,
                scores=[given.get(label, 0.0) for label in every],
            )
        )
        top = max(results, key=lambda r: r["score"], default=None)
        if top is None or top["label"] != truth:
            said = f"{top['label']} at {top['score']:.2f}" if top else "no answer"
            worst.append((sample.uid, float(top["score"]) if top else 1.0, f"is {truth}, the engine said {said}"))
    loader.add_data(items)
    evaluator = loader.finalize()
    computed = evaluator.compute_precision_recall(score_thresholds=[CLASSIFICATION_SCORE])
    computed.update(evaluator.compute_rocauc())
    metrics = [m for each in computed.values() for m in each]
    metrics.extend(evaluator.compute_confusion_matrix(score_thresholds=[CLASSIFICATION_SCORE]))

    def value(kind: MetricType, label: str | None = None) -> float:
        return next((float(m.value) for m in computed.get(kind, []) if m.parameters.get("label") == label), math.nan)

    summary = {"Accuracy": value(MetricType.Accuracy), "mROCAUC": value(MetricType.mROCAUC)}
    labels = sorted({m.parameters["label"] for m in computed[MetricType.Precision]})
    columns = (MetricType.Precision, MetricType.Recall, MetricType.F1, MetricType.ROCAUC)
    per_label = {label: {kind.value: value(kind, label) for kind in columns} for label in labels}
    worst.sort(key=lambda w: -w[1])
    return Scores(metrics, summary, per_label, worst)


# --- prompts and answers ---------------------------------------------------------------------------------------


def _text(dataset: Dataset, answers: dict[str, list[dict]]) -> Scores:
    from valor_lite.text_generation import Metric

    scored, rows, worst = [], [], []
    for sample in dataset.samples:
        asked = sample.prompt or ""
        said = next((r["answer"] for r in answers[sample.uid] if r.get("prompt") == asked), "")
        got = text_score(said, sample.truth, asked)
        got.bleu.parameters["datum_uid"] = sample.uid
        scored.append(got)
        bleu = float(got.bleu.value)
        rows.append(
            {
                "datum_uid": sample.uid,
                "prompt": asked,
                "answer": said,
                "references": list(sample.truth),
                "ExactMatch": got.exact,
                "CER": got.cer,
                "WER": got.wer,
                "BLEU": bleu,
                "BLEU_weights": got.bleu.parameters["weights"],
            }
        )
        if not got.exact:
            why = f"CER {got.cer:.2f}, WER {got.wer:.2f}, BLEU {bleu:.2f}: answered {said!r}, not {sample.truth[0]!r}"
            worst.append((sample.uid, got.cer, why))
    exact, char_edits, chars = (
        sum(t.exact for t in scored),
        sum(t.char_edits for t in scored),
        sum(t.chars for t in scored),
    )
    word_edits, words = sum(t.word_edits for t in scored), sum(t.words for t in scored)
    totals = [
        Metric(type="ExactMatch", value=exact / len(scored), parameters={"exact": exact, "answers": len(scored)}),
        Metric(type="CER", value=char_edits / chars, parameters={"edits": char_edits, "reference_characters": chars}),
        Metric(type="WER", value=word_edits / words, parameters={"edits": word_edits, "reference_words": words}),
    ]
    for metric in totals:
        metric.parameters["normalisation"] = NORMALISATION
    summary = {m.type: float(m.value) for m in totals}
    summary["BLEU"] = statistics.fmean(r["BLEU"] for r in rows)
    worst.sort(key=lambda w: -w[1])
    metrics = totals + [t.bleu for t in scored]
    return Scores(metrics, summary, {}, worst, answers=rows, notes=text_notes(rows))


# --- the gate ----------------------------------------------------------------------------------------------------


def metric_types(scores: Scores) -> list[str]:
    return sorted({str(getattr(m.type, "value", m.type)) for m in scores.metrics})


def gate(scores: Scores, bounds: Sequence[Bound]) -> list[str]:
    """Each bound not met, as a sentence naming the metric, its value and the bound: a `--min` the metric falls
    below, a `--max` (error rates) it rises above. A per-label metric without a label must hold for every label; a
    metric given once per answer (BLEU) is averaged. The metric is taken at IoU 0.5 unless the bound names another."""
    failures = []
    for bound in bounds:
        kind, label = bound.metric, bound.label
        name = kind if bound.iou is None else f"{kind}@{bound.iou:g}"
        iou = IOU if bound.iou is None else bound.iou
        same = [m for m in scores.metrics if str(getattr(m.type, "value", m.type)) == kind]
        if not same:
            raise ValueError(
                f"{bound.option} {kind}: this evaluation has no such metric; it has {', '.join(metric_types(scores))}"
            )
        if bound.iou is not None and "iou_threshold" not in same[0].parameters:
            raise ValueError(f"{bound.option} {name}: {kind} is not taken at one IoU; leave out @{bound.iou:g}")
        chosen = [m for m in same if m.parameters.get("iou_threshold", iou) == iou]
        if not chosen:
            raise ValueError(f"{bound.option} {name}: {kind} is computed at IoU {', '.join(map(str, IOUS))}")
        if not isinstance(chosen[0].value, (int, float)):
            raise ValueError(
                f"{bound.option} {kind}: {kind} is not a single number; choose one of the rates or averages"
            )
        labelled = [m for m in chosen if "label" in m.parameters]
        if label is not None:
            chosen = [m for m in labelled if m.parameters["label"] == label]
            if not chosen:
                known = sorted({m.parameters["label"] for m in labelled})
                raise ValueError(
                    f"{bound.option} {name}:{label}: no label {label!r} here; the labels are {', '.join(known)}"
                )
        if labelled and label is None:
            found = [(m.parameters["label"], float(m.value)) for m in chosen]
        else:
            found = [(label, statistics.fmean(float(m.value) for m in chosen))]
        for which, got in found:
            within = got <= bound.value if bound.upper else got >= bound.value  # NaN is never within
            if not within:
                where = f"{name} for {which}" if which else name
                side = "above" if bound.upper else "below"
                failures.append(f"{where} is {got:.4f}, {side} the bound {bound.value:g}")
    return failures
