"""Results kept inside their image, as Chariot requires (its 0.26.0 release: "bounding boxes and segmentations must
now be completely within image boundaries"). Detectors that letterbox or regress past the edges return boxes that
spill over; the engine clips each to the image, and drops one that lies wholly outside it."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from chariot_support.model.detectors import oriented_corners
from chariot_support.model.tasks import Contour, Detection, OrientedDetection, Segmentation, TaskType, _Result


def inside_image(task: TaskType, results: Sequence[_Result], width: int, height: int) -> list[_Result]:
    """One image's validated results, each within `width` x `height` pixels (0 to width, 0 to height)."""
    if task is TaskType.OBJECT_DETECTION:
        return [kept for r in results if (kept := _box(r, width, height)) is not None]  # type: ignore[arg-type]
    if task is TaskType.ORIENTED_OBJECT_DETECTION:
        return [kept for r in results if (kept := _oriented(r, width, height)) is not None]  # type: ignore[arg-type]
    if task is TaskType.IMAGE_SEGMENTATION:
        return [kept for r in results if (kept := _region(r, width, height)) is not None]  # type: ignore[arg-type]
    return list(results)


def _box(box: Detection, width: int, height: int) -> Detection | None:
    xmin, xmax = min(max(box.xmin, 0.0), width), min(max(box.xmax, 0.0), width)
    ymin, ymax = min(max(box.ymin, 0.0), height), min(max(box.ymax, 0.0), height)
    if (xmin, xmax, ymin, ymax) == (box.xmin, box.xmax, box.ymin, box.ymax):
        return box
    if box.xmin >= width or box.xmax <= 0 or box.ymin >= height or box.ymax <= 0:
        return None  # wholly outside (a box touching an edge from outside has nothing inside either)
    return box.model_copy(update={"xmin": xmin, "xmax": xmax, "ymin": ymin, "ymax": ymax})


def _oriented(box: OrientedDetection, width: int, height: int) -> OrientedDetection | None:
    corners = oriented_corners(box, width, height)
    if corners.min() >= 0 and (corners[:, 0] <= width).all() and (corners[:, 1] <= height).all():
        return box
    image = np.array([[0, 0], [width, 0], [width, height], [0, height]], np.float32)
    area, overlap = cv2.intersectConvexConvex(corners.astype(np.float32), image)
    if area <= 0 or overlap is None:
        return None  # wholly outside
    # The part inside the image, as a rotated box again, made small enough about its centre that every corner is in.
    (cx, cy), (w, h), degrees = cv2.minAreaRect(overlap.reshape(-1, 2))
    clipped = OrientedDetection.from_rotated_rect(box.label, box.score, ((cx, cy), (w, h), degrees), width, height)
    corners = oriented_corners(clipped, width, height)
    centre = np.array([clipped.cx * width, clipped.cy * height])
    offset = corners - centre
    # Each corner may reach as far as the edge on its own side of the centre.
    room = np.where(offset < 0, centre, np.array([width, height]) - centre)
    reach = np.abs(offset)
    scale = float(np.min(np.where(reach > 1e-12, room / np.maximum(reach, 1e-12), np.inf), initial=1.0))
    if scale < 1:
        scale *= 1 - 1e-9  # rounding must not put a corner back outside
        clipped = clipped.model_copy(update={"w": clipped.w * scale, "h": clipped.h * scale})
    return clipped


def _region(region: Segmentation, width: int, height: int) -> Segmentation | None:
    kept: list[Contour] = []
    changed = False
    for contour in region.contour:
        xy = contour.xy  # type: ignore[attr-defined]
        if xy.min() >= 0 and (xy[:, 0] <= width).all() and (xy[:, 1] <= height).all():
            kept.append(contour)  # type: ignore[arg-type]
            continue
        changed = True
        if xy[:, 0].min() >= width or xy[:, 0].max() <= 0 or xy[:, 1].min() >= height or xy[:, 1].max() <= 0:
            continue  # wholly outside
        clipped = np.column_stack((np.clip(xy[:, 0], 0, width), np.clip(xy[:, 1], 0, height)))
        kept.append(Contour(clipped))
    if not changed:
        return region
    return region.model_copy(update={"contour": kept}) if kept else None
