"""What crosses the pipeline: every protocol reads its requests into a `Request` (V2-shaped inputs), checked into a
`ParsedRequest` (images as `ImageInput`s, numeric tensors) for the runtime, and renders the `Answer` the pipeline
gives back.

transport       protocol (parse)                 pipeline                        protocol (render)
rest/inference  --> protocols/v2_rest, v2_binary,  --> pipeline/pipeline.Pipeline --> the same module's render
grpc/service    chariot_v2, legacy, v2_grpc        (runtime/runtime in the model's process)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chariot_support.stages.timing import RuntimeStages


@dataclass(frozen=True)
class Place:
    """How messages name an image input that is not a V2 tensor to its sender (chariot-v2's body or JSONL lines):
    the input itself, the image within it, and where its own settings came from."""

    input: str
    data: str = "data[0]"
    parameters: str = "parameters"
    apart: bool = False  # its settings came apart from it (a header): messages about them name that place first


@dataclass(frozen=True)
class ImageFile:
    """An image file as its protocol read it (chariot-v2's body, KServe V1's `b64` once decoded, pixel lists
    written as a PNG): the file itself, never base64 to decode again."""

    data: bytes


@dataclass(frozen=True)
class ImageInput:
    """One image input as sent and checked (a file of a format the engine decodes, whole, within the limits; its
    size and format read from its header), before its pixels are decoded."""

    name: str
    encoded: bytes
    width: int
    height: int
    kind: str | None  # the file's format, as protocols/images.py names it
    action: str
    score_threshold: float | None
    prompts: tuple[str, ...]
    parameters: Mapping[str, Any]
    metadata: str | None
    where: str = ""  # the input as messages name it, e.g. "input 'image-0'"
    item: str = ""  # the image within it, e.g. "input 'image-0': data[0]"

    def __post_init__(self) -> None:
        if not self.where:
            object.__setattr__(self, "where", f"input '{self.name}'")
        if not self.item:
            object.__setattr__(self, "item", f"{self.where}: data[0]")


@dataclass(frozen=True)
class ParsedRequest:
    """A request checked whole (protocols/chariot_v2_kserve.parse_request): what the runtime answers without checking
    any of it again."""

    images: tuple[ImageInput, ...]
    tensors: Mapping[str, np.ndarray]
    metadata: str | None
    decoded_bytes: int = 0  # what decoding its images holds at its peak (protocols/images.decoded_bytes)


@dataclass(frozen=True)
class Tensor:
    """One input of a request as every protocol reads it: a V2 tensor's fields (a V2 body in a shape the engine does
    not read itself is read by MLServer's request model and converted: protocols/v2_rest.request_from_model)."""

    name: str
    data: list
    shape: list[int] = field(default_factory=lambda: [1])
    datatype: str = "BYTES"
    parameters: Mapping[str, Any] | None = None
    place: Place | None = None  # how messages name it, where the sender does not know it as a tensor


@dataclass(frozen=True)
class Request:
    """A V2 inference request: its inputs and request-wide parameters."""

    inputs: list[Tensor]
    parameters: Mapping[str, Any] | None = None
    id: str | None = None


@dataclass(frozen=True)
class Answered:
    """What the runtime answers for one request: each image's name, results (as JSON text) and metadata as sent,
    the request's metadata, the model's explanations when they were asked for, and what the runtime measured of the
    request (its stages). Crosses back from parallel workers."""

    names: tuple[str, ...]
    results: tuple[bytes, ...]
    image_metadata: tuple[str | None, ...]
    metadata: str | None = None
    explanations: tuple[dict, ...] | None = None
    stages: RuntimeStages | None = None


@dataclass(frozen=True)
class Answer:
    """An answered request as every protocol renders it: the runtime's answer, the request id, the model as the
    client named it, the headers every inference response carries (CloudEvents), and when (time.perf_counter()) the
    pipeline had checked the request and had the runtime's answer, for its stages (stages/timing.py)."""

    answered: Answered
    request_id: str
    model_name: str
    model_version: str | None
    headers: dict[str, str]
    parsed_at: float = 0.0
    answered_at: float = 0.0
