"""Labelled datasets for `python -m chariot_support.evaluate`, read in the formats people already have: COCO
instances JSON (boxes, polygons or RLE masks), a folder per class or a `file,label` CSV, DOTA text labels, and JSON
lines of image, prompt and answer. Every problem is a DatasetError of one sentence naming the file and the entry."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image as PILImage
from PIL import UnidentifiedImageError

from chariot_support.model.tasks import TaskType

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"})
_EXIF_ORIENTATION = 0x0112
_TURNED = frozenset({5, 6, 7, 8})  # EXIF orientations that swap width and height once the image is upright


class DatasetError(ValueError):
    """A dataset that cannot be evaluated: the message names the file, the entry and what to fix."""


@dataclass(frozen=True)
class Box:
    """An axis-aligned box in pixels, y down."""

    label: str
    xmin: float
    ymin: float
    xmax: float
    ymax: float


@dataclass(frozen=True)
class Quad:
    """An oriented box as its four corners in pixels (4 x 2, x then y)."""

    label: str
    corners: np.ndarray


@dataclass(frozen=True)
class Mask:
    """One object's pixels, as a boolean image of the picture's size."""

    label: str
    mask: np.ndarray


@dataclass(frozen=True)
class Sample:
    """One request's worth of ground truth: the image, its size (upright), and what should be found in it.

    `truth` holds Boxes, Quads or Masks for located tasks, the one label for classification, and the reference
    answers for a prompt."""

    uid: str
    path: Path
    width: int
    height: int
    truth: tuple
    prompt: str | None = None


@dataclass
class Dataset:
    task: TaskType
    source: Path
    samples: list[Sample]
    labels: list[str]
    notes: list[str] = field(default_factory=list)


# The file a task's dataset is read from when DATASET names the folder that holds it: this name, else the one file of
# the folder with this suffix (COCO exports go by many names: instances_val2017.json, _annotations.coco.json).
FOLDER_FILES = {
    TaskType.OBJECT_DETECTION: ("instances.json", ".json"),
    TaskType.IMAGE_SEGMENTATION: ("instances.json", ".json"),
    TaskType.IMAGE_CLASSIFICATION: ("labels.csv", ".csv"),
    TaskType.IMAGE_TEXT_TO_TEXT: ("prompts.jsonl", ".jsonl"),
}


def load(task: TaskType, source: Path, images: Path | None = None) -> Dataset:
    """Read `source` in the format `task` is evaluated on, or the dataset file in the folder `source` names;
    `images` is where a COCO file's images live (the JSON's folder by default). Raises DatasetError."""
    source = Path(source)
    if not source.exists():
        raise DatasetError(f"{source} does not exist")
    if source.is_dir():
        source = dataset_in(task, source)
    if task in (TaskType.OBJECT_DETECTION, TaskType.IMAGE_SEGMENTATION):
        if source.suffix.lower() != ".json" or not source.is_file():
            raise DatasetError(
                f"{task.value} is evaluated on a COCO instances JSON file; {_not_one(source, '.json', 'is not a .json file')}"
            )
        from chariot_support.evaluate import coco  # which reads into this module's types

        return coco.read(task, source, images or source.parent)
    if task is TaskType.IMAGE_CLASSIFICATION:
        if source.is_dir():
            return _class_folders(source)
        if source.suffix.lower() == ".csv":
            return _class_csv(source)
        raise DatasetError(f"{task.value} is evaluated on a folder per class or a file,label CSV; {source} is neither")
    if task is TaskType.ORIENTED_OBJECT_DETECTION:
        if not source.is_dir():
            raise DatasetError(
                f"{task.value} is evaluated on a DOTA folder (images/ and labelTxt/); {source} is a file"
            )
        return _dota(source)
    if source.suffix.lower() not in (".jsonl", ".json") or not source.is_file():
        raise DatasetError(
            f'{task.value} is evaluated on a JSON lines file of {{"image", "prompt", "answer"}} (the prompt optional);'
            f" {_not_one(source, '.jsonl', 'is not one')}"
        )
    return _prompts(source)


def dataset_in(task: TaskType, folder: Path) -> Path:
    """The dataset file in `folder` for `task` (FOLDER_FILES), or the folder itself where the task reads a folder (a
    DOTA folder, a folder per class) or no file is there, so that the task's own check names what it takes."""
    if task not in FOLDER_FILES:
        return folder
    name, suffix = FOLDER_FILES[task]
    if (folder / name).is_file():
        return folder / name
    if task is TaskType.IMAGE_CLASSIFICATION and any(
        p.is_dir() and not p.name.startswith(".") for p in folder.iterdir()
    ):
        return folder  # a folder per class
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() == suffix)
    if len(found) > 1:
        raise DatasetError(
            f"{folder} holds {len(found)} {suffix} files ({', '.join(p.name for p in found[:4])}); name the one to"
            f" evaluate, or call it {name}"
        )
    return found[0] if found else folder


def _not_one(source: Path, suffix: str, file_is: str) -> str:
    """Why `source` is not the file a task reads: a folder without one, or a file that `file_is` (not one...)."""
    if source.is_dir():
        name = next(name for name, each in FOLDER_FILES.values() if each == suffix)
        return f"{source} is a folder without {name} or another {suffix} file"
    return f"{source} {file_is}"


def image_size(path: Path, where: str) -> tuple[int, int]:
    """Width and height of the image at `path` once turned upright, as the engine turns it, from its header."""
    if not path.is_file():
        raise DatasetError(f"{where} names {path}, which does not exist")
    try:
        with PILImage.open(path) as image:
            width, height = image.size
            orientation = image.getexif().get(_EXIF_ORIENTATION)
    except (UnidentifiedImageError, OSError) as error:
        raise DatasetError(f"{where} names {path}, which is not an image ({error})") from None
    return (height, width) if orientation in _TURNED else (width, height)


# --- classification --------------------------------------------------------------------------------------------


def _class_folders(source: Path) -> Dataset:
    samples = []
    folders = sorted(p for p in source.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        raise DatasetError(f"{source} has no class folders; put each class's images in a folder named after it")
    for folder in folders:
        pictures = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not pictures:
            raise DatasetError(f"{folder} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))}); remove it or fill it")
        for path in pictures:
            width, height = image_size(path, f"{source}: class {folder.name!r}")
            samples.append(Sample(str(path.relative_to(source)), path, width, height, (folder.name,)))
    return Dataset(TaskType.IMAGE_CLASSIFICATION, source, samples, [f.name for f in folders])


def _class_csv(source: Path) -> Dataset:
    samples = []
    with source.open(newline="") as handle:
        rows = list(csv.reader(handle))
    if rows and [cell.strip().lower() for cell in rows[0]] == ["file", "label"]:
        rows = rows[1:]
        first = 2
    else:
        first = 1
    for number, row in enumerate(rows, start=first):
        where = f"{source}: line {number}"
        if not row:
            continue
        if len(row) != 2 or not row[0].strip() or not row[1].strip():
            raise DatasetError(f"{where} is {','.join(row)!r}; each line is file,label")
        path = source.parent / row[0].strip()
        width, height = image_size(path, where)
        samples.append(Sample(row[0].strip(), path, width, height, (row[1].strip(),)))
    if not samples:
        raise DatasetError(f"{source} lists no images; write one file,label line per image")
    return Dataset(TaskType.IMAGE_CLASSIFICATION, source, samples, sorted({s.truth[0] for s in samples}))


# --- DOTA ------------------------------------------------------------------------------------------------------


def _dota(source: Path) -> Dataset:
    images, labels = source / "images", source / "labelTxt"
    if not images.is_dir() or not labels.is_dir():
        raise DatasetError(f"{source} needs images/ and labelTxt/ folders, as DOTA lays them out")
    pictures = {p.stem: p for p in sorted(images.iterdir()) if p.suffix.lower() in IMAGE_SUFFIXES}
    texts = {p.stem: p for p in sorted(labels.glob("*.txt"))}
    for stem, text in texts.items():
        if stem not in pictures:
            raise DatasetError(f"{text} has no image {stem}.* in {images}")
    samples = []
    for stem, path in pictures.items():
        if stem not in texts:
            raise DatasetError(f"{path} has no labelTxt/{stem}.txt; write an empty one if the image holds no objects")
        width, height = image_size(path, str(texts[stem]))
        quads = _dota_quads(texts[stem])
        samples.append(Sample(path.name, path, width, height, tuple(quads)))
    if not samples:
        raise DatasetError(f"{images} holds no images")
    found = sorted({q.label for s in samples for q in s.truth})
    return Dataset(TaskType.ORIENTED_OBJECT_DETECTION, source, samples, found)


def _dota_quads(path: Path) -> list[Quad]:
    quads = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        fields = line.split()
        if not fields or line.startswith(("imagesource:", "gsd:")):
            continue
        where = f"{path}: line {number}"
        if len(fields) not in (9, 10):
            raise DatasetError(f"{where} has {len(fields)} fields; DOTA lines are x1 y1 ... x4 y4 class [difficult]")
        try:
            corners = np.array([float(v) for v in fields[:8]]).reshape(4, 2)
        except ValueError:
            raise DatasetError(f"{where} has a corner that is not a number: {' '.join(fields[:8])}") from None
        if not np.isfinite(corners).all() or abs(cv2.contourArea(corners.astype(np.float32))) < 1e-6:
            raise DatasetError(f"{where} has corners that enclose no area: {' '.join(fields[:8])}")
        quads.append(Quad(fields[8], corners))
    return quads


# --- prompts ---------------------------------------------------------------------------------------------------


def _prompts(source: Path) -> Dataset:
    samples = []
    for number, line in enumerate(source.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}: line {number}"
        try:
            entry = json.loads(line)
        except ValueError as error:
            raise DatasetError(f"{where} is not JSON: {error}") from None
        # Without a prompt (or with ""), the image is sent bare, and the engine answers about the image itself.
        prompt = entry.get("prompt", "") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or not is_text(entry.get("image")) or not (prompt == "" or is_text(prompt)):
            raise DatasetError(f'{where} needs an "image" string, an "answer", and a "prompt" string if it asks one')
        answers = entry.get("answer")
        answers = [answers] if isinstance(answers, str) else answers
        if not (isinstance(answers, list) and answers and all(is_text(a) for a in answers)):
            raise DatasetError(f"{where} has answer {entry.get('answer')!r}; give a string, or a list of strings")
        path = source.parent / entry["image"]
        width, height = image_size(path, where)
        uid = f"{entry['image']} #{number}"
        samples.append(Sample(uid, path, width, height, tuple(answers), prompt=prompt))
    if not samples:
        raise DatasetError(f"{source} has no lines; write one JSON object per image and prompt")
    return Dataset(TaskType.IMAGE_TEXT_TO_TEXT, source, samples, [])


def is_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def truth_results(sample: Sample) -> list[dict]:
    """The ground truth as result dicts of the engine's own format, for drawing beside the engine's answers."""
    drawn: list[dict] = []
    for item in sample.truth:
        if isinstance(item, Box):
            drawn.append(
                {"label": item.label, "xmin": item.xmin, "ymin": item.ymin, "xmax": item.xmax, "ymax": item.ymax}
            )
        elif isinstance(item, Quad):
            drawn.append({"label": item.label, "contour": [_points(item.corners)]})
        elif isinstance(item, Mask):
            outlines, _ = cv2.findContours(item.mask.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
            drawn.append({"label": item.label, "contour": [_points(o.reshape(-1, 2)) for o in outlines]})
        elif sample.prompt is not None:
            drawn.append({"prompt": sample.prompt, "answer": item})
        else:
            drawn.append({"label": item})
    return drawn


def _points(xy: Sequence) -> list[dict]:
    return [{"x": float(x), "y": float(y)} for x, y in xy]
