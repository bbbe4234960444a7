"""tune.png: throughput against p99 latency, one line per setting through its concurrency levels, the latency bound
the choice kept to and the recommended point marked; drawn with OpenCV, which every engine has."""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

from chariot_support.dev.tune.choose import Point, clients, final

WIDTH, HEIGHT = 1200, 680
LEFT, RIGHT, TOP, BOTTOM = 90, 330, 60, 70  # the plot area's margins; the legend sits in the right one
FONT = cv2.FONT_HERSHEY_SIMPLEX
INK, GRID = (40, 40, 40), (225, 225, 225)
# Distinct colours (BGR), for up to ten settings; more go round again.
PALETTE = [
    (180, 119, 31),
    (14, 127, 255),
    (44, 160, 44),
    (40, 39, 214),
    (189, 103, 148),
    (75, 86, 140),
    (194, 119, 227),
    (127, 127, 127),
    (34, 189, 188),
    (207, 190, 23),
]


def ticks(top: float) -> list[float]:
    """About five round steps from 0 past `top`."""
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / 5
    step = min((m * 10 ** math.floor(math.log10(raw)) for m in (1, 2, 2.5, 5, 10)), key=lambda s: abs(s - raw))
    return [i * step for i in range(int(top / step) + 2)]


def draw(points: list[Point], chosen: Point | None, bound_ms: float | None, title: str, path: Path) -> None:
    """Write the chart to `path` (PNG); with no usable point, a chart that says so."""
    image = np.full((HEIGHT, WIDTH, 3), 255, np.uint8)
    cv2.putText(image, title[:95], (LEFT, 28), FONT, 0.65, INK, 1, cv2.LINE_AA)
    shown = [p for p in final(points) if p.usable]
    x_ticks = ticks(max([p.p99_ms for p in shown] + [bound_ms or 0]) * 1.05)
    y_ticks = ticks(max([p.rps for p in shown], default=0) * 1.05)
    x0, y0, x1, y1 = LEFT, HEIGHT - BOTTOM, WIDTH - RIGHT, TOP

    def at(ms: float, rps: float) -> tuple[int, int]:
        return (round(x0 + (x1 - x0) * ms / x_ticks[-1]), round(y0 - (y0 - y1) * rps / y_ticks[-1]))

    for value in x_ticks:
        x = at(value, 0)[0]
        cv2.line(image, (x, y0), (x, y1), GRID, 1)
        cv2.putText(image, f"{value:g}", (x - 12, y0 + 22), FONT, 0.45, INK, 1, cv2.LINE_AA)
    for value in y_ticks:
        y = at(0, value)[1]
        cv2.line(image, (x0, y), (x1, y), GRID, 1)
        cv2.putText(image, f"{value:g}", (x0 - 60, y + 5), FONT, 0.45, INK, 1, cv2.LINE_AA)
    cv2.rectangle(image, (x0, y1), (x1, y0), INK, 1)
    cv2.putText(image, "p99 latency (ms)", ((x0 + x1) // 2 - 70, HEIGHT - 20), FONT, 0.55, INK, 1, cv2.LINE_AA)
    cv2.putText(image, "requests/s", (10, y1 - 15), FONT, 0.55, INK, 1, cv2.LINE_AA)
    if bound_ms is not None:
        x = at(bound_ms, 0)[0]
        for y in range(y1, y0, 12):
            cv2.line(image, (x, y), (x, min(y + 6, y0)), (60, 60, 200), 1)
        cv2.putText(image, f"bound {bound_ms:.0f} ms", (x + 4, y1 + 16), FONT, 0.45, (60, 60, 200), 1, cv2.LINE_AA)
    if not shown:
        cv2.putText(
            image,
            "no setting was measured without errors",
            (x0 + 40, (y0 + y1) // 2),
            FONT,
            0.8,
            (40, 39, 214),
            2,
            cv2.LINE_AA,
        )
    settings = list(dict.fromkeys(p.candidate for p in shown))
    for n, candidate in enumerate(settings):
        colour = PALETTE[n % len(PALETTE)]
        line = sorted((p for p in shown if p.candidate == candidate), key=lambda p: p.clients)
        corners = [at(p.p99_ms, p.rps) for p in line]
        cv2.polylines(image, [np.array(corners, np.int32)], False, colour, 2, cv2.LINE_AA)
        for point, corner in zip(line, corners, strict=True):
            cv2.circle(image, corner, 5, colour, -1, cv2.LINE_AA)
            cv2.putText(image, str(point.clients), (corner[0] + 6, corner[1] - 6), FONT, 0.4, colour, 1, cv2.LINE_AA)
        y = y1 + 20 + 24 * n
        cv2.line(image, (x1 + 20, y - 5), (x1 + 45, y - 5), colour, 3, cv2.LINE_AA)
        cv2.putText(image, candidate.label[:34], (x1 + 52, y), FONT, 0.45, INK, 1, cv2.LINE_AA)
    note_y = y1 + 30 + 24 * len(settings)
    cv2.putText(image, "numbers by the dots: clients at once", (x1 + 20, note_y), FONT, 0.42, INK, 1, cv2.LINE_AA)
    if chosen is not None and chosen.usable:
        red = (0, 0, 200)
        cv2.circle(image, at(chosen.p99_ms, chosen.rps), 14, red, 2, cv2.LINE_AA)
        cv2.circle(image, (x1 + 32, note_y + 36), 9, red, 2, cv2.LINE_AA)
        lines = [
            "recommended:",
            chosen.candidate.label[:30],
            f"{clients(chosen.clients)} at once",
            f"{chosen.rps:.1f} req/s, p99 {chosen.p99_ms:.1f} ms",
        ]
        for n, text in enumerate(lines):
            cv2.putText(image, text, (x1 + 52, note_y + 41 + 20 * n), FONT, 0.45, red, 1, cv2.LINE_AA)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), image):
        raise OSError(f"could not write {path}")
