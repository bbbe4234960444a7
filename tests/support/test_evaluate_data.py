"""The datasets `chariot_support.evaluate` reads: every way a dataset can be wrong gets one sentence naming the file
and the entry, the command exits 2 before sending anything, and nothing is written; COCO's RLE masks decode as
pycocotools decodes them."""

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from evaluation_scenes import HEIGHT, WIDTH, class_csv, class_folders, coco, dota, scenes, segmentation, single_colour
from pycocotools import mask as coco_mask

from chariot_support.dev.testing import free_port
from chariot_support.evaluate import cli as evaluate
from chariot_support.evaluate.data import DatasetError, load, truth_results
from chariot_support.model.tasks import TaskType

SCENES = scenes(2, seed=5)
OD, SEG = TaskType.OBJECT_DETECTION, TaskType.IMAGE_SEGMENTATION


def coco_with(tmp_path: Path, change, *, masks: str = "") -> Path:
    """A good COCO file, then `change(document)` applied to it."""
    path = coco(tmp_path / "data", SCENES, masks=masks)
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))
    return path


def annotation(index: int, **fields):
    def change(document):
        document["annotations"][index].update(fields)

    return change


def rewrite(text: str):
    def build(tmp_path: Path) -> Path:
        path = coco(tmp_path / "data", SCENES)
        path.write_text(text)
        return path

    return build


COCO_CASES = {
    "not JSON": (OD, rewrite("{'images': []}"), "instances.json is not JSON"),
    "a list": (OD, rewrite("[]"), "instances.json holds a list; a COCO file is an object"),
    "no categories": (OD, lambda p: coco_with(p, lambda d: d.pop("categories")), "has no 'categories' list"),
    "a nameless category": (
        OD,
        lambda p: coco_with(p, lambda d: d["categories"][1].pop("name")),
        "categories[1] needs an id and a non-empty name",
    ),
    "an image without a file": (
        OD,
        lambda p: coco_with(p, lambda d: d["images"][1].pop("file_name")),
        "images[1] needs an id and a file_name",
    ),
    "a repeated image id": (
        OD,
        lambda p: coco_with(p, lambda d: d["images"][1].update(id=1)),
        "images[1] repeats image id 1",
    ),
    "a missing image": (
        OD,
        lambda p: coco_with(p, lambda d: d["images"][0].update(file_name="gone.png")),
        "images[0] (id 1) names",
    ),
    "a wrong size": (
        OD,
        lambda p: coco_with(p, lambda d: d["images"][0].update(width=640)),
        f"images[0] says the image is 640x{HEIGHT} but",
    ),
    "an unknown image id": (
        OD,
        lambda p: coco_with(p, annotation(2, image_id=77)),
        "annotations[2] has image_id 77, which no entry of images has",
    ),
    "an unknown label": (
        OD,
        lambda p: coco_with(p, annotation(3, category_id=9)),
        "annotations[3] has category_id 9, an unknown label: add it to categories",
    ),
    "a short bbox": (
        OD,
        lambda p: coco_with(p, annotation(0, bbox=[1, 2, 3])),
        "annotations[0] has bbox [1, 2, 3]; COCO boxes are [x, y, width, height]",
    ),
    "a flat bbox": (
        OD,
        lambda p: coco_with(p, annotation(1, bbox=[5, 5, 0, 9])),
        "annotations[1] has bbox [5, 5, 0, 9], with no area",
    ),
    "no segmentation": (
        SEG,
        lambda p: coco_with(p, annotation(0, segmentation=None), masks="polygon"),
        "annotations[0] has no segmentation",
    ),
    "a two-point polygon": (
        SEG,
        lambda p: coco_with(p, annotation(4, segmentation=[[1, 2, 3, 4]]), masks="polygon"),
        "annotations[4] has a polygon [1, 2, 3, 4]",
    ),
    "an RLE of another size": (
        SEG,
        lambda p: coco_with(p, annotation(1, segmentation={"size": [10, 10], "counts": [100]}), masks="rle"),
        f"annotations[1] has an RLE of size [10, 10]; its image is [height, width] = [{HEIGHT}, {WIDTH}]",
    ),
    "RLE counts that do not add up": (
        SEG,
        lambda p: coco_with(p, annotation(1, segmentation={"size": [HEIGHT, WIDTH], "counts": [5, 7]}), masks="rle"),
        f"annotations[1] has RLE counts adding up to 12, not the image's {HEIGHT * WIDTH} pixels",
    ),
    "a compact RLE out of COCO's alphabet": (
        SEG,
        lambda p: coco_with(p, annotation(2, segmentation={"size": [HEIGHT, WIDTH], "counts": "0~~"}), masks="rle"),
        "annotations[2] has RLE counts with '~', outside COCO's alphabet",
    ),
    "a polygon outside the picture": (
        SEG,
        lambda p: coco_with(p, annotation(0, segmentation=[[900, 900, 950, 900, 950, 950]]), masks="polygon"),
        "annotations[0] has a segmentation that covers no pixel",
    ),
}


def dota_with(tmp_path: Path, change) -> Path:
    folder = dota(tmp_path / "data", SCENES)
    change(folder)
    return folder


DOTA_CASES = {
    "no labelTxt": (lambda f: __import__("shutil").rmtree(f / "labelTxt"), "needs images/ and labelTxt/ folders"),
    "labels without an image": (lambda f: (f / "images/scene-01.png").unlink(), "scene-01.txt has no image scene-01.*"),
    "an image without labels": (
        lambda f: (f / "labelTxt/scene-00.txt").unlink(),
        "scene-00.png has no labelTxt/scene-00.txt; write an empty one",
    ),
    "a short line": (
        lambda f: (f / "labelTxt/scene-00.txt").write_text("1 2 3 4 red\n"),
        "scene-00.txt: line 1 has 5 fields",
    ),
    "a corner that is a word": (
        lambda f: (f / "labelTxt/scene-00.txt").write_text("gsd:1\n1 2 3 4 5 6 7 x red 0\n"),
        "scene-00.txt: line 2 has a corner that is not a number",
    ),
    "corners on a line": (
        lambda f: (f / "labelTxt/scene-01.txt").write_text("0 0 10 0 20 0 30 0 red 0\n"),
        "scene-01.txt: line 1 has corners that enclose no area",
    ),
}


def jsonl(tmp_path: Path, lines: list[str]) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    cv2.imwrite(str(folder / "a.png"), SCENES[0].pixels)
    path = folder / "prompts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD_LINE = json.dumps({"image": "a.png", "prompt": "red?", "answer": "yes"})
PROMPT_CASES = {
    "a line that is not JSON": ([GOOD_LINE, "{image: a.png}"], "prompts.jsonl: line 2 is not JSON"),
    "no image": ([json.dumps({"prompt": "red?", "answer": "x"})], 'line 1 needs an "image" string, an "answer"'),
    "a blank prompt": (
        [json.dumps({"image": "a.png", "prompt": " ", "answer": "x"})],
        'and a "prompt" string if it asks one',
    ),
    "a numeric answer": (
        [GOOD_LINE, GOOD_LINE, json.dumps({"image": "a.png", "prompt": "p", "answer": 3})],
        "line 3 has answer 3; give a string, or a list of strings",
    ),
    "a missing image": ([json.dumps({"image": "b.png", "prompt": "p", "answer": "a"})], "line 1 names"),
    "no lines": ([""], "has no lines; write one JSON object per image and prompt"),
}


@pytest.mark.parametrize("case", COCO_CASES)
def test_a_bad_coco_file_is_named_with_its_entry(tmp_path, case):
    task, build, message = COCO_CASES[case]
    with pytest.raises(DatasetError) as raised:
        load(task, build(tmp_path))
    assert message in str(raised.value) and "instances.json" in str(raised.value)


@pytest.mark.parametrize("case", DOTA_CASES)
def test_a_bad_dota_folder_is_named_with_its_entry(tmp_path, case):
    change, message = DOTA_CASES[case]
    with pytest.raises(DatasetError, match=message.replace("*", r"\*").replace(".", r"\.")):
        load(TaskType.ORIENTED_OBJECT_DETECTION, dota_with(tmp_path, change))


@pytest.mark.parametrize("case", PROMPT_CASES)
def test_a_bad_prompt_file_is_named_with_its_line(tmp_path, case):
    lines, message = PROMPT_CASES[case]
    with pytest.raises(DatasetError) as raised:
        load(TaskType.IMAGE_TEXT_TO_TEXT, jsonl(tmp_path, lines))
    assert message in str(raised.value) and "prompts.jsonl" in str(raised.value)


def test_bad_classification_datasets_are_named(tmp_path):
    task = TaskType.IMAGE_CLASSIFICATION
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="has no class folders"):
        load(task, tmp_path / "empty")
    folders = class_folders(tmp_path / "folders", single_colour(3))
    (folders / "purple").mkdir()
    with pytest.raises(DatasetError, match="purple holds no images"):
        load(task, folders)
    listed = class_csv(tmp_path / "csv", single_colour(3))
    listed.write_text("file,label\npicture-00.png,red\npicture-01.png\n")
    with pytest.raises(DatasetError, match=r"labels.csv: line 3 is 'picture-01.png'; each line is file,label"):
        load(task, listed)
    listed.write_text("picture-00.png,red\nnot-there.png,green\n")
    with pytest.raises(DatasetError, match=r"labels.csv: line 2 names .*not-there.png, which does not exist"):
        load(task, listed)
    listed.write_text("file,label\n")
    with pytest.raises(DatasetError, match="lists no images"):
        load(task, listed)
    (tmp_path / "csv" / "picture-02.png").write_text("not a picture")
    listed.write_text("picture-02.png,blue\n")
    with pytest.raises(DatasetError, match="picture-02.png, which is not an image"):
        load(task, listed)


@pytest.mark.parametrize(
    "task, name, message",
    [
        (OD, "folder", "Object Detection is evaluated on a COCO instances JSON file"),
        (TaskType.IMAGE_CLASSIFICATION, "a.json", "a folder per class or a file,label CSV"),
        (TaskType.ORIENTED_OBJECT_DETECTION, "a.json", "a DOTA folder (images/ and labelTxt/)"),
        (TaskType.IMAGE_TEXT_TO_TEXT, "folder", 'JSON lines file of {"image", "prompt", "answer"}'),
        (OD, "missing.json", "missing.json does not exist"),
    ],
)
def test_a_dataset_of_another_format_says_which_one_the_task_takes(tmp_path, task, name, message):
    (tmp_path / "folder").mkdir()
    (tmp_path / "a.json").write_text("{}")
    with pytest.raises(DatasetError) as raised:
        load(task, tmp_path / name)
    assert message in str(raised.value)


def test_the_command_stops_before_any_request_and_writes_nothing(tmp_path, capsys):
    """No engine listens at the URL: a bad dataset is found and reported before the first request would fail."""
    dataset = coco_with(tmp_path, annotation(3, category_id=9))
    out = tmp_path / "out"
    url = f"http://127.0.0.1:{free_port()}"
    code = evaluate.main([str(dataset), "--url", url, "--task", "Object Detection", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("error: ") and "annotations[3] has category_id 9" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_crowd_annotations_are_left_out_and_said_so(tmp_path):
    dataset = load(OD, coco_with(tmp_path, annotation(0, iscrowd=1)))
    assert sum(len(s.truth) for s in dataset.samples) == 3 * len(SCENES) - 1
    assert dataset.notes == ["1 crowd annotation(s) (iscrowd) were left out"]


def test_rle_masks_decode_as_pycocotools_decodes_them(tmp_path):
    """Both of COCO's RLE forms, the list of runs and the compact string, against pycocotools' own decoder."""
    rng = np.random.default_rng(7)
    truth = np.zeros((HEIGHT, WIDTH), np.uint8)
    for _ in range(12):  # ragged blobs give long and short runs, and differences of both signs
        cv2.circle(truth, (int(rng.integers(0, WIDTH)), int(rng.integers(0, HEIGHT))), int(rng.integers(1, 60)), 1, -1)
    truth[0, 0] = 1  # a mask that starts with a 1: its first run of 0s is empty
    compact = coco_mask.encode(np.asfortranarray(truth))
    for form in ({"size": compact["size"], "counts": compact["counts"].decode()}, segmentation(truth, "rle")):
        dataset = coco_with(tmp_path / str(len(str(form))), annotation(0, segmentation=form), masks="rle")
        (mask, *_) = load(SEG, dataset).samples[0].truth
        assert np.array_equal(mask.mask, coco_mask.decode(compact).astype(bool))


def test_ground_truth_is_drawn_in_the_engines_own_result_format(tmp_path):
    boxes = load(OD, coco(tmp_path / "boxes", SCENES[:1])).samples[0]
    assert [set(r) for r in truth_results(boxes)] == [{"label", "xmin", "ymin", "xmax", "ymax"}] * 3
    masks = load(SEG, coco(tmp_path / "masks", SCENES[:1], masks="polygon")).samples[0]
    outlines = truth_results(masks)
    assert [r["label"] for r in outlines] == ["red", "green", "blue"] and all(r["contour"] for r in outlines)
    red = np.array([[p["x"], p["y"]] for p in outlines[0]["contour"][0]])
    x0, y0, x1, y1 = SCENES[0].shapes[0].box
    assert red.min(axis=0).tolist() == [x0, y0] and red.max(axis=0).tolist() == [x1 - 1, y1 - 1]


def test_without_the_eval_extra_it_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "valor_lite" else found(name, *a))
    code = evaluate.main(
        [str(coco(tmp_path / "data", SCENES)), "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "o")]
    )
    assert code == 2
    assert "valor_lite not installed: run `uv sync --group eval`" in capsys.readouterr().err


# One small dataset of each task type, as the file the task reads (DOTA: the folder), in a folder of its own.
DATASETS = {
    OD: lambda folder: coco(folder / "data", SCENES),
    SEG: lambda folder: coco(folder / "data", SCENES, masks="polygon"),
    TaskType.ORIENTED_OBJECT_DETECTION: lambda folder: dota(folder / "data", SCENES),
    TaskType.IMAGE_CLASSIFICATION: lambda folder: class_csv(folder / "data", single_colour(3)),
    TaskType.IMAGE_TEXT_TO_TEXT: lambda folder: jsonl(folder, [GOOD_LINE]),
}


@pytest.mark.parametrize("task", list(TaskType), ids=lambda t: t.value)
def test_the_folder_holding_a_dataset_is_read_as_its_file(tmp_path, task):
    """`python -m chariot_support.evaluate evaluation-data` for every task type: the folder's instances.json,
    labels.csv or prompts.jsonl (a DOTA folder is the dataset itself), as the dataset file itself is read."""
    given = DATASETS[task](tmp_path)
    folder = given if given.is_dir() else given.parent
    from_folder, from_file = load(task, folder), load(task, given)
    assert [s.uid for s in from_folder.samples] == [s.uid for s in from_file.samples] and from_file.samples
    assert from_folder.source == given


def test_a_folder_is_read_by_the_one_file_of_its_kind_and_refused_with_two(tmp_path):
    path = coco(tmp_path / "data", SCENES)
    exported = path.rename(path.with_name("_annotations.coco.json"))  # as some tools name a COCO export
    assert load(OD, tmp_path / "data").source == exported
    (tmp_path / "data" / "val.json").write_text("{}")
    with pytest.raises(DatasetError, match=r"holds 2 \.json files \(_annotations.coco.json, val.json\); name the one"):
        load(OD, tmp_path / "data")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="empty is a folder without instances.json or another .json file"):
        load(SEG, tmp_path / "empty")


def test_a_folder_of_class_folders_is_still_read_as_classes(tmp_path):
    folders = class_folders(tmp_path / "folders", single_colour(3))
    assert load(TaskType.IMAGE_CLASSIFICATION, folders).source == folders
