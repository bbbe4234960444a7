"""`python -m chariot_support.evaluate` on Object Detection, end to end against the demo engine over real sockets:
the scores on generated scenes with known shapes, how they fall as the annotations move, agreement with
pycocotools, the gate, the outputs, and the engine it starts itself."""

import base64
import contextlib
import http.server
import io
import json
import math
import threading
import urllib.request

import cv2
import pytest
from evaluation_scenes import coco, scenes
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from chariot_support.client import cli as client
from chariot_support.evaluate import cli as evaluate
from chariot_support.evaluate.data import Box, Dataset, Sample
from chariot_support.evaluate.metrics import score
from chariot_support.model.tasks import TaskType

SCENES = scenes(6)


@pytest.fixture(scope="module")
def engine(demo_engine):
    return demo_engine(TaskType.OBJECT_DETECTION)


def run(engine, dataset, out, *extra) -> tuple[int, dict]:
    code = evaluate.main([str(dataset), "--url", engine.url, "--out", str(out), *extra])
    metrics = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").exists() else {}
    return code, metrics


def test_the_demo_finds_every_shape_of_generated_scenes(engine, tmp_path, capsys):
    code, metrics = run(engine, coco(tmp_path / "data", SCENES), tmp_path / "out")
    assert code == 0
    assert metrics["summary"]["mAP"] == 1.0
    assert metrics["task_type"] == "Object Detection" and metrics["action"] == "detect"
    kinds = {m["type"] for m in metrics["metrics"]}
    assert {"AP", "mAP", "mAPAveragedOverIOUs", "PrecisionRecallCurve", "ConfusionMatrix", "Counts"} <= kinds
    counts = [m for m in metrics["metrics"] if m["type"] == "Counts" and m["parameters"]["iou_threshold"] == 0.5]
    assert {m["parameters"]["label"]: m["value"] for m in counts} == {
        label: {"tp": 6, "fp": 0, "fn": 0} for label in ("red", "green", "blue")
    }
    printed = capsys.readouterr().out
    assert printed.splitlines()[1].split() == ["mAP", "1.0000"] and "written to" in printed
    for label in ("red", "green", "blue"):
        assert any(line.split()[:2] == [label, "1.0000"] for line in printed.splitlines()), printed


def test_the_scores_fall_as_the_annotations_move(engine, tmp_path):
    figures = []
    for shift in (0, 4, 10, 40):
        _, metrics = run(engine, coco(tmp_path / f"data-{shift}", SCENES, shift=shift), tmp_path / f"out-{shift}")
        figures.append((metrics["summary"]["mAP"], metrics["summary"]["mAPAveragedOverIOUs"]))
    at_half = [f[0] for f in figures]
    averaged = [f[1] for f in figures]
    # Shapes 44-90 px wide: 4 and 10 px keep IoU above 0.5, 40 px takes every one below it.
    assert at_half == [1.0, 1.0, 1.0, 0.0], figures
    assert averaged[0] > averaged[1] > averaged[2] > averaged[3] == 0.0, figures


def pycocotools_figures(dataset, detections: list[dict]) -> tuple[list[float], dict[str, float]]:
    truth = COCO(str(dataset))
    found = truth.loadRes(detections)
    check = COCOeval(truth, found, "bbox")
    check.evaluate()
    check.accumulate()
    check.summarize()
    per_label = {}
    for k, category in enumerate(check.params.catIds):
        curve = check.eval["precision"][0, :, k, 0, 2]  # IoU 0.5, every recall point, all areas, 100 detections
        per_label[truth.cats[category]["name"]] = float(curve.mean())
    return list(check.stats), per_label


def test_pycocotools_agrees_with_the_figures_on_imperfect_annotations(engine, tmp_path):
    """Annotations with their edges moved up to 9 px at random, one shape left unlabelled and one label with nothing
    there: AP at each IoU, averaged AP and AR, overall and per label, as pycocotools computes them."""
    dataset = coco(tmp_path / "data", SCENES, jitter=9.0)
    document = json.loads(dataset.read_text())
    dropped = document["annotations"].pop(4)
    document["annotations"].append({**dropped, "id": 999, "image_id": 1, "bbox": [140, 200, 30, 30]})
    dataset.write_text(json.dumps(document))
    code, metrics = run(engine, dataset, tmp_path / "out")
    assert code == 0
    # The engine's own answers, asked independently of the command, for pycocotools.
    detections = []
    for image in document["images"]:
        body = client.build_request([("image-0", (dataset.parent / image["file_name"]).read_bytes())], action="detect")
        (answer,) = client.post(client.infer_url(engine.url, "demo"), body)["outputs"]
        for r in answer["data"][0]:
            category = {"red": 1, "green": 2, "blue": 3}[r["label"]]
            box = [r["xmin"], r["ymin"], r["xmax"] - r["xmin"], r["ymax"] - r["ymin"]]
            detections.append({"image_id": image["id"], "category_id": category, "bbox": box, "score": r["score"]})
    stats, per_label = pycocotools_figures(dataset, detections)
    summary = metrics["summary"]
    assert 0.3 < summary["mAP@0.75"] < 0.99, summary  # the jitter moved some boxes below IoU 0.75, not all
    assert summary["mAPAveragedOverIOUs"] == pytest.approx(stats[0], abs=1e-3)
    assert summary["mAP"] == pytest.approx(stats[1], abs=1e-3)
    assert summary["mAP@0.75"] == pytest.approx(stats[2], abs=1e-3)
    assert summary["mAR"] == pytest.approx(stats[8], abs=1e-3)
    ap = {
        m["parameters"]["label"]: m["value"]
        for m in metrics["metrics"]
        if m["type"] == "AP" and m["parameters"]["iou_threshold"] == 0.5
    }
    assert ap == pytest.approx(per_label, abs=1e-3)


def scored_both_ways(tmp_path, answers: list[dict], labels: list[str]) -> tuple[dict, list[float]]:
    """One 100x100 image whose one `red` box is at (10, 10)-(50, 50), with `answers` to it: the engine's summary and
    pycocotools' stats for the same answers."""
    truth = Box("red", 10, 10, 50, 50)
    dataset = Dataset(
        TaskType.OBJECT_DETECTION, tmp_path / "x.json", [Sample("a", tmp_path / "a.png", 100, 100, (truth,))], labels
    )
    summary = score(dataset, {"a": answers}).summary
    ids = {label: i for i, label in enumerate(labels, start=1)}
    document = {
        "images": [{"id": 1, "width": 100, "height": 100, "file_name": "a.png"}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 40, 40], "area": 1600, "iscrowd": 0}
        ],
        "categories": [{"id": i, "name": label} for label, i in ids.items()],
    }
    (tmp_path / "x.json").write_text(json.dumps(document))
    found = [
        {"image_id": 1, "category_id": ids[a["label"]], "score": a["score"], "bbox": [x0, y0, x1 - x0, y1 - y0]}
        for a in answers
        for x0, y0, x1, y1 in [(a["xmin"], a["ymin"], a["xmax"], a["ymax"])]
    ]
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints as it goes
        coco_truth = COCO(str(tmp_path / "x.json"))
        check = COCOeval(coco_truth, coco_truth.loadRes(found), "bbox")
        check.evaluate()
        check.accumulate()
        check.summarize()
    return summary, list(check.stats)


def test_the_figures_differ_from_pycocotools_as_the_evaluation_page_says(tmp_path):
    """docs/evaluation.md: mAP is pycocotools' AP50; mAR counts answers scoring at least 0.5, where pycocotools' AR
    counts all; a label with answers and no ground truth is averaged in, where pycocotools leaves it out."""
    right = {"label": "red", "xmin": 10, "ymin": 10, "xmax": 50, "ymax": 50}
    summary, stats = scored_both_ways(tmp_path, [{**right, "score": 0.4}], ["red"])
    assert summary["mAP"] == pytest.approx(stats[1]) == pytest.approx(1.0)  # AP50, whatever the score
    assert summary["mAR"] == 0.0 and stats[8] == pytest.approx(1.0)  # below 0.5: no recall here, full there
    summary, stats = scored_both_ways(tmp_path, [{**right, "score": 0.5}], ["red"])
    assert summary["mAR"] == pytest.approx(stats[8]) == pytest.approx(1.0)  # at least 0.5 counts
    green = {"label": "green", "score": 0.9, "xmin": 60, "ymin": 60, "xmax": 90, "ymax": 90}
    summary, stats = scored_both_ways(tmp_path, [{**right, "score": 0.9}, green], ["red", "green"])
    assert summary["mAP"] == pytest.approx(0.5) and summary["mAR"] == pytest.approx(0.5)
    assert stats[1] == pytest.approx(1.0) and stats[8] == pytest.approx(1.0)


def test_the_gate_names_the_metric_its_value_and_the_bound(engine, tmp_path, capsys):
    dataset = coco(tmp_path / "data", SCENES, shift=10)
    code, metrics = run(engine, dataset, tmp_path / "passes", "--min", "mAP=0.5", "--min", "AP:red=0.9")
    assert code == 0, capsys.readouterr().err
    code, metrics = run(engine, dataset, tmp_path / "fails", "--min", "mAP=0.5", "--min", "mAPAveragedOverIOUs=0.9")
    assert code == 1
    value = metrics["summary"]["mAPAveragedOverIOUs"]
    assert f"mAPAveragedOverIOUs is {value:.4f}, below the bound 0.9" in capsys.readouterr().err
    code, _ = run(engine, dataset, tmp_path / "per-label", "--min", "APAveragedOverIOUs=0.99")
    err = capsys.readouterr().err
    assert code == 1 and all(f"APAveragedOverIOUs for {label} is" in err for label in ("red", "green", "blue")), err


def test_the_gate_takes_a_metric_at_another_iou(engine, tmp_path, capsys):
    """Moved 10 px, the boxes still match at IoU 0.5 but not all at 0.75: mAP@0.75 is the lower figure."""
    dataset = coco(tmp_path / "data", SCENES, shift=10)
    code, metrics = run(engine, dataset, tmp_path / "out", "--min", "mAP=0.99", "--min", "mAP@0.75=0.99")
    at = metrics["summary"]["mAP@0.75"]
    assert code == 1 and metrics["summary"]["mAP"] == 1.0 and at < 0.99
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"FAILED: mAP@0.75 is {at:.4f}, below the bound 0.99"


@pytest.mark.parametrize(
    "bound, message",
    [
        ("mAP@0.52=0.5", "--min mAP@0.52: mAP is computed at IoU 0.5, 0.55, 0.6"),
        ("mAR@0.5=0.5", "--min mAR@0.5: mAR is not taken at one IoU; leave out @0.5"),
    ],
)
def test_an_iou_the_metric_has_not_is_named(engine, tmp_path, capsys, bound, message):
    code, _ = run(engine, coco(tmp_path / "data", SCENES[:1]), tmp_path / "out", "--min", bound)
    assert code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize(
    "bound, message",
    [
        ("mAP", "must look like METRIC=VALUE"),
        ("mAP=high", "must look like METRIC=VALUE"),
        ("mAP@high=0.5", "METRIC@IOU=VALUE"),
        ("Accuracy=0.5", "--min Accuracy: Object Detection has"),
    ],
)
def test_a_wrong_bound_is_a_usage_mistake_before_any_request(engine, tmp_path, capsys, bound, message):
    out = tmp_path / "out"
    code, _ = run(engine, coco(tmp_path / "data", SCENES[:1]), out, "--min", bound)
    assert code == 2 and message in capsys.readouterr().err
    assert not out.exists()


def test_a_label_the_gate_does_not_know_is_named(engine, tmp_path, capsys):
    code, _ = run(engine, coco(tmp_path / "data", SCENES[:1]), tmp_path / "out", "--min", "AP:purple=0.5")
    assert code == 2 and "no label 'purple' here; the labels are blue, green, red" in capsys.readouterr().err


def test_the_outputs_are_there_and_readable(engine, tmp_path):
    dataset = coco(tmp_path / "data", SCENES, shift=30)  # most boxes miss at IoU 0.5: every image is drawn
    out = tmp_path / "out"
    run(engine, dataset, out, "--worst", "3")
    report = (out / "report.md").read_text()
    assert "| label | AP | APAveragedOverIOUs | Precision | Recall | F1 | TP | FP | FN |" in report
    assert "![precision-recall.png](precision-recall.png)" in report
    for name in ("precision-recall.png", "confusion-matrix.png"):
        picture = cv2.imread(str(out / name))
        assert picture is not None and picture.std() > 10, name
    drawn = sorted((out / "worst").iterdir())
    assert len(drawn) == 3
    picture = cv2.imread(str(drawn[0]))
    # Ground truth on the left, answers on the right: the scene twice, side by side, with captions.
    assert picture.shape[1] > 2 * 320 and picture.shape[0] > 240


def test_labels_only_one_side_knows_are_listed_and_engine_only_answers_are_left_out(engine, tmp_path, capsys):
    dataset = coco(tmp_path / "data", SCENES[:3])
    document = json.loads(dataset.read_text())
    document["annotations"] = [a for a in document["annotations"] if a["category_id"] != 3]
    document["categories"] = [{"id": 1, "name": "red"}, {"id": 2, "name": "green"}, {"id": 4, "name": "purple"}]
    dataset.write_text(json.dumps(document))
    code, metrics = run(engine, dataset, tmp_path / "out")
    assert code == 0
    assert metrics["labels"] == {"only_in_dataset": ["purple"], "only_from_engine": {"blue": 3}}
    assert metrics["summary"]["mAP"] == 1.0  # the blue answers count neither for nor against
    printed = capsys.readouterr().out
    assert "only in the dataset: purple" in printed and "only from the engine: blue" in printed
    assert "Only from the engine (left out of the scores): blue (3 answers)" in (tmp_path / "out/report.md").read_text()


def test_a_second_run_replaces_the_first_and_other_folders_are_refused(engine, tmp_path, capsys):
    out = tmp_path / "out"
    run(engine, coco(tmp_path / "a", SCENES[:2]), out, "--worst", "0")
    first = json.loads((out / "metrics.json").read_text())
    run(engine, coco(tmp_path / "b", SCENES[:2], shift=40), out)
    second = json.loads((out / "metrics.json").read_text())
    assert first["summary"]["mAP"] == 1.0 and second["summary"]["mAP"] == 0.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "out"]  # nothing staged is left behind
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    code, _ = run(engine, coco(tmp_path / "c", SCENES[:1]), tmp_path / "mine")
    assert code == 2 and "holds other files" in capsys.readouterr().err
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_an_engine_that_cannot_be_reached_is_named(tmp_path, capsys):
    from chariot_support.dev.testing import free_port

    url = f"http://127.0.0.1:{free_port()}"
    code = evaluate.main([str(coco(tmp_path / "data", SCENES[:1])), "--url", url, "--out", str(tmp_path / "out")])
    assert code == 3 and f"cannot read the model's metadata at {url}/v2/models/m-demo" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_it_starts_the_engine_itself_and_stops_it(tmp_path, capsys):
    out = tmp_path / "out"
    code = evaluate.main(
        [str(coco(tmp_path / "data", SCENES[:2])), "--engine", "chariot_support 'Object Detection'", "--out", str(out)]
    )
    assert code == 0, capsys.readouterr().err
    assert json.loads((out / "metrics.json").read_text())["summary"]["mAP"] == 1.0
    assert "starting chariot_support Object Detection" in capsys.readouterr().err
    assert not math.isnan(json.loads((out / "metrics.json").read_text())["seconds"])


def send_json(handler: http.server.BaseHTTPRequestHandler, raw: bytes) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(raw)))
    handler.end_headers()
    handler.wfile.write(raw)


class Recorder(http.server.BaseHTTPRequestHandler):
    """Passes every request on to the engine and keeps what was sent: a window on the wire."""

    engine_url = ""
    seen: list = []

    def _forward(self, body: bytes | None) -> None:
        self.seen.append((self.command, self.path, body))
        request = urllib.request.Request(self.engine_url + self.path, data=body, method=self.command)
        if body is not None:
            request.add_header("Content-Type", self.headers["Content-Type"])
        with urllib.request.urlopen(request, timeout=30) as response:
            send_json(self, response.read())

    def do_GET(self):
        self._forward(None)

    def do_POST(self):
        self._forward(self.rfile.read(int(self.headers["Content-Length"])))

    def log_message(self, *args):
        pass


def test_answers_are_asked_as_chariot_asks_them(engine, tmp_path):
    """One image per request to /v2/models/m-<id>/infer/, as a base64 BYTES input with Chariot's action for the
    task and the low score threshold."""
    dataset = coco(tmp_path / "data", SCENES[:3])
    Recorder.engine_url, Recorder.seen = engine.url, []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        code = evaluate.main(
            [str(dataset), "--url", f"http://127.0.0.1:{server.server_port}", "--out", str(tmp_path / "out")]
        )
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0
    posts = [(path, json.loads(body)) for method, path, body in Recorder.seen if method == "POST"]
    assert len(posts) == 3 and {path for path, _ in posts} == {"/v2/models/m-demo/infer/"}
    sent = set()
    for _, body in posts:
        (tensor,) = body["inputs"]
        assert tensor["datatype"] == "BYTES" and tensor["shape"] == [1]
        assert tensor["parameters"] == {"action": "detect", "score_threshold": 0.001}
        sent.add(base64.b64decode(tensor["data"][0]))
    assert sent == {(tmp_path / "data" / s.name).read_bytes() for s in SCENES[:3]}


class WrongFormat(http.server.BaseHTTPRequestHandler):
    """An engine that says it detects objects but answers with classifications."""

    def _answer(self, body: dict) -> None:
        send_json(self, json.dumps(body).encode())

    def do_GET(self):
        self._answer({"name": "m-demo", "platform": "chariot-v2-kserve_object_detection"})

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self._answer({"outputs": [{"name": "image-0", "data": [[{"label": "red", "score": 0.9}]]}]})

    def log_message(self, *args):
        pass


def test_answers_not_of_the_tasks_format_are_named_and_nothing_is_written(tmp_path, capsys):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), WrongFormat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out = tmp_path / "out"
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        code = evaluate.main([str(coco(tmp_path / "data", SCENES[:2])), "--url", url, "--out", str(out)])
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert code == 3
    assert 'the engine answered {"label": "red", "score": 0.9}, not an Object Detection result with label,' in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["data"]
