"""What crosses the pipeline: every protocol reads its requests into a `decoding.Request` and renders an `Answer`.

transport        protocol (parse)               pipeline                     protocol (render)
front.py    -->  v2.py, chariot_v2.py,    -->   pipeline.Pipeline.answer --> the same module's render
grpc_service     legacy.py, v2_grpc.py          (runtime.ChariotRuntime.answer in the model's process)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Answered:
    """What the runtime answers for one request: each image's name, results (as JSON text) and metadata as sent,
    the request's metadata, and the model's explanations when they were asked for. Crosses to parallel workers."""

    names: tuple[str, ...]
    results: tuple[bytes, ...]
    image_metadata: tuple[str | None, ...]
    metadata: str | None = None
    explanations: tuple[dict, ...] | None = None


@dataclass(frozen=True)
class Answer:
    """An answered request as every protocol renders it: the runtime's answer, the request id, the model as the
    client named it, and the headers every inference response carries (CloudEvents)."""

    answered: Answered
    request_id: str
    model_name: str
    model_version: str | None
    headers: dict[str, str]
