"""COCO instances JSON, as `python -m chariot_support.evaluate` reads it for Object Detection (boxes) and Image
Segmentation (polygons or RLE masks): every problem a DatasetError naming the file and the entry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from chariot_support.evaluate.data import Box, Dataset, DatasetError, Mask, Sample, image_size, is_finite, is_text
from chariot_support.model.tasks import TaskType


def read(task: TaskType, source: Path, images: Path) -> Dataset:
    """A COCO instances JSON file: boxes for Object Detection, polygons or RLE masks for Image Segmentation."""
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
        if not isinstance(category, dict) or "id" not in category or not is_text(category.get("name")):
            raise DatasetError(f"{source}: categories[{index}] needs an id and a non-empty name")
        categories[category["id"]] = category["name"]
    entries: dict[Any, tuple[str, Path, int, int]] = {}
    for index, image in enumerate(document["images"]):
        where = f"{source}: images[{index}]"
        if not isinstance(image, dict) or "id" not in image or not is_text(image.get("file_name")):
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
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(is_finite(v) for v in bbox)):
        raise DatasetError(f"{where} has bbox {bbox!r}; COCO boxes are [x, y, width, height] in pixels")
    x, y, w, h = (float(v) for v in bbox)
    if w <= 0 or h <= 0:
        raise DatasetError(f"{where} has bbox {bbox!r}, with no area; width and height must be above 0")
    return Box(label, x, y, x + w, y + h)


def _coco_mask(segmentation: Any, label: str, width: int, height: int, where: str) -> Mask:
    if isinstance(segmentation, list):
        polygons = []
        for part in segmentation:
            if not (isinstance(part, list) and len(part) >= 6 and len(part) % 2 == 0 and all(map(is_finite, part))):
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
