"""Results drawn on their image, as the command-line client and the evaluation draw them: boxes, rotated boxes and
contours with their label and score, labels and prompt answers as text below the picture. The engine's page
(rest/page.js) draws the same marks in the same colours; tests/support/test_page.py holds the two together."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from chariot_support.model.detectors import oriented_corners

# Outline colours (BGR) that stand out against the demo's saturated red, green and blue shapes and each other.
PALETTE = (
    (0, 215, 255),  # amber
    (255, 0, 255),  # magenta
    (255, 255, 0),  # cyan
    (0, 140, 255),  # orange
    (255, 255, 255),  # white
    (180, 105, 255),  # pink
    (0, 255, 191),  # chartreuse
    (255, 144, 30),  # sky
)
# Labels that name a colour are drawn in it (BGR), so a "red" box is red.
NAMED_COLOURS = {
    "red": (0, 0, 255),
    "green": (0, 255, 0),
    "blue": (255, 0, 0),
    "yellow": (0, 255, 255),
    "cyan": (255, 255, 0),
    "magenta": (255, 0, 255),
    "orange": (0, 165, 255),
    "purple": (128, 0, 128),
    "white": (255, 255, 255),
    "black": (0, 0, 0),
    "grey": (128, 128, 128),
    "gray": (128, 128, 128),
}
# A dark edge under every outline, so a box in its label's colour shows on a shape of that colour.
HALO = (0, 0, 0)
FONT = cv2.FONT_HERSHEY_SIMPLEX


def colour_of(label: str) -> tuple[int, int, int]:
    """A colour per label, the same on every run and every image: the colour itself when the label names one."""
    named = NAMED_COLOURS.get(label.strip().lower())
    return named if named is not None else PALETTE[zlib.crc32(label.encode()) % len(PALETTE)]


def _sizes(image: np.ndarray) -> tuple[int, float]:
    side = min(image.shape[:2])
    return max(2, round(side / 240)), max(0.4, side / 600)


def _caption(image: np.ndarray, text: str, anchor: tuple[int, int], colour: tuple[int, int, int], scale: float) -> None:
    """`text` on a filled label in `colour`, sitting on top of `anchor`, moved inside the image if need be."""
    (width, height), baseline = cv2.getTextSize(text, FONT, scale, 1)
    x = int(min(max(anchor[0], 0), max(image.shape[1] - width - 4, 0)))
    y = int(anchor[1])
    if y - height - baseline - 4 < 0:
        y = height + baseline + 4
    cv2.rectangle(image, (x, y - height - baseline - 4), (x + width + 4, y), colour, cv2.FILLED)
    cv2.putText(image, text, (x + 2, y - baseline - 2), FONT, scale, (0, 0, 0), 1, cv2.LINE_AA)


def wrap(text: str, scale: float, width: int) -> list[str]:
    lines, current = [], ""
    for word in text.split():
        candidate = f"{current} {word}".strip()
        if current and cv2.getTextSize(candidate, FONT, scale, 1)[0][0] > width:
            lines.append(current)
            current = word
        else:
            current = candidate
    return [*lines, current] if current else lines


def _text_panel(image: np.ndarray, lines: Sequence[tuple[str, tuple[int, int, int]]], scale: float) -> np.ndarray:
    """`image` with a dark band added below it holding lines of text, for results that have no place in the
    picture: the picture itself stays whole."""
    height = cv2.getTextSize("Ag", FONT, scale, 1)[0][1]
    step = int(height * 1.8) + 2
    band = np.full((step * len(lines) + 8, image.shape[1], 3), 32, image.dtype)
    for index, (text, colour) in enumerate(lines):
        cv2.putText(band, text, (6, 4 + step * index + height + 2), FONT, scale, colour, 1, cv2.LINE_AA)
    return np.vstack([image, band])


@dataclass(frozen=True)
class Mark:
    """One result as the drawing shows it: outlined on the picture ("box", "oriented", "region") with its caption in
    its label's colour, or written below it ("label", "answer"). The engine's page draws the same marks."""

    kind: str
    caption: str  # "red 0.91": the label and its score to two places; an answer's text
    colour: tuple[int, int, int]  # BGR
    outlines: tuple[np.ndarray, ...] = ()  # each (N, 2) x, y in the picture's pixels, unrounded
    prompt: str = ""  # an answer's prompt ("" for an answer about the picture itself)


def marks(results: Sequence[dict], width: int, height: int) -> list[Mark]:
    """How each of `results` on a `width` x `height` picture is drawn; a result with nothing to show has no mark."""
    found = []
    for result in results:
        label = str(result.get("label", ""))
        colour = colour_of(label)
        caption = f"{label} {result['score']:.2f}" if "score" in result else label
        if {"xmin", "ymin", "xmax", "ymax"} <= result.keys():
            x0, y0, x1, y1 = (float(result[k]) for k in ("xmin", "ymin", "xmax", "ymax"))
            found.append(Mark("box", caption, colour, (np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]]),)))
        elif {"cx", "cy", "w", "h", "r"} <= result.keys():
            found.append(Mark("oriented", caption, colour, (oriented_corners(result, width, height),)))
        elif "contour" in result:
            outlines = tuple(np.array([[p["x"], p["y"]] for p in c], np.float64) for c in result["contour"] if c)
            found.append(Mark("region", caption, colour, outlines))
        elif "answer" in result:
            found.append(Mark("answer", str(result["answer"]), colour, prompt=result.get("prompt") or ""))
        elif label:
            found.append(Mark("label", caption, colour))
    return found


def draw(image: np.ndarray, results: Sequence[dict]) -> np.ndarray:
    """A copy of `image` (BGR) with `results` drawn on it: boxes, rotated boxes and contours with their label and
    score; labels or prompt answers as text in a band added below the picture."""
    canvas = image.copy()
    thickness, scale = _sizes(canvas)
    height, width = canvas.shape[:2]
    text_lines: list[tuple[str, tuple[int, int, int]]] = []
    for mark in marks(results, width, height):
        colour, caption = mark.colour, mark.caption
        if mark.kind == "box":
            (x0, y0), _, (x1, y1), _ = mark.outlines[0]
            top_left, bottom_right = (round(x0), round(y0)), (round(x1), round(y1))
            cv2.rectangle(canvas, top_left, bottom_right, HALO, thickness + 2)
            cv2.rectangle(canvas, top_left, bottom_right, colour, thickness)
            _caption(canvas, caption, top_left, colour, scale)
        elif mark.kind == "oriented":
            corners = np.round(mark.outlines[0]).astype(np.int32)
            cv2.polylines(canvas, [corners], True, HALO, thickness + 2, cv2.LINE_AA)
            cv2.polylines(canvas, [corners], True, colour, thickness, cv2.LINE_AA)
            top = corners[np.argmin(corners[:, 1])]
            _caption(canvas, caption, (int(top[0]), int(top[1])), colour, scale)
        elif mark.kind == "region":
            polygons = [np.array([[round(x), round(y)] for x, y in outline], np.int32) for outline in mark.outlines]
            overlay = canvas.copy()
            # A lighter tint, so a region stays visible when its colour is the label's own ("red" on red).
            cv2.fillPoly(overlay, polygons, tuple((c + 255) // 2 for c in colour))
            cv2.addWeighted(overlay, 0.35, canvas, 0.65, 0, dst=canvas)
            cv2.polylines(canvas, polygons, True, HALO, thickness + 2, cv2.LINE_AA)
            cv2.polylines(canvas, polygons, True, colour, thickness, cv2.LINE_AA)
            points = np.concatenate(polygons)
            top = points[np.argmin(points[:, 1])]
            _caption(canvas, caption, (int(top[0]), int(top[1])), colour, scale)
        elif mark.kind == "answer":
            for text in wrap(f"Q: {mark.prompt}", scale, width - 12) if mark.prompt else []:
                text_lines.append((text, (200, 200, 200)))
            for text in wrap(f"A: {caption}", scale, width - 12):
                text_lines.append((text, (255, 255, 255)))
        else:
            text_lines.append((caption, colour))
    if text_lines:
        canvas = _text_panel(canvas, text_lines, scale)
    return canvas
