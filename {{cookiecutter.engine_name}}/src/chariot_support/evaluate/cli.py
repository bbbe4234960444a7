"""Evaluate an engine on labelled data before it goes to Chariot: `python -m chariot_support.evaluate DATASET`.

Every image goes to the engine as Chariot sends it (a chariot-v2-kserve request with Chariot's `action` and a low
`score_threshold`), to a running engine (`--url`) or to one started here from this engine with the user's
MODEL_DIR. The answers are scored with valor-lite (`uv sync --group eval`); the results go to `--out`, and
`--min METRIC=VALUE` fails the run when a metric falls short (`--max` when an error rate, CER or WER, rises above).
Exit status: 0 done, 1 a bound was not met, 2 a usage mistake or a bad dataset, 3 the engine could not be reached or
answered wrongly.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

from chariot_support.client import cli as client
from chariot_support.dev.engine import (
    EngineFailed,
    default_model_id,
    engine_command,
    engine_url,
    model_task,
    task_of,
)
from chariot_support.evaluate.data import Dataset, Sample, load
from chariot_support.evaluate.metrics import Bound
from chariot_support.evaluate.text import LOWER_IS_BETTER, TEXT_METRICS
from chariot_support.model.tasks import TaskType
from chariot_support.settings import EngineSettings

DEFAULT_OUT = Path("evaluation")
# Low enough that the precision-recall curves run to the end: Chariot's default threshold would cut them at 0.5.
DEFAULT_SCORE_THRESHOLD = 0.001
# What Chariot asks each task for; classification asks for every label's score, which ROC AUC needs.
ACTIONS = {
    TaskType.IMAGE_CLASSIFICATION: "predict_proba",
    TaskType.OBJECT_DETECTION: "detect",
    TaskType.ORIENTED_OBJECT_DETECTION: "detect",
    TaskType.IMAGE_SEGMENTATION: "predict",
    TaskType.IMAGE_TEXT_TO_TEXT: "predict",
}
# The keys every result of a task must have, so a wrong answer is named here rather than failing while scoring.
RESULT_KEYS = {
    TaskType.IMAGE_CLASSIFICATION: {"label", "score"},
    TaskType.OBJECT_DETECTION: {"label", "score", "xmin", "xmax", "ymin", "ymax"},
    TaskType.ORIENTED_OBJECT_DETECTION: {"label", "score", "cx", "cy", "w", "h", "r"},
    TaskType.IMAGE_SEGMENTATION: {"label", "score", "contour"},
    TaskType.IMAGE_TEXT_TO_TEXT: {"prompt", "answer"},
}
# Tasks whose answers a score_threshold thins out; a classification keeps every label's score, as ROC AUC needs.
THRESHOLDED = (TaskType.OBJECT_DETECTION, TaskType.ORIENTED_OBJECT_DETECTION, TaskType.IMAGE_SEGMENTATION)
OUTPUT_NAMES = frozenset({"metrics.json", "report.md", "precision-recall.png", "confusion-matrix.png", "worst"})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m chariot_support.evaluate",
        description="Send a labelled dataset through the engine as Chariot does, and score the answers with valor-lite.",
        epilog="Exit status: 0 done, 1 a --min bound was not met, 2 a usage mistake or bad dataset, 3 an engine failure.",
    )
    p.add_argument(
        "dataset",
        type=Path,
        metavar="DATASET",
        help="COCO instances .json (Object Detection, Image Segmentation); a folder per class or a file,label .csv"
        " (Image Classification); a DOTA folder of images/ and labelTxt/ (Oriented Object Detection); a .jsonl of"
        ' {"image", "prompt", "answer"}, the prompt optional (Image Text to Text); or the folder that holds the file'
        " (its instances.json, labels.csv or prompts.jsonl, or its one file of that kind)",
    )
    p.add_argument("--url", help="a running engine's base URL; by default this engine is started on a free port")
    p.add_argument(
        "--engine",
        metavar="'MODULE [ARGS]'",
        help="what to start with `python -m` (default: this engine's package)",
    )
    p.add_argument("--model-dir", type=Path, help="MODEL_DIR for the engine started here (default: $MODEL_DIR)")
    p.add_argument(
        "--model-id",
        help="the id in /v2/models/m-<id>/infer/ (default: $CHARIOT_MODEL_ID, else the engine's DEFAULT_MODEL_ID, the"
        " id it was baked with)",
    )
    p.add_argument("--task", choices=[t.value for t in TaskType], help="the task type, if the engine does not say")
    p.add_argument("--images", type=Path, help="where a COCO file's images are (default: the file's folder)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the results' folder (default {DEFAULT_OUT}/)")
    p.add_argument(
        "--min",
        action="append",
        default=[],
        metavar="METRIC[@IOU][:LABEL]=VALUE",
        help="fail unless a metric reaches VALUE: mAP=0.5, mAP@0.75=0.4, AP:person=0.6, Accuracy=0.9, ExactMatch=0.8,"
        " ... (repeatable; at IoU 0.5 unless @IOU says otherwise)",
    )
    p.add_argument(
        "--max",
        action="append",
        default=[],
        metavar="METRIC=VALUE",
        help="fail if an error rate, where lower is better, rises above VALUE: CER=0.05, WER=0.2 (repeatable)",
    )
    p.add_argument(
        "--score-threshold",
        type=float,
        default=DEFAULT_SCORE_THRESHOLD,
        help=f"the score_threshold sent with each image (default {DEFAULT_SCORE_THRESHOLD})",
    )
    p.add_argument("--workers", type=int, default=4, help="requests in flight at once (default 4)")
    p.add_argument("--worst", type=int, default=8, help="how many of the worst images to draw (default 8)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for each answer (default 120)")
    client.add_header_option(p)
    return p


def parse_bounds(raw: Sequence[str], upper: bool = False) -> list[Bound]:
    """`METRIC[@IOU][:LABEL]=VALUE` strings as Bounds: `--min`s, or with `upper` `--max`es."""
    option = "--max" if upper else "--min"
    bounds = []
    for item in raw:
        name, sep, value = item.partition("=")
        name, _, label = name.partition(":")
        kind, at, iou = name.partition("@")
        try:
            least, threshold = float(value), float(iou) if at else None
        except ValueError:
            least = threshold = float("nan")
        if not sep or not kind.strip() or least != least or threshold != threshold:
            raise ValueError(
                f"{option} {item!r} must look like METRIC=VALUE, METRIC@IOU=VALUE or METRIC:LABEL=VALUE, e.g. mAP=0.5"
            )
        bounds.append(Bound(kind.strip(), threshold, label.strip() or None, least, upper))
    return bounds


def bound_problem(bounds: Sequence[Bound], task: TaskType) -> str | None:
    """Why `bounds` cannot apply to an evaluation of `task`, in one sentence, or None: a metric it has not, or an
    error rate under --min (or another metric under --max), which would pass what should fail."""
    names = metric_names(task)
    unknown = [b for b in bounds if b.metric not in names]
    if unknown:
        named = ", ".join(sorted({f"{b.option} {b.metric}" for b in unknown}))
        return f"{named}: {task.value} has {', '.join(sorted(names))}"
    for bound in bounds:
        rate = bound.metric in LOWER_IS_BETTER
        if bound.upper and not rate:
            return (
                f"--max {bound.metric}: higher is better for {bound.metric}; bound it with --min {bound.metric}=VALUE"
            )
        if rate and not bound.upper:
            return (
                f"--min {bound.metric}: {bound.metric} is an error rate, lower is better; bound it with"
                f" --max {bound.metric}=VALUE"
            )
    return None


def metric_names(task: TaskType) -> set[str]:
    """The metric types an evaluation of `task` can gate on: valor-lite's, and for text those computed here."""
    if task is TaskType.IMAGE_TEXT_TO_TEXT:
        # valor-lite's other text metrics need Hugging Face's Hub (ROUGE) or an LLM service; BLEU runs offline.
        return set(TEXT_METRICS)
    if task is TaskType.IMAGE_CLASSIFICATION:
        from valor_lite.classification import MetricType
    else:
        from valor_lite.object_detection import MetricType
    tables = {"Counts", "ConfusionMatrix", "ConfusionMatrixWithExamples", "Examples", "PrecisionRecallCurve"}
    return {m.value for m in MetricType} - tables


def ask(url: str, sample: Sample, task: TaskType, args: argparse.Namespace, headers) -> list[dict]:
    """The engine's results for one sample, checked to be of its task's format."""
    name = "image-0"
    body = client.build_request(
        [(name, sample.path.read_bytes())],
        action=ACTIONS[task],
        prompts=[sample.prompt] if sample.prompt else (),
        score_threshold=args.score_threshold if task in THRESHOLDED else None,
    )
    try:
        reply = client.post(url, body, timeout=args.timeout, headers=headers)
        (answer,) = client.answers_for([sample.path], [name], reply)
    except (client.ClientError, ValueError) as error:
        raise EngineFailed(f"{sample.uid}: {error}") from None
    wanted = RESULT_KEYS[task]
    for result in answer.results:
        if not isinstance(result, dict) or not wanted <= result.keys():
            raise EngineFailed(
                f"{sample.uid}: the engine answered {json.dumps(result)[:200]}, not an {task.value} result with"
                f" {', '.join(sorted(wanted))}"
            )
    return answer.results


def ask_all(url: str, dataset: Dataset, args: argparse.Namespace, headers) -> dict[str, list[dict]]:
    """Every sample's answers, `--workers` requests at a time, with a progress bar and the time left."""
    from tqdm import tqdm

    answers: dict[str, list[dict]] = {}
    with (
        ThreadPoolExecutor(max_workers=args.workers) as pool,
        tqdm(total=len(dataset.samples), unit="image", desc="evaluating", file=sys.stderr, mininterval=0.5) as bar,
    ):
        futures = {pool.submit(ask, url, s, dataset.task, args, headers): s for s in dataset.samples}
        for future in futures:
            future.add_done_callback(lambda _: bar.update())
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for future in pending:
            future.cancel()
        for future in done:
            if future.exception() is not None:
                raise future.exception()
            answers[futures[future].uid] = future.result()
    return answers


# --- output ------------------------------------------------------------------------------------------------------


def check_out(out: Path) -> None:
    """`--out` must be new, empty, or an earlier evaluation (which is replaced): never a folder of other files."""
    if out.exists() and (not out.is_dir() or any(p.name not in OUTPUT_NAMES for p in out.iterdir())):
        raise ValueError(f"--out {out} holds other files; name a new folder, or an earlier evaluation's, to replace")


def publish(staged: Path, out: Path) -> None:
    """Put the finished results in place of `out` in one step, so a failed run leaves no half-written folder."""
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        out.rename(old / out.name)
        staged.rename(out)
        shutil.rmtree(old)
    else:
        staged.rename(out)


def missing_extra() -> str | None:
    """What of the eval extra is not installed, as the sentence that says how to install it."""
    import importlib.util

    absent = [name for name in ("valor_lite", "matplotlib", "nltk", "tqdm") if importlib.util.find_spec(name) is None]
    if absent:
        return f"{', '.join(absent)} not installed: run `uv sync --group eval` in the engine's folder"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        missing = missing_extra()
        if missing:
            raise ValueError(missing)
        bounds = parse_bounds(args.min) + parse_bounds(args.max, upper=True)
        headers = client.parse_headers(args.header)
        if args.workers < 1 or args.worst < 0:
            raise ValueError("--workers must be at least 1 and --worst at least 0")
        if not 0.0 <= args.score_threshold <= 1.0:
            raise ValueError("--score-threshold must be between 0 and 1")
        check_out(args.out)
        if args.url and (args.engine or args.model_dir):
            raise ValueError("--engine and --model-dir are for an engine started here; with --url the engine runs")
        engine_settings = EngineSettings.from_env()  # the engine's own, as the engine it evaluates reads them
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    # The engine started here, or with --url this engine's package, which most likely is what runs there.
    command = engine_command(args)
    module = command[0] if command else None
    model_id = args.model_id or engine_settings.model_id.lower() or default_model_id(module) or "demo"

    def dataset_for(task: TaskType) -> Dataset:
        problem = bound_problem(bounds, task)
        if problem:
            raise ValueError(problem)
        return load(task, args.dataset, args.images)

    try:
        # Read the dataset before the engine starts when its task is known here, so a broken one is named at once.
        known = TaskType(args.task) if args.task else None if args.url else model_task(module)
        dataset = dataset_for(known) if known else None
        with engine_url(args) as (url, engine):
            task = TaskType(args.task) if args.task else task_of(url, model_id, headers)
            if dataset is None or dataset.task is not task:
                dataset = dataset_for(task)
            started = time.monotonic()
            answers = ask_all(client.infer_url(url, model_id), dataset, args, headers)
            seconds = time.monotonic() - started
    except ValueError as error:  # a bad dataset (DatasetError) or a bound the task has not
        print(f"error: {error}", file=sys.stderr)
        return 2
    except EngineFailed as error:
        print(f"error: {error}", file=sys.stderr)
        return 3
    return finish(args, engine, f"m-{model_id}", dataset, answers, bounds, seconds)


def finish(
    args, engine: str, model: str, dataset: Dataset, answers: dict[str, list[dict]], bounds, seconds: float
) -> int:
    """Score the answers, write the results, print the summary and apply the gate."""
    from chariot_support.evaluate import report as evaluate_report
    from chariot_support.evaluate.metrics import gate, score
    from chariot_support.model.labels import read_labels

    model_dir = args.model_dir or EngineSettings.from_env().model_dir
    declared: list[str] = []
    if not args.url and model_dir is not None:
        try:
            declared = read_labels(model_dir)
        except (OSError, ValueError):
            declared = []  # a model without a labels file: the labels it answers with are all that is known
    scores = score(dataset, answers, declared)
    about = {
        "engine": engine,
        "model": model,
        "task_type": dataset.task.value,
        "dataset": str(dataset.source),
        "images": len(dataset.samples),
        "requests": len(answers),
        "seconds": round(seconds, 3),
        "action": ACTIONS[dataset.task],
        "score_threshold": args.score_threshold if dataset.task in THRESHOLDED else None,
        "summary": scores.summary,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{args.out.name}.new-", dir=args.out.parent))
    umask = os.umask(0)
    os.umask(umask)
    staged.chmod(0o777 & ~umask)  # a folder like any other the user makes, not mkdtemp's private one
    try:
        written = evaluate_report.write(staged, dataset, answers, scores, about, args.worst)
        publish(staged, args.out)
    finally:
        if staged.exists():
            shutil.rmtree(staged)
    print(f"{dataset.task.value}: {len(dataset.samples)} images from {dataset.source} in {seconds:.2f} s")
    print("\n".join(evaluate_report.summary_lines(scores)))
    for note in scores.notes:
        print(f"\n{note}")
    if scores.dataset_only:
        print(f"\nonly in the dataset: {', '.join(scores.dataset_only)}")
    if scores.engine_only:
        print(f"only from the engine: {', '.join(sorted(scores.engine_only))}")
    print(f"\nwritten to {args.out}/: {', '.join(w for w in written if not w.startswith('worst/'))}", end="")
    drawn = sum(w.startswith("worst/") for w in written)
    print(f", and {drawn} of the worst images in worst/" if drawn else "")
    try:
        failures = gate(scores, bounds)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0
