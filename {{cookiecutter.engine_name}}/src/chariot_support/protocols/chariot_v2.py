"""Chariot's `chariot-v2` protocol at `/infer`: one image per JSON object (`{"input": "<base64>", "parameters": {}}`),
one object per line in JSONL, or the image file itself as the body with its parameters in a header. Read into the
same request as chariot-v2-kserve, each image named in messages as its sender knows it (the body, line 3), and
answered `{"output": [<results>]}`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from chariot_support.errors import BadRequest
from chariot_support.protocols.chariot_v2_kserve import decode_base64, refuse_reserved
from chariot_support.protocols.images import IMAGE_MAGIC
from chariot_support.protocols.request import ImageFile, Place, Request, Tensor

PARAMETERS_HEADER = "chariot-inference-parameters"
JSON_TYPES = ("application/json", "text/json")
JSONL_TYPES = ("application/jsonl", "application/x-ndjson", "application/ndjson", "application/json-lines")
# What makes a JSONL line not blank (bytes.strip's whitespace is regex's \s). Lines are found by searching for it, so
# a run of blank lines is skipped in C: 64 MiB of newlines took 37 s line by line in Python.
_CONTENT = re.compile(rb"\S")
# Keys MLServer's Parameters reads as its own fields: as image parameters they would turn an image into text.
_KEYS = ("input", "parameters")
# The Open Inference Protocol's binary tensor data extension (protocols/v2_binary.py) sends a JSON head whose inputs
# give their `binary_data_size`, then the tensors' bytes, with an Inference-Header-Content-Length header saying where
# the JSON ends. Without the header the body reads as broken JSON: the message says what is missing instead.
BINARY_DATA_MARK = b'"binary_data_size"'
BINARY_DATA = (
    "{where} is JSON followed by binary tensor data (the binary tensor data extension) without the"
    " Inference-Header-Content-Length header, which gives the length of the JSON: send the header"
)
# chariot-v2's own binary form is the image file as the body.
BINARY_ON_CHARIOT_V2 = (
    "the request has an Inference-Header-Content-Length header: it is in the Open Inference Protocol's binary tensor"
    " data extension, which this engine reads at /v2/models/<name>/infer; its /infer speaks chariot-v2"
    " (CHARIOT_INFERENCE_PROTOCOL), whose binary form is the image file itself as the body"
)


class Protocol(StrEnum):
    """What `/infer` speaks. AUTO tells the two apart by the request itself."""

    AUTO = "auto"
    KSERVE = "chariot-v2-kserve"
    CHARIOT_V2 = "chariot-v2"


class Form(StrEnum):
    """The three shapes of a chariot-v2 request, each answered in its own shape."""

    JSON = "json"
    JSONL = "jsonl"
    FILE = "file"


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


@dataclass(frozen=True)
class ChariotV2Request:
    form: Form
    request: Request


def choose(protocol: Protocol, content_type: str | None, body: bytes) -> tuple[Protocol, Any]:
    """Which protocol answers this `/infer` request, and the JSON body when it is already read (else None).

    Pinned, the setting decides. Otherwise JSONL, and image files under any label, are chariot-v2; a JSON object with
    'input' (and no 'inputs') is chariot-v2, and every other JSON body chariot-v2-kserve, the default, whose checks
    say what is wrong with it. A body that starts with '{' is read as JSON whatever its label, as `curl -d` labels
    JSON as form data."""
    kind = media_type(content_type)
    if protocol is Protocol.KSERVE:
        if not body.strip():
            raise BadRequest(_empty_message(protocol))
        return Protocol.KSERVE, None
    if protocol is Protocol.CHARIOT_V2 or kind in JSONL_TYPES:
        return Protocol.CHARIOT_V2, None
    looks_json = body.lstrip()[:1] in (b"{", b"[")
    # No type, or curl -d's form type, on a body that is no image file: a JSON body, probably a broken one.
    unlabelled = kind in ("", "application/x-www-form-urlencoded") and not body.startswith(IMAGE_MAGIC)
    if kind in JSON_TYPES or looks_json or unlabelled:
        if not body.strip():
            raise BadRequest(_empty_message(protocol))
        try:
            value = orjson.loads(body)
        except ValueError:
            return Protocol.KSERVE, None  # chariot-v2-kserve, the default, says what is wrong with it
        if isinstance(value, dict) and "input" in value and "inputs" not in value:
            return Protocol.CHARIOT_V2, value
        return Protocol.KSERVE, value
    return Protocol.CHARIOT_V2, None


def _empty_message(protocol: Protocol) -> str:
    if protocol is Protocol.KSERVE:
        return "the request body is empty: send a JSON object with an 'inputs' list"
    return (
        "the request body is empty: send the image file itself, a JSON object"
        ' {"input": "<base64 of the image>", "parameters": {...}}, or JSONL with one such object per line'
    )


def read_json(raw: bytes, where: str) -> Any:
    """`raw` read as JSON (with orjson: a body is read once, on every inference route); a broken one is a 400."""
    try:
        return orjson.loads(raw)
    except ValueError as exc:  # orjson's JSONDecodeError, invalid UTF-8 included
        if BINARY_DATA_MARK in raw:
            raise BadRequest(BINARY_DATA.format(where=where)) from None
        raise BadRequest(f"{where} is not valid JSON: {exc}") from None


def form_of(content_type: str | None, body: bytes, decoded: Any = None) -> Form:
    kind = media_type(content_type)
    if kind in JSONL_TYPES:
        return Form.JSONL
    if decoded is not None or kind in JSON_TYPES or body.lstrip()[:1] in (b"{", b"["):
        return Form.JSON
    return Form.FILE


def parse(
    body: bytes, content_type: str | None, parameters_header: str | None, max_inputs: int, *, decoded: Any = None
) -> ChariotV2Request:
    """Read a chariot-v2 request into the request the runtime answers; `decoded` is the JSON body when the caller
    has already read it. Every rejection names the line, field or header at fault."""
    form = form_of(content_type, body, decoded)
    if form is Form.JSONL:
        inputs = []
        for n, line in jsonl_lines(body):
            if len(inputs) == max_inputs:
                raise too_many_lines(max_inputs)
            inputs.append(_json_input(read_json(line, f"line {n}"), Place(f"line {n}", "'input'"), f"line-{n}"))
        if not inputs:
            raise BadRequest(_empty_message(Protocol.CHARIOT_V2))
        return ChariotV2Request(Form.JSONL, Request(inputs=inputs))
    if form is Form.JSON:
        value = decoded if decoded is not None else read_json(body, "the request body")
        place = Place("the request body", "'input'")
        return ChariotV2Request(Form.JSON, Request(inputs=[_json_input(value, place, "input")]))
    if not body:
        raise BadRequest(_empty_message(Protocol.CHARIOT_V2))
    place = Place("the request body", "the image", f"the {PARAMETERS_HEADER} header", apart=True)
    settings = _header_parameters(parameters_header)
    return ChariotV2Request(
        Form.FILE, Request(inputs=[Tensor("body", [ImageFile(body)], parameters=settings or None, place=place)])
    )


def jsonl_lines(body: bytes) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines of a JSONL body with their numbers, one at a time: a body of millions of lines is never
    split into a list."""
    start, number = 0, 1  # `start` begins line `number`
    while (found := _CONTENT.search(body, start)) is not None:
        begin = body.rfind(b"\n", start, found.start()) + 1 or start
        number += body.count(b"\n", start, begin)
        end = body.find(b"\n", found.start())
        end = len(body) if end == -1 else end
        yield number, body[begin:end]
        start, number = end + 1, number + 1


def too_many_lines(max_inputs: int) -> BadRequest:
    return BadRequest(
        f"the request has more than {max_inputs} lines; this engine takes at most {max_inputs} images per request"
        " (CHARIOT_MAX_INPUTS)"
    )


class LineCounter:
    """Counts the non-blank lines of a JSONL body chunk by chunk as it arrives, so that the limit on images is
    checked while the body is read, not after."""

    def __init__(self, max_inputs: int):
        self.max_inputs = max_inputs
        self.lines = 0
        self._open = False  # the last chunk ended inside a line that has something in it

    def add(self, chunk: bytes) -> None:
        """Count `chunk`'s lines; BadRequest once there are more than the limit. Only lines with something in them
        cost a step: blank ones are skipped by searching past them."""
        position, counted = 0, self._open  # `counted`: the line `position` is on has been counted
        while (found := _CONTENT.search(chunk, position)) is not None:
            if chunk.find(b"\n", position, found.start()) != -1:
                counted = False  # the content is on a later line than `position`
            if not counted:
                self.lines += 1
                if self.lines > self.max_inputs:
                    raise too_many_lines(self.max_inputs)
            end = chunk.find(b"\n", found.start())
            if end == -1:
                self._open = True
                return
            position, counted = end + 1, False
        self._open = counted and chunk.find(b"\n", position) == -1


def _json_input(value: Any, place: Place, name: str) -> Tensor:
    where = place.input
    if not isinstance(value, dict):
        raise BadRequest(f'{where} must be a JSON object {{"input": "<base64>", ...}}, got {type(value).__name__}')
    unknown = sorted(set(value) - set(_KEYS))
    if unknown:
        raise BadRequest(f"{where} has an unknown key {unknown[0]!r}; chariot-v2 takes 'input' and 'parameters'")
    if "input" not in value:
        raise BadRequest(f"{where} has no 'input': send the image file as base64 in 'input'")
    image = value["input"]
    if not isinstance(image, str):
        raise BadRequest(f"{where}: 'input' must be a base64 string of the image file, got {type(image).__name__}")
    file = ImageFile(decode_base64(image, f"{where}: 'input'"))
    parameters = value.get("parameters", {})
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        raise BadRequest(f"{where}: 'parameters' must be a JSON object, got {type(parameters).__name__}")
    return Tensor(name, [file], parameters=refuse_reserved(parameters, f"{where}: 'parameters'") or None, place=place)


def _header_parameters(value: str | None) -> dict:
    if value is None or not value.strip():
        return {}
    where = f"the {PARAMETERS_HEADER} header"
    parameters = read_json(value.encode("utf-8", "surrogateescape"), where)
    if not isinstance(parameters, dict):
        raise BadRequest(
            f'{where} must be a JSON object such as {{"action": "detect", "score_threshold": 0.5}},'
            f" got {type(parameters).__name__}"
        )
    return refuse_reserved(parameters, where)


def render(results: list[bytes], form: Form) -> tuple[bytes, str]:
    """The body and its media type: `{"output": [...]}` per image (each image's results already JSON text), as
    JSONL lines when the request was JSONL."""
    if form is Form.JSONL:
        return b"".join(b'{"output":' + r + b"}\n" for r in results), "application/jsonl"
    return b'{"output":' + results[0] + b"}", "application/json"
