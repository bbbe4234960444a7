"""What nearly every detector's model.py needs around its network: letterbox resizing and its inverse for boxes,
boxes from centre and size, an oriented box's corners, class-aware non-maximum suppression, softmax and sigmoid.
numpy and OpenCV only."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

# The grey most detectors (YOLO's among them) were trained to see in the padding.
PAD_GREY = 114


@dataclass(frozen=True)
class Letterbox:
    """How a picture was fitted into a model's input: scaled by `scale`, then shifted by `left` and `top` pixels of
    padding. `to_picture` takes boxes back."""

    scale: float
    left: int
    top: int
    width: int  # the picture's own size, to clip boxes to
    height: int

    def to_picture(self, boxes: np.ndarray) -> np.ndarray:
        """Boxes (N x 4: x0 y0 x1 y1) in the model input's pixels, as pixels of the picture, clipped to it."""
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        shift = np.array([self.left, self.top, self.left, self.top], dtype=np.float64)
        picture = (boxes - shift) / self.scale
        limits = np.array([self.width, self.height, self.width, self.height], dtype=np.float64)
        return np.clip(picture, 0, limits)


def letterbox(
    pixels: np.ndarray, width: int, height: int, *, fill: int = PAD_GREY, scale_up: bool = True
) -> tuple[np.ndarray, Letterbox]:
    """`pixels` (H x W x C) resized to fit `width` x `height` with its proportions kept, centred on `fill`: what
    YOLO-style detectors were trained on. `scale_up=False` leaves a smaller picture at its size. Returns the
    model's input and the Letterbox that takes boxes back to the picture."""
    if width <= 0 or height <= 0:
        raise ValueError(f"letterbox needs a positive input size, got {width} x {height}")
    h, w = pixels.shape[:2]
    scale = min(width / w, height / h)
    if not scale_up:
        scale = min(scale, 1.0)
    new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
    # Shrinking averages pixels (INTER_AREA); growing interpolates them.
    resized = cv2.resize(pixels, (new_w, new_h), interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    left, top = (width - new_w) // 2, (height - new_h) // 2
    canvas = np.full((height, width, *pixels.shape[2:]), fill, dtype=pixels.dtype)
    canvas[top : top + new_h, left : left + new_w] = resized.reshape(new_h, new_w, *pixels.shape[2:])
    return canvas, Letterbox(scale=scale, left=left, top=top, width=w, height=h)


def corners(centre_size: np.ndarray) -> np.ndarray:
    """Boxes given as centre and size (N x 4: cx cy w h, as YOLO writes them) as corners (x0 y0 x1 y1)."""
    cx, cy, w, h = np.asarray(centre_size, dtype=np.float64).reshape(-1, 4).T
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)


def oriented_corners(box: Any, width: float, height: float) -> np.ndarray:
    """The four corners in pixels (4 x 2) of an oriented box as Chariot gives it, normalised to its image: cx and w by
    `width`, cy and h by `height`, r in radians, clockwise on screen (as OpenCV's angle is, in degrees). `box` is an
    OrientedDetection or its JSON object."""
    cx, cy, w, h, r = (box[k] if isinstance(box, Mapping) else getattr(box, k) for k in ("cx", "cy", "w", "h", "r"))
    return cv2.boxPoints(((cx * width, cy * height), (w * width, h * height), math.degrees(r))).astype(np.float64)


def iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Intersection over union of one box (x0 y0 x1 y1) with each of `others` (N x 4)."""
    x0 = np.maximum(box[0], others[:, 0])
    y0 = np.maximum(box[1], others[:, 1])
    x1 = np.minimum(box[2], others[:, 2])
    y1 = np.minimum(box[3], others[:, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    return np.divide(inter, union, out=np.zeros_like(inter, dtype=np.float64), where=union > 0)


def nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    classes: np.ndarray | None = None,
    *,
    iou_threshold: float = 0.45,
    max_results: int | None = None,
) -> np.ndarray:
    """Non-maximum suppression: indices of the boxes (N x 4: x0 y0 x1 y1) to keep, best score first. A box is
    dropped when a better-scoring one of the same class overlaps it by more than `iou_threshold`; boxes of
    different classes never suppress each other (pass no `classes` to treat them all as one)."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if len(boxes) != len(scores) or (classes is not None and len(classes) != len(scores)):
        raise ValueError(f"nms needs as many scores and classes as boxes: {len(boxes)} boxes, {len(scores)} scores")
    groups = np.zeros(len(scores), dtype=np.int64) if classes is None else np.asarray(classes).reshape(-1)
    order = np.argsort(-scores, kind="stable")
    kept: list[int] = []
    for group in np.unique(groups):
        candidates = order[groups[order] == group]
        while len(candidates):
            best, candidates = candidates[0], candidates[1:]
            kept.append(int(best))
            candidates = candidates[iou(boxes[best], boxes[candidates]) <= iou_threshold]
    best_first = sorted(kept, key=lambda i: (-scores[i], i))
    return np.array(best_first[:max_results], dtype=np.int64)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x), without overflow for large negative x."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Probabilities from logits along `axis`, shifted by the maximum so large logits do not overflow."""
    logits = np.asarray(logits, dtype=np.float64)
    e = np.exp(logits - logits.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
