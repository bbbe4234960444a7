"""Weight-free demo "model": finds saturated red, green and blue regions on a dark background.

Every baked engine ships this so it runs end to end before real weights are wired in, and the support package's
own tests serve DEMO_MODELS, one per task type, so that they never depend on the model an engine's author wrote.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import cv2
import numpy as np

from chariot_support.model.base import ChariotModel
from chariot_support.model.image import Image
from chariot_support.model.tasks import (
    Classification,
    Detection,
    OrientedDetection,
    PromptAnswer,
    Segmentation,
    TaskType,
)

LABELS = ("red", "green", "blue")

# Hue bands on OpenCV's 0..179 scale; red straddles 0 so it needs two bands.
_HUE_BANDS: dict[str, tuple[tuple[int, int], ...]] = {
    "red": ((0, 10), (170, 179)),
    "green": ((35, 85),),
    "blue": ((100, 130),),
}
# Area (px) at which the size factor of the score reaches 0.5; keeps tiny blobs from scoring high.
_SIZE_HALF_POINT = 500.0
_OPEN_KERNEL = cv2.getStructuringElement(cv2.MORPH_RECT, (3, 3))


@dataclass(frozen=True)
class ColourRegion:
    label: str
    score: float
    contour: np.ndarray
    area: float
    bbox: tuple[int, int, int, int]
    rotated_box: tuple[tuple[float, float], tuple[float, float], float]


@dataclass(frozen=True)
class ColourFinder:
    min_area: int = 50
    min_saturation: int = 100
    min_value: int = 80

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            # bool is an int subclass, but True as a threshold is always a config mistake.
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{f.name} must be an int, got {value!r}")
        if self.min_area < 1 or not (0 <= self.min_saturation <= 255 and 0 <= self.min_value <= 255):
            raise ValueError("need min_area >= 1 and min_saturation, min_value in 0..255")

    @classmethod
    def from_dir(cls, model_dir: Path) -> ColourFinder:
        """Load threshold overrides from ``model_dir/colours.json``; defaults when it is absent."""
        path = Path(model_dir) / "colours.json"
        if not path.is_file():
            return cls()
        overrides = json.loads(path.read_text())
        if not isinstance(overrides, dict):
            raise ValueError(f"{path} must hold a JSON object")
        allowed = sorted(f.name for f in fields(cls))
        for key in overrides:
            if key not in allowed:
                raise ValueError(f"unknown key {key!r} in {path}; allowed: {', '.join(allowed)}")
        return cls(**overrides)

    def find(self, rgb: np.ndarray) -> list[ColourRegion]:
        """All colour regions of at least ``min_area`` pixels, best score first."""
        if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
            raise ValueError(f"expected an RGB uint8 image of shape (H, W, 3), got {rgb.dtype} {rgb.shape}")
        hsv = cv2.cvtColor(rgb, cv2.COLOR_RGB2HSV)
        saturation = np.ascontiguousarray(hsv[:, :, 1])  # OpenCV needs a dense plane for ROI means
        regions = []
        for label in LABELS:
            mask = np.zeros(hsv.shape[:2], np.uint8)
            for lo, hi in _HUE_BANDS[label]:
                band = cv2.inRange(hsv, (lo, self.min_saturation, self.min_value), (hi, 255, 255))
                mask = cv2.bitwise_or(mask, band)
            mask = cv2.morphologyEx(mask, cv2.MORPH_OPEN, _OPEN_KERNEL)
            contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
            for contour in contours:
                x, y, w, h = cv2.boundingRect(contour)
                if w * h < self.min_area:  # cheap reject before rasterising the contour
                    continue
                # Work inside the bounding box so cost scales with the region, not the image.
                inside = np.zeros((h, w), np.uint8)
                cv2.drawContours(inside, [contour], -1, 255, cv2.FILLED, offset=(-x, -y))
                inside = cv2.bitwise_and(inside, mask[y : y + h, x : x + w])
                area = float(cv2.countNonZero(inside))
                if area < self.min_area:
                    continue
                mean_sat = cv2.mean(saturation[y : y + h, x : x + w], mask=inside)[0]
                # score = mean saturation (0..1) * area / (area + 500): both factors in (0, 1].
                score = float(mean_sat / 255.0 * area / (area + _SIZE_HALF_POINT))
                (cx, cy), (rw, rh), angle = cv2.minAreaRect(contour)
                regions.append(
                    ColourRegion(
                        label=label,
                        score=score,
                        contour=contour,
                        area=area,
                        bbox=(x, y, x + w, y + h),
                        rotated_box=((float(cx), float(cy)), (float(rw), float(rh)), float(angle)),
                    )
                )
        regions.sort(key=lambda r: (-r.score, r.label, r.bbox))
        return regions

    def class_scores(self, rgb: np.ndarray) -> dict[str, float]:
        """Share of coloured "mass" (area * mean saturation) per label; equal thirds if none."""
        weights = dict.fromkeys(LABELS, 0.0)
        for region in self.find(rgb):
            # score / size factor recovers mean saturation, so this is area * mean_sat / 255.
            weights[region.label] += region.score * (region.area + _SIZE_HALF_POINT)
        total = sum(weights.values())
        if total <= 0:
            return {label: 1.0 / len(LABELS) for label in LABELS}
        return {label: weights[label] / total for label in LABELS}

    def describe(self, rgb: np.ndarray, prompt: str) -> str:
        """Deterministic answer: about the colours the prompt names, else a summary of all."""
        counts = Counter(region.label for region in self.find(rgb))
        words = set(re.findall(r"[a-z]+", prompt.lower()))
        asked = [label for label in LABELS if label in words]
        if asked:
            answers = [f"yes, {_count(counts[c], c)}" if counts[c] else f"no {c} regions" for c in asked]
            return "; ".join(answers) + "."
        found = [_count(counts[c], c) for c in LABELS if counts[c]]
        if not found:
            return "I found no red, green or blue regions."
        summary = found[0] if len(found) == 1 else ", ".join(found[:-1]) + " and " + found[-1]
        if "how many" in prompt.lower():
            total = sum(counts.values())
            return f"{total} region{'' if total == 1 else 's'} in total: {summary}."
        return f"I found {summary}."

    def occlusion(self, rgb: np.ndarray, results: Sequence) -> list[float]:
        """Occlusion importance, one number per result: how much its score drops when its region is blanked.

        A classification's region is every region of its colour; a prompt answer has no score, so its number
        is the share of the image's regions whose blanking changes the answer.
        """
        return [self._importance(rgb, result) for result in results]

    def _importance(self, rgb: np.ndarray, result) -> float:
        if isinstance(result, PromptAnswer):
            regions = self.find(rgb)
            changed = [
                self.describe(_blank(rgb, _region_mask(rgb, r)), result.prompt) != result.answer for r in regions
            ]
            return sum(changed) / len(regions) if regions else 0.0
        if isinstance(result, Classification):
            mask = np.zeros(rgb.shape[:2], np.uint8)
            for region in self.find(rgb):
                if region.label == result.label:
                    mask |= _region_mask(rgb, region)
            return max(result.score - self.class_scores(_blank(rgb, mask))[result.label], 0.0)
        mask = _result_mask(rgb, result)
        left = [r.score for r in self.find(_blank(rgb, mask)) if r.label == result.label and _touches(r, mask)]
        return max(result.score - max(left, default=0.0), 0.0)


def _region_mask(rgb: np.ndarray, region: ColourRegion) -> np.ndarray:
    mask = np.zeros(rgb.shape[:2], np.uint8)
    cv2.drawContours(mask, [region.contour], -1, 1, cv2.FILLED)
    return mask


def _result_mask(rgb: np.ndarray, result) -> np.ndarray:
    """The pixels a located result covers, grown by a pixel or two so rounding leaves no sliver behind."""
    height, width = rgb.shape[:2]
    mask = np.zeros((height, width), np.uint8)
    if isinstance(result, Detection):
        x0, y0 = int(np.floor(result.xmin)), int(np.floor(result.ymin))
        mask[max(y0, 0) : int(np.ceil(result.ymax)), max(x0, 0) : int(np.ceil(result.xmax))] = 1
    elif isinstance(result, OrientedDetection):
        rect = ((result.cx * width, result.cy * height), (result.w * width, result.h * height), np.degrees(result.r))
        cv2.fillPoly(mask, [np.round(cv2.boxPoints(rect)).astype(np.int32)], 1)
    elif isinstance(result, Segmentation):
        polygons = [np.round([(p["x"], p["y"]) for p in points]).astype(np.int32) for points in result.contour]
        cv2.fillPoly(mask, polygons, 1)
    else:
        raise TypeError(f"no region for a {type(result).__name__}")
    return cv2.dilate(mask, _OPEN_KERNEL, iterations=2)


def _blank(rgb: np.ndarray, mask: np.ndarray) -> np.ndarray:
    occluded = rgb.copy()
    occluded[mask.astype(bool)] = 0  # the demo's background is black
    return occluded


def _touches(region: ColourRegion, mask: np.ndarray) -> bool:
    """Whether the region meets the blanked area (what is left of a region cut in two sits right beside it)."""
    x0, y0, x1, y1 = region.bbox
    return bool(mask[max(y0 - 1, 0) : y1 + 1, max(x0 - 1, 0) : x1 + 1].any())


def _count(n: int, colour: str) -> str:
    return f"{n} {colour} region{'' if n == 1 else 's'}"


class _Demo(ChariotModel):
    """What every demo model shares: the colour finder, read from model_dir, and explanation by occlusion."""

    thread_safe = True  # the finder keeps no per-request state

    def load(self, model_dir: Path) -> None:
        self.finder = ColourFinder.from_dir(model_dir)

    def explain(
        self, images: Sequence[Image], tensors: Mapping[str, np.ndarray], results: Sequence[Sequence]
    ) -> list[dict]:
        return [
            {"importance_scores": self.finder.occlusion(image.pixels, chosen)}
            for image, chosen in zip(images, results, strict=True)
        ]


class DemoClassifier(_Demo):
    task_type = TaskType.IMAGE_CLASSIFICATION

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Classification]]:
        return [
            [Classification(label=label, score=score) for label, score in self.finder.class_scores(i.pixels).items()]
            for i in images
        ]


class DemoDetector(_Demo):
    task_type = TaskType.OBJECT_DETECTION

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Detection]]:
        return [
            [
                Detection(label=r.label, score=r.score, xmin=r.bbox[0], ymin=r.bbox[1], xmax=r.bbox[2], ymax=r.bbox[3])
                for r in self.finder.find(i.pixels)
            ]
            for i in images
        ]


class DemoOrientedDetector(_Demo):
    task_type = TaskType.ORIENTED_OBJECT_DETECTION

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[OrientedDetection]]:
        return [
            [
                OrientedDetection.from_rotated_rect(r.label, r.score, r.rotated_box, i.width, i.height)
                for r in self.finder.find(i.pixels)
            ]
            for i in images
        ]


class DemoSegmenter(_Demo):
    task_type = TaskType.IMAGE_SEGMENTATION

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Segmentation]]:
        return [
            [Segmentation(label=r.label, score=r.score, contour=[r.contour]) for r in self.finder.find(i.pixels)]
            for i in images
        ]


class DemoPromptAnswerer(_Demo):
    task_type = TaskType.IMAGE_TEXT_TO_TEXT

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[PromptAnswer]]:
        return [
            [PromptAnswer(prompt=prompt, answer=self.finder.describe(i.pixels, prompt)) for prompt in i.prompts or [""]]
            for i in images
        ]


DEMO_MODELS: dict[TaskType, type[ChariotModel]] = {
    model.task_type: model
    for model in (DemoClassifier, DemoDetector, DemoOrientedDetector, DemoSegmenter, DemoPromptAnswerer)
}
