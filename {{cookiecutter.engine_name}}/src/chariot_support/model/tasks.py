"""Chariot task types and their result formats: typed results a predict returns, checked and turned into
exactly the dicts the chariot-v2-kserve protocol page shows."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from enum import Enum
from typing import Annotated, Any, overload

import cv2
import numpy as np
import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    TypeAdapter,
    ValidationError,
    WrapValidator,
    model_validator,
    with_config,
)
from typing_extensions import TypedDict  # pydantic needs this one, not typing's, before Python 3.12

from chariot_support.errors import InvalidResult


class TaskType(str, Enum):
    """The task types, named as Chariot names them."""

    IMAGE_CLASSIFICATION = "Image Classification"
    OBJECT_DETECTION = "Object Detection"
    ORIENTED_OBJECT_DETECTION = "Oriented Object Detection"
    IMAGE_SEGMENTATION = "Image Segmentation"
    IMAGE_TEXT_TO_TEXT = "Image Text to Text"

    @property
    def actions(self) -> tuple[str, ...]:
        """The `action` values this task accepts; the first is the default."""
        return _ACTIONS[self]


_ACTIONS = {
    TaskType.IMAGE_CLASSIFICATION: ("predict", "predict_proba"),
    TaskType.OBJECT_DETECTION: ("detect", "predict"),
    TaskType.ORIENTED_OBJECT_DETECTION: ("detect", "predict"),
    TaskType.IMAGE_SEGMENTATION: ("predict", "detect"),
    TaskType.IMAGE_TEXT_TO_TEXT: ("predict",),
}

Score = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False, description="a probability in [0, 1]")]
Finite = Annotated[float, Field(allow_inf_nan=False)]
Unit = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Label = Annotated[str, Field(min_length=1)]


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Classification(_Result):
    """One label with its score: `{label, score}`."""

    label: Label
    score: Score


class Detection(_Result):
    """An axis-aligned box in pixels, y down: `{label, score, xmin, xmax, ymin, ymax}`."""

    label: Label
    score: Score
    xmin: Finite
    xmax: Finite
    ymin: Finite
    ymax: Finite

    @model_validator(mode="after")
    def _ordered(self) -> Detection:
        if self.xmin > self.xmax or self.ymin > self.ymax:
            raise ValueError(
                f"box corners are swapped (xmin={self.xmin}, xmax={self.xmax}, ymin={self.ymin}, ymax={self.ymax}); "
                "xmin <= xmax and ymin <= ymax, in pixels with y down"
            )
        return self


class OrientedDetection(_Result):
    """A rotated box normalised to the image: `{label, score, cx, cy, w, h, r}`.

    cx and w are divided by the image width, cy and h by its height; r is in radians, clockwise positive
    (x right, y down).
    """

    label: Label
    score: Score
    cx: Unit
    cy: Unit
    w: NonNegative
    h: NonNegative
    r: Finite

    @classmethod
    def from_rotated_rect(
        cls, label: str, score: float, rect: tuple, image_width: int, image_height: int
    ) -> OrientedDetection:
        """Build from `cv2.minAreaRect`'s `((cx, cy), (w, h), degrees)` in pixels, in one canonical form.

        OpenCV's angle is measured in image coordinates (y down), so positive is clockwise on screen, as Chariot
        wants. OpenCV describes one box in several ways (a flat 400x40 line may come as 40x400 turned 90 degrees);
        the same four corners are returned as the one form with |r| <= pi/4, so that w is the side nearer the
        horizontal (divided by the image width) and h the other (divided by its height).
        """
        (cx, cy), (w, h), degrees = rect
        degrees = (float(degrees) + 90.0) % 180.0 - 90.0  # [-90, 90): the box looks the same turned half-way
        if degrees > 45.0:
            w, h, degrees = h, w, degrees - 90.0
        elif degrees < -45.0:
            w, h, degrees = h, w, degrees + 90.0
        return cls(
            label=label,
            score=score,
            cx=min(max(cx / image_width, 0.0), 1.0),
            cy=min(max(cy / image_height, 0.0), 1.0),
            w=w / image_width,
            h=h / image_height,
            r=math.radians(degrees),
        )


@with_config(ConfigDict(extra="forbid"))
class Point(TypedDict):
    """One contour point in pixels. A plain dict, as contours run to thousands of points per image and a dict
    is checked and serialised several times faster than a model."""

    x: Finite
    y: Finite


class Contour(Sequence[Point]):
    """One outline of a region: its points in pixels, held as an (N, 2) float array of x, y rows, read like a list of
    `{x, y}` dicts. Results hold thousands of points; kept as an array they are checked and written out as JSON
    many times faster than as one dict per point."""

    __slots__ = ("xy",)

    def __init__(self, xy: np.ndarray):
        xy.flags.writeable = False  # results are frozen: the points are too
        self.xy = xy

    @classmethod
    def from_array(cls, value: np.ndarray) -> Contour:
        """A contour from an array of x, y pairs, such as `cv2.findContours` gives (N x 1 x 2)."""
        if value.dtype.kind not in "iuf":
            raise ValueError(f"a contour array must hold numbers, got dtype {value.dtype}")
        if value.ndim < 2 or value.shape[-1] != 2 or value.size == 0:
            raise ValueError(
                f"a contour array holds x, y pairs (N x 2, or N x 1 x 2 as OpenCV gives), got {value.shape}"
            )
        xy = np.array(value.reshape(-1, 2), dtype=np.float64)  # a copy: the model may reuse its array
        if value.dtype.kind == "f" and not np.isfinite(xy).all():  # whole numbers (OpenCV's) are always finite
            raise ValueError("a contour array must hold finite numbers, not NaN or infinity")
        return cls(xy)

    def __len__(self) -> int:
        return len(self.xy)

    @overload
    def __getitem__(self, index: int) -> Point: ...
    @overload
    def __getitem__(self, index: slice) -> list[Point]: ...
    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.points()[index]
        x, y = self.xy[index].tolist()
        return {"x": x, "y": y}

    def __iter__(self) -> Iterator[Point]:
        return iter(self.points())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Contour):
            return np.array_equal(self.xy, other.xy)
        if isinstance(other, (list, tuple)):
            return self.points() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment] - mutable array inside, as a list is unhashable

    def __repr__(self) -> str:
        return f"Contour({self.points()!r})"

    def points(self) -> list[Point]:
        """The points as `{x, y}` dicts, as the result's JSON has them."""
        return [{"x": x, "y": y} for x, y in self.xy.tolist()]

    @staticmethod
    def json(contours: Sequence[Contour]) -> bytes:
        """Contours as JSON, `[[{"x": ..., "y": ...}, ...], ...]`, written from their arrays at once: numbers hold no
        commas or brackets, so the arrays' `[[[x,y],[x,y]],[[x,y]]]` only needs its brackets and separators
        rewritten."""
        if not contours:
            return b"[]"
        text = orjson.dumps([c.xy for c in contours], option=orjson.OPT_SERIALIZE_NUMPY)[3:-3]  # x,y],[x,y]],[[x,y
        text = text.replace(b",", b',"y":')  # every comma, separators included: x,"y":y],"y":[x,"y":y]],"y":[[x,"y":y
        text = text.replace(b']],"y":[[', b'}],[{"x":').replace(b'],"y":[', b'},{"x":')
        return b'[[{"x":' + text + b"}]]"


def _read_contour(value: Any, checked) -> Contour:
    """An array or a Contour is checked with numpy; anything else is read as a list of `{x, y}` points by pydantic,
    whose errors name the point and field."""
    if isinstance(value, Contour):
        return value
    if isinstance(value, np.ndarray):
        return Contour.from_array(value)
    points = checked(value)
    return Contour(np.array([(p["x"], p["y"]) for p in points], np.float64).reshape(-1, 2))


ContourField = Annotated[
    list[Point],
    Field(min_length=1),
    WrapValidator(_read_contour),
    PlainSerializer(Contour.points, return_type=list[Point]),
]


class Segmentation(_Result):
    """A labelled region as OpenCV-style contours in pixels: `{label, score, contour: [[{x, y}, ...], ...]}`.

    `contour` takes the arrays `cv2.findContours` returns, or lists of `{x, y}` dicts; each is kept as a `Contour`.
    """

    label: Label
    score: Score
    # An empty region (a mask with no pixels) is allowed here and left out of the answer by the engine.
    contour: list[ContourField]

    @classmethod
    def from_mask(cls, label: str, score: float, mask: np.ndarray) -> Segmentation:
        """Build from a binary mask (any non-zero pixel is inside the region). A mask with no pixels gives a region
        with no contour, which the engine leaves out of its answer."""
        return cls(label=label, score=score, contour=contours_from_mask(mask))


class PromptAnswer(_Result):
    """The model's answer to one prompt about an image: `{prompt, answer}`. A request without prompts asks about the
    image itself (a caption, the text it reads): its one answer has the empty prompt, `PromptAnswer(answer=...)`."""

    prompt: str = ""
    answer: str


def contours_from_mask(mask: np.ndarray) -> list[np.ndarray]:
    """The outer contours of a binary mask, as `cv2.findContours` gives them (each `(N, 1, 2)` int32, x then y)."""
    if mask.ndim != 2:
        raise ValueError(f"a mask is a 2-D array, got shape {mask.shape}")
    binary = (mask != 0).astype(np.uint8)
    contours, _ = cv2.findContours(binary, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    return list(contours)


RESULT_TYPES: dict[TaskType, type[_Result]] = {
    TaskType.IMAGE_CLASSIFICATION: Classification,
    TaskType.OBJECT_DETECTION: Detection,
    TaskType.ORIENTED_OBJECT_DETECTION: OrientedDetection,
    TaskType.IMAGE_SEGMENTATION: Segmentation,
    TaskType.IMAGE_TEXT_TO_TEXT: PromptAnswer,
}
_ADAPTERS = {task: TypeAdapter(list[result]) for task, result in RESULT_TYPES.items()}


def _where(error: dict) -> str:
    loc = error["loc"]
    parts = [f"result {loc[0]}"] if loc and isinstance(loc[0], int) else []
    fields = ".".join(str(p) for p in loc[1:] if not isinstance(p, int))
    if fields:
        parts.append(f"field '{fields}'")
    return ", ".join(parts) or "the result list"


def validate_results(task: TaskType, results: Any, image_names: Sequence[str]) -> list[list[_Result]]:
    """Check that predict returned one list of `task` results per image; raise InvalidResult naming what is wrong."""
    result_type = RESULT_TYPES[task].__name__
    if not isinstance(results, (list, tuple)) or len(results) != len(image_names):
        got = f"a list of {len(results)}" if isinstance(results, (list, tuple)) else type(results).__name__
        raise InvalidResult(f"predict must return one list of {result_type} per image ({len(image_names)}), got {got}")
    checked = []
    for index, (name, per_image) in enumerate(zip(image_names, results, strict=True)):
        try:
            checked.append(_ADAPTERS[task].validate_python(per_image))
        except ValidationError as exc:
            first = exc.errors()[0]
            raise InvalidResult(
                f"predict returned an invalid {result_type} for image {index} ('{name}'): "
                f"{_where(first)}: {first['msg']}"
            ) from None
    return checked


def select(
    task: TaskType, results: list[_Result], *, action: str, score_threshold: float | None, prompts: Sequence[str]
) -> list[_Result]:
    """Apply the request's `action`, `score_threshold` and `prompts` to one image's validated results."""
    if task is TaskType.IMAGE_TEXT_TO_TEXT:
        answered = [r.prompt for r in results]  # type: ignore[attr-defined]
        if not prompts and answered != [""]:
            raise InvalidResult(
                "predict must answer an image sent without prompts with one PromptAnswer(answer=...) about the image"
                f" itself (its prompt the empty string), answered {answered}; raise BadRequest if the model needs a prompt"
            )
        if prompts and answered != list(prompts):
            raise InvalidResult(f"predict must answer the prompts {list(prompts)} in that order, answered {answered}")
        return results
    if score_threshold is not None:
        results = [r for r in results if r.score >= score_threshold]  # type: ignore[attr-defined]
    if task is TaskType.IMAGE_SEGMENTATION:
        results = [r for r in results if r.contour]  # type: ignore[attr-defined]
    if task is TaskType.IMAGE_CLASSIFICATION:
        results = sorted(results, key=lambda r: r.score, reverse=True)  # type: ignore[attr-defined]
        if action == "predict":
            results = results[:1]
    return results


def to_dicts(results: list[_Result]) -> list[dict]:
    """The results as plain JSON values."""
    return [r.model_dump() for r in results]


def to_json(results: list[_Result]) -> bytes:
    """The results as JSON text: `to_dicts` written out, with contours written straight from their arrays."""
    parts = []
    for r in results:
        if isinstance(r, Segmentation):
            head = orjson.dumps({"label": r.label, "score": r.score})[:-1]
            parts.append(head + b',"contour":' + Contour.json(r.contour) + b"}")  # type: ignore[arg-type]
        else:  # a result's __dict__ holds its fields, in order, and nothing else (extra fields are forbidden)
            parts.append(orjson.dumps(r.__dict__))
    return b"[" + b",".join(parts) + b"]"
