"""Reading a chariot-v2-kserve request: its inputs, parameters, metadata and image files, checked once against the
protocol and the engine's limits (`parse_request`, which every protocol's request passes through), with every
rejection naming the input and what was expected."""

from __future__ import annotations

import base64
import binascii
import json
import re
import sys
from collections.abc import Mapping
from functools import cache
from typing import Any

import numpy as np

from chariot_support.errors import BadRequest, TooLarge
from chariot_support.model.tasks import TaskType
from chariot_support.protocols.images import IMAGE_MAGIC, check_image, decoded_bytes
from chariot_support.protocols.request import ImageFile, ImageInput, ParsedRequest, Place, Request, Tensor
from chariot_support.protocols.tensors import (
    NUMERIC_DTYPES,
    check_shape,
    datatype_of,
    decode_tensor,
    flat_data,
    too_many_elements,
)
from chariot_support.settings import DEFAULTS, EngineSettings

HEADER_TEXT = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
# BYTES inputs carry images unless they say they carry text.
IMAGE_CONTENT_TYPES = (None, "base64", "image", "pil_image", "img")


_REQUEST_KEYS = frozenset(("id", "parameters", "inputs"))
_INPUT_KEYS = frozenset(("name", "shape", "datatype", "data", "parameters"))
_DATATYPES = frozenset((*NUMERIC_DTYPES, "BYTES"))


def plain_parameters(value: Any) -> bool:
    # content_type and headers are fields of the server's parameters model: a content_type that is a string reads
    # the same either way (clients built on MLServer's codecs send one with every input); any other, and any
    # headers, take the server's own reading.
    if value is None:
        return True
    return isinstance(value, dict) and isinstance(value.get("content_type", ""), str) and "headers" not in value


def request_from_json(body: Any) -> Request | None:
    """A V2 request read from its JSON object when it has exactly the plain shape every client sends (string
    names, integer shapes, known datatypes, parameter objects): the engine's fast path. Anything else is None,
    and the caller lets the server's request model read it, with its coercions and its error messages."""
    if not isinstance(body, dict) or not body.keys() <= _REQUEST_KEYS:
        return None
    inputs, request_id = body.get("inputs"), body.get("id")
    if not isinstance(inputs, list) or not (request_id is None or isinstance(request_id, str)):
        return None
    if not plain_parameters(body.get("parameters")):
        return None
    tensors = []
    for tensor in inputs:
        if not isinstance(tensor, dict) or not tensor.keys() <= _INPUT_KEYS:
            return None
        name, shape, datatype = tensor.get("name"), tensor.get("shape"), tensor.get("datatype")
        if not (isinstance(name, str) and isinstance(datatype, str) and isinstance(shape, list) and "data" in tensor):
            return None
        if datatype not in _DATATYPES:
            return None
        if not all(type(d) is int for d in shape) or not plain_parameters(tensor.get("parameters")):
            return None
        tensors.append(
            Tensor(name=name, data=tensor["data"], shape=shape, datatype=datatype, parameters=tensor.get("parameters"))
        )
    return Request(inputs=tensors, parameters=body.get("parameters"), id=request_id)


def parameters_of(parameters: Any) -> dict[str, Any]:
    """Parameters as a plain dict, without the transport headers the server tucks into them: a mapping, or the
    server's parameters object (its declared `content_type` and any extra keys)."""
    if parameters is None:
        return {}
    if isinstance(parameters, Mapping):
        return {k: v for k, v in parameters.items() if k != "headers"}
    values = dict(parameters.model_extra or {})
    if parameters.content_type is not None:
        values["content_type"] = parameters.content_type
    return values


def parse_request(request: Any, task: TaskType, limits: EngineSettings = DEFAULTS) -> ParsedRequest:
    """Check the envelope and every input of a V2 request (a `Request`, or the server's object with the same
    fields), each image's base64 read once and its file checked from its header (no pixel decoded); raise BadRequest
    naming the first problem, TooLarge (413) for what these settings can never serve."""
    if not request.inputs:
        raise BadRequest("the request has no inputs: send at least one image as a BYTES input")
    if len(request.inputs) > limits.max_inputs:
        raise BadRequest(f"the request has {len(request.inputs)} inputs; this engine takes at most {limits.max_inputs}")
    shared = parameters_of(request.parameters)
    metadata = read_metadata(shared, "parameters.metadata")
    images: list[ImageInput] = []
    tensors: dict[str, np.ndarray] = {}
    seen: set[str] = set()
    elements = 0
    for index, tensor in enumerate(request.inputs):
        place = getattr(tensor, "place", None)
        where = place.input if place is not None else f"input '{tensor.name}'" if tensor.name else f"inputs[{index}]"
        if not tensor.name:
            raise BadRequest(f"{where} has an empty name; give every input a name")
        if tensor.name in seen:
            raise BadRequest(f"{where} appears twice; input names must be unique")
        seen.add(tensor.name)
        own = parameters_of(tensor.parameters)
        content_type = own.get("content_type")
        if datatype_of(tensor) == "BYTES" and content_type in IMAGE_CONTENT_TYPES:
            images.append(_image_input(tensor, place or Place(where), own, shared, task, limits))
        else:
            tensors[tensor.name] = decode_tensor(tensor, where)
            elements += tensors[tensor.name].size
            if elements > limits.max_elements:
                raise too_many_elements(
                    where if len(tensors) == 1 else f"{where}, with the inputs before it,", limits.max_elements
                )
    if not images:
        raise BadRequest("the request has no image input: send each image as a BYTES input holding base64 of the file")
    return ParsedRequest(
        images=tuple(images), tensors=tensors, metadata=metadata, decoded_bytes=_decoded_bytes(images, limits)
    )


def _decoded_bytes(images: list[ImageInput], limits: EngineSettings) -> int:
    """What decoding the request's images holds at its peak; a 413 when these settings can never decode them."""
    sizes = [image.width * image.height for image in images]
    if sum(sizes) > limits.max_request_pixels:
        raise TooLarge(
            f"the request's images hold {sum(sizes):,} pixels, more than this engine decodes for one request"
            f" ({limits.max_request_pixels:,}, CHARIOT_MAX_REQUEST_PIXELS): send fewer or smaller images"
        )
    cost = decoded_bytes(sizes)
    if cost > limits.decode_budget_mb << 20:
        raise TooLarge(
            f"the request's images decode to {cost >> 20:,} MiB, more than this engine's decode budget"
            f" ({limits.decode_budget_mb:,} MiB, CHARIOT_DECODE_BUDGET_MB): send fewer or smaller images"
        )
    return cost


# Parameters MLServer's codecs give a meaning of their own: never an image's setting.
RESERVED_PARAMETERS = ("content_type", "headers")


def refuse_reserved(values: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """`values`, a request's settings sent apart from a V2 tensor (chariot-v2, KServe V1, TF Serving), unless one
    of them is a name MLServer reserves."""
    reserved = [k for k in RESERVED_PARAMETERS if k in values]
    if reserved:
        raise BadRequest(f"{where}: {reserved[0]!r} is not a setting this engine takes beside an image")
    return values


def read_metadata(parameters: Mapping[str, Any], where: str) -> str | None:
    """Chariot's metadata is a JSON-encoded string; it is checked, then passed through untouched."""
    if "metadata" not in parameters:
        return None
    value = parameters["metadata"]
    if not isinstance(value, str):
        raise BadRequest(f"{where} must be a JSON-encoded string (json.dumps of an object), got {type(value).__name__}")
    try:
        decoded = json.loads(value)
    except ValueError as exc:
        raise BadRequest(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(decoded, dict):
        raise BadRequest(f"{where} must encode a JSON object, got {type(decoded).__name__}")
    return value


def _setting(name: str, own: Mapping[str, Any], shared: Mapping[str, Any], place: Place):
    """The value of setting `name` for one image, and a function naming it in messages: `named(what)`."""
    if name in own:
        if place.apart:
            return own[name], lambda what: f"{place.parameters}: {what}"
        return own[name], lambda what: f"{place.input}: {what} in {place.parameters}"
    return shared.get(name), lambda what: f"{place.input}: {what} in request parameters"


def _image_input(
    tensor: Any, place: Place, own: Mapping[str, Any], shared: Mapping[str, Any], task: TaskType, limits: EngineSettings
) -> ImageInput:
    where, item = place.input, f"{place.input}: {place.data}"
    values = flat_data(tensor)
    check_shape(tensor.shape, len(values), where)
    if len(values) != 1:
        raise BadRequest(f"{where} holds {len(values)} images; send each image as its own input with shape [1]")
    encoded = _image_bytes(values[0], item)
    width, height, kind = check_image(encoded, where, limits, item)
    action, named = _setting("action", own, shared, place)
    if action is None:
        action = task.actions[0]
    elif action not in task.actions:
        allowed = ", ".join(repr(a) for a in task.actions)
        raise BadRequest(f"{named(f'unknown action {action!r}')} for {task.value}; allowed: {allowed}")
    threshold, threshold_named = _setting("score_threshold", own, shared, place)
    prompts, prompts_named = _setting("prompts", own, shared, place)
    # Optional for every task: an Image Text to Text model answers each prompt (a question or instruction about the
    # image), or the image itself when there is none (a caption, the text it reads).
    prompts = _read_prompts(prompts, prompts_named("'prompts'"))
    merged = {k: v for k, v in {**shared, **own}.items() if k != "metadata"}
    return ImageInput(
        name=tensor.name,
        encoded=encoded,
        width=width,
        height=height,
        kind=kind,
        action=action,
        score_threshold=_read_threshold(threshold, threshold_named("'score_threshold'")),
        prompts=prompts,
        parameters=merged,
        metadata=read_metadata(
            own, f"{place.parameters}: 'metadata'" if place.apart else f"{where}: parameters.metadata"
        ),
        where=where,
        item=item,
    )


def _read_threshold(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise BadRequest(f"{where} must be a number between 0 and 1, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise BadRequest(f"{where} must be a number between 0 and 1, got {value!r}")
    return float(value)


def _read_prompts(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    # gRPC parameters cannot hold lists, so a JSON-encoded list is accepted too.
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise BadRequest(f"{where} looks like a JSON list but is not valid JSON: {exc}") from None
    elif isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise BadRequest(
            f"{where} must be a list of strings (questions or instructions about the image), got {json.dumps(value)[:100]}"
        )
    return tuple(value)


def refuse_data_url(text: str, where: str) -> None:
    """A browser's `data:image/png;base64,` prefix is not base64; say to drop it rather than that it is invalid."""
    if text[:5].lower() == "data:" and "," in text[:200]:
        raise BadRequest(
            f"{where} starts with a data URL prefix ({text[: text.index(',')]},): drop the prefix and send only the"
            " base64 after the comma"
        )


@cache
def _whitespace() -> dict[int, None]:
    """Every character str.split() splits on, for str.translate to drop (made on first use: it takes 70 ms)."""
    return dict.fromkeys(c for c in range(sys.maxunicode + 1) if chr(c).isspace())


def _without_whitespace(text: str) -> str:
    """`text` with its whitespace dropped, as "".join(text.split()) gives it but without the list of pieces that
    builds: a 64 MiB string of short pieces peaked at 1.5 GB that way."""
    return text.translate(_whitespace())


def decode_base64(text: str, where: str) -> bytes:
    """The non-empty file `text` holds as standard base64 (line-wrapped, MIME style, is tolerated, nothing else);
    anything else is refused, saying where it was."""
    refuse_data_url(text, where)
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        try:
            raw = base64.b64decode(_without_whitespace(text), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadRequest(f"{where} is not valid base64 ({exc}); send the image file as standard base64") from None
    if not raw:
        raise BadRequest(f"{where} is empty; send the image file as base64")
    return raw


def _image_bytes(value: Any, item: str) -> bytes:
    """The image file an input's element holds: a file its protocol already read, the bytes of a file (gRPC and
    binary data carry files as they are), or base64 (as text or bytes), decoded here, once."""
    if isinstance(value, ImageFile):
        return value.data
    if isinstance(value, (bytes, bytearray)):
        if bytes(value[:4]).startswith(IMAGE_MAGIC):
            return bytes(value)
        value = bytes(value).decode("ascii", errors="replace")
    if not isinstance(value, str):
        raise BadRequest(f"{item} must be a base64 string of an image file, got {type(value).__name__}")
    return decode_base64(value, item)
