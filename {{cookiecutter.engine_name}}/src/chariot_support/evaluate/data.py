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


def load(task: TaskType, source: Path, images: Path | None = None) -> Dataset:
    """Read `source` in the format `task` is evaluated on; `images` is where a COCO file's images live (the JSON's
    folder by default). Raises DatasetError."""
    source = Path(source)
    if not source.exists():
        raise DatasetError(f"{source} does not exist")
    if task in (TaskType.OBJECT_DETECTION, TaskType.IMAGE_SEGMENTATION):
        if source.suffix.lower() != ".json" or not source.is_file():
            raise DatasetError(f"{task.value} is evaluated on a COCO instances JSON file; {source} is not a .json file")
        return _coco(task, source, images or source.parent)
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
            f'{task.value} is evaluated on a JSON lines file of {{"image", "prompt", "answer"}}; {source} is not one'
        )
    return _prompts(source)


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


# --- COCO ------------------------------------------------------------------------------------------------------


def _coco(task: TaskType, source: Path, images: Path) -> Dataset:
    try:
        document = json.loads(source.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise DatasetError(f"{source} is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise DatasetError(f"{source} holds a {type(document).__name__}; a COCO file is an object")
    for key in ("images", "annotations", "categories"):
        if not isinstance(document.get(key), list):
            raise DatasetError(
                f"{source} has no {key!r} list; a COCO instances file has images, annotations, categories"
            )
    categories: dict[Any, str] = {}
    for index, category in enumerate(document["categories"]):
        if not isinstance(category, dict) or "id" not in category or not _text(category.get("name")):
            raise DatasetError(f"{source}: categories[{index}] needs an id and a non-empty name")
        categories[category["id"]] = category["name"]
    entries: dict[Any, tuple[str, Path, int, int]] = {}
    for index, image in enumerate(document["images"]):
        where = f"{source}: images[{index}]"
        if not isinstance(image, dict) or "id" not in image or not _text(image.get("file_name")):
            raise DatasetError(f"{where} needs an id and a file_name")
        if image["id"] in entries:
            raise DatasetError(f"{where} repeats image id {image['id']!r}")
        path = images / image["file_name"]
        width, height = image_size(path, f"{where} (id {image['id']!r})")
        stated = (image.get("width"), image.get("height"))
        if stated != (None, None) and stated != (width, height):
            raise DatasetError(
                f"{where} says the image is {stated[0]}x{stated[1]} but {path} is {width}x{height};"
                " the annotations must be in the file's own pixels"
            )
        entries[image["id"]] = (image["file_name"], path, width, height)
    truth: dict[Any, list] = {key: [] for key in entries}
    crowds = 0
    for index, annotation in enumerate(document["annotations"]):
        where = f"{source}: annotations[{index}]"
        if not isinstance(annotation, dict):
            raise DatasetError(f"{where} is a {type(annotation).__name__}, not an object")
        if annotation.get("image_id") not in entries:
            raise DatasetError(f"{where} has image_id {annotation.get('image_id')!r}, which no entry of images has")
        if annotation.get("category_id") not in categories:
            raise DatasetError(
                f"{where} has category_id {annotation.get('category_id')!r}, an unknown label: add it to categories"
            )
        if annotation.get("iscrowd"):
            crowds += 1  # a crowd region marks many objects at once, which no detection can match one for one
            continue
        label = categories[annotation["category_id"]]
        _, _, width, height = entries[annotation["image_id"]]
        if task is TaskType.OBJECT_DETECTION:
            truth[annotation["image_id"]].append(_coco_box(annotation.get("bbox"), label, where))
        else:
            truth[annotation["image_id"]].append(
                _coco_mask(annotation.get("segmentation"), label, width, height, where)
            )
    samples = [
        Sample(uid=name, path=path, width=width, height=height, truth=tuple(truth[key]))
        for key, (name, path, width, height) in entries.items()
    ]
    notes = [f"{crowds} crowd annotation(s) (iscrowd) were left out"] if crowds else []
    return Dataset(task, source, samples, sorted(set(categories.values())), notes)


def _coco_box(bbox: Any, label: str, where: str) -> Box:
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(_finite(v) for v in bbox)):
        raise DatasetError(f"{where} has bbox {bbox!r}; COCO boxes are [x, y, width, height] in pixels")
    x, y, w, h = (float(v) for v in bbox)
    if w <= 0 or h <= 0:
        raise DatasetError(f"{where} has bbox {bbox!r}, with no area; width and height must be above 0")
    return Box(label, x, y, x + w, y + h)


def _coco_mask(segmentation: Any, label: str, width: int, height: int, where: str) -> Mask:
    if isinstance(segmentation, list):
        polygons = []
        for part in segmentation:
            if not (isinstance(part, list) and len(part) >= 6 and len(part) % 2 == 0 and all(map(_finite, part))):
                raise DatasetError(
                    f"{where} has a polygon {str(part)[:80]}; COCO polygons are [x1, y1, x2, y2, ...] with 3+ points"
                )
            polygons.append(np.round(np.array(part, np.float64).reshape(-1, 2)).astype(np.int32))
        mask = np.zeros((height, width), np.uint8)
        cv2.fillPoly(mask, polygons, 1)
        pixels = mask.astype(bool)
    elif isinstance(segmentation, dict):
        pixels = _rle(segmentation, width, height, where)
    else:
        raise DatasetError(f"{where} has no segmentation; Image Segmentation needs polygons or an RLE mask")
    if not pixels.any():
        raise DatasetError(f"{where} has a segmentation that covers no pixel of its {width}x{height} image")
    return Mask(label, pixels)


def _rle(rle: dict, width: int, height: int, where: str) -> np.ndarray:
    """A COCO run-length mask: runs of 0 then 1 alternating, down each column in turn, given as a list of numbers
    or as COCO's compact string."""
    size, counts = rle.get("size"), rle.get("counts")
    if size != [height, width]:
        raise DatasetError(f"{where} has an RLE of size {size!r}; its image is [height, width] = {[height, width]}")
    if isinstance(counts, str):
        counts = _rle_numbers(counts, where)
    if not (isinstance(counts, list) and all(isinstance(c, int) and c >= 0 for c in counts)):
        raise DatasetError(f"{where} has RLE counts that are neither a string nor a list of whole numbers")
    if sum(counts) != width * height:
        raise DatasetError(
            f"{where} has RLE counts adding up to {sum(counts)}, not the image's {width * height} pixels"
        )
    values = np.zeros(len(counts), bool)
    values[1::2] = True
    return np.repeat(values, counts).reshape(width, height).T


def _rle_numbers(text: str, where: str) -> list[int]:
    """COCO's compact RLE: each number in 5-bit groups (low first) as characters from '0', 0x20 marking that more
    follow and 0x10 in the last group its sign; from the third on, each is the difference from the one two back."""
    numbers: list[int] = []
    position = 0
    while position < len(text):
        value, shift, more = 0, 0, True
        while more:
            if position >= len(text):
                raise DatasetError(f"{where} has RLE counts that end in the middle of a number")
            group = ord(text[position]) - 48
            if not 0 <= group < 64:
                raise DatasetError(f"{where} has RLE counts with {text[position]!r}, outside COCO's alphabet")
            value |= (group & 0x1F) << shift
            more = bool(group & 0x20)
            shift += 5
            position += 1
            if not more and group & 0x10:
                value |= -1 << shift
        if len(numbers) > 2:
            value += numbers[-2]
        numbers.append(value)
    return numbers


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
        if not isinstance(entry, dict) or not _text(entry.get("image")) or not _text(entry.get("prompt")):
            raise DatasetError(f'{where} needs "image" and "prompt" strings and an "answer"')
        answers = entry.get("answer")
        answers = [answers] if isinstance(answers, str) else answers
        if not (isinstance(answers, list) and answers and all(_text(a) for a in answers)):
            raise DatasetError(f"{where} has answer {entry.get('answer')!r}; give a string, or a list of strings")
        path = source.parent / entry["image"]
        width, height = image_size(path, where)
        uid = f"{entry['image']} #{number}"
        samples.append(Sample(uid, path, width, height, tuple(answers), prompt=entry["prompt"]))
    if not samples:
        raise DatasetError(f"{source} has no lines; write one JSON object per image and prompt")
    return Dataset(TaskType.IMAGE_TEXT_TO_TEXT, source, samples, [])


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _finite(value: Any) -> bool:
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
