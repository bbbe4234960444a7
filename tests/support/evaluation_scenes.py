"""Labelled datasets of generated scenes for the evaluation tests: each scene holds a red rectangle, a green disc and
a blue turned rectangle at random places, the shapes the demo models find, and each is written out in the format
its task type is evaluated on, with the ground truth measured from the drawn pixels themselves."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

WIDTH, HEIGHT = 320, 240
COLOURS = {"red": (0, 0, 255), "green": (0, 255, 0), "blue": (255, 0, 0)}  # BGR, as cv2.imwrite takes them
CATEGORIES = {"red": 1, "green": 2, "blue": 3}


@dataclass(frozen=True)
class Shape:
    label: str
    mask: np.ndarray  # the shape's own pixels
    corners: np.ndarray  # its rotated box (4 x 2), as DOTA labels it

    @property
    def box(self) -> tuple[int, int, int, int]:
        """xmin, ymin, xmax, ymax of its pixels (max exclusive, as the demo reports them)."""
        x, y, w, h = cv2.boundingRect(self.mask)
        return x, y, x + w, y + h


@dataclass(frozen=True)
class Scene:
    name: str
    pixels: np.ndarray  # BGR
    shapes: tuple[Shape, ...]


def scenes(count: int, seed: int = 0) -> list[Scene]:
    """`count` scenes, the same ones for the same seed: each shape in its own third of the picture, so none touch."""
    rng = np.random.default_rng(seed)
    made = []
    for index in range(count):
        pixels = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
        shapes = []
        for label, third in (("red", 0), ("green", 1), ("blue", 2)):
            mask = np.zeros((HEIGHT, WIDTH), np.uint8)
            cx = int(third * WIDTH / 3 + WIDTH / 6 + rng.integers(-8, 9))
            cy = int(rng.integers(60, HEIGHT - 60))
            if label == "red":
                w, h = int(rng.integers(44, 80)), int(rng.integers(40, 90))
                rect = ((cx, cy), (w, h), 0.0)
                cv2.rectangle(mask, (cx - w // 2, cy - h // 2), (cx - w // 2 + w - 1, cy - h // 2 + h - 1), 1, -1)
            elif label == "green":
                radius = int(rng.integers(22, 40))
                cv2.circle(mask, (cx, cy), radius, 1, -1)
                rect = ((cx, cy), (2 * radius + 1, 2 * radius + 1), 0.0)
            else:
                rect = (
                    (cx, cy),
                    (float(rng.integers(60, 90)), float(rng.integers(24, 40))),
                    float(rng.uniform(-40, 40)),
                )
                cv2.fillPoly(mask, [np.round(cv2.boxPoints(rect)).astype(np.int32)], 1)
            pixels[mask.astype(bool)] = COLOURS[label]
            shapes.append(Shape(label, mask, cv2.boxPoints(rect).astype(np.float64)))
        made.append(Scene(f"scene-{index:02d}.png", pixels, tuple(shapes)))
    return made


def write_images(folder: Path, made: list[Scene]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for scene in made:
        cv2.imwrite(str(folder / scene.name), scene.pixels)


def coco(folder: Path, made: list[Scene], *, shift: float = 0.0, masks: str = "", jitter: float = 0.0, seed: int = 1):
    """A COCO instances file (and its images) in `folder`: boxes moved `shift` pixels right, each edge moved by up
    to `jitter` at random; with `masks` "polygon" or "rle" each annotation has a segmentation too."""
    write_images(folder, made)
    rng = np.random.default_rng(seed)
    images, annotations = [], []
    for image_id, scene in enumerate(made, start=1):
        images.append({"id": image_id, "file_name": scene.name, "width": WIDTH, "height": HEIGHT})
        for shape in scene.shapes:
            x0, y0, x1, y1 = (v + rng.uniform(-jitter, jitter) for v in shape.box)
            annotation = {
                "id": len(annotations) + 1,
                "image_id": image_id,
                "category_id": CATEGORIES[shape.label],
                "bbox": [x0 + shift, y0, x1 - x0, y1 - y0],
                "area": float((x1 - x0) * (y1 - y0)),
                "iscrowd": 0,
            }
            if masks:
                annotation["segmentation"] = segmentation(shape.mask, masks, shift=int(shift))
            annotations.append(annotation)
    document = {
        "images": images,
        "annotations": annotations,
        "categories": [{"id": i, "name": n} for n, i in CATEGORIES.items()],
    }
    path = folder / "instances.json"
    path.write_text(json.dumps(document))
    return path


def segmentation(mask: np.ndarray, kind: str, *, shift: int = 0):
    """The mask as COCO polygons or an uncompressed RLE (runs down each column, starting with 0s)."""
    mask = np.roll(mask, shift, axis=1)
    if kind == "polygon":
        outlines, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        return [o.reshape(-1).astype(float).tolist() for o in outlines]
    flat = mask.T.reshape(-1)
    edges = np.flatnonzero(np.diff(flat)) + 1
    runs = np.diff(np.concatenate([[0], edges, [flat.size]])).tolist()
    if flat[0]:
        runs = [0, *runs]
    return {"size": [HEIGHT, WIDTH], "counts": runs}


def dota(folder: Path, made: list[Scene], *, shift: float = 0.0) -> Path:
    """A DOTA folder: images/ and labelTxt/ with each shape's rotated box, moved `shift` pixels right."""
    write_images(folder / "images", made)
    (folder / "labelTxt").mkdir(parents=True, exist_ok=True)
    for scene in made:
        lines = ["imagesource:generated", "gsd:1"]
        for shape in scene.shapes:
            corners = shape.corners + [shift, 0]
            lines.append(" ".join(f"{v:.1f}" for v in corners.reshape(-1)) + f" {shape.label} 0")
        (folder / "labelTxt" / f"{Path(scene.name).stem}.txt").write_text("\n".join(lines) + "\n")
    return folder


def single_colour(count: int, seed: int = 0) -> list[tuple[str, np.ndarray]]:
    """Pictures of one shape each, in turn red, green and blue: what the demo classifier tells apart."""
    rng = np.random.default_rng(seed)
    pictures = []
    for index in range(count):
        label = list(COLOURS)[index % 3]
        pixels = np.zeros((96, 128, 3), np.uint8)
        centre = (int(rng.integers(40, 88)), int(rng.integers(35, 61)))
        cv2.circle(pixels, centre, int(rng.integers(15, 30)), COLOURS[label], -1)
        pictures.append((label, pixels))
    return pictures


def class_folders(folder: Path, pictures: list[tuple[str, np.ndarray]]) -> Path:
    for index, (label, pixels) in enumerate(pictures):
        (folder / label).mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(folder / label / f"picture-{index:02d}.png"), pixels)
    return folder


def class_csv(folder: Path, pictures: list[tuple[str, np.ndarray]], labels: list[str] | None = None) -> Path:
    """A file,label CSV; `labels` replaces the true labels, to give the engine wrong ground truth."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "labels.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["file", "label"])
        for index, (label, pixels) in enumerate(pictures):
            cv2.imwrite(str(folder / f"picture-{index:02d}.png"), pixels)
            writer.writerow([f"picture-{index:02d}.png", labels[index] if labels else label])
    return path
