"""Reading a chariot-v2-kserve request: its inputs, parameters and metadata, checked against the protocol,
with every rejection naming the input and what was expected."""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import cv2
import numpy as np
import PIL.Image

from .errors import BadRequest
from .tasks import TaskType

NUMERIC_DTYPES = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}
# What an HTTP header value may hold (Latin-1 text without line breaks): ids are echoed in response headers.
HEADER_TEXT = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
# BYTES inputs carry images unless they say they carry text.
IMAGE_CONTENT_TYPES = (None, "base64", "image", "pil_image", "img")
# The start of each image format the decoder reads, to tell raw image bytes from base64 ones.
_IMAGE_MAGIC = (b"\xff\xd8\xff", b"\x89PNG", b"GIF8", b"BM", b"II*\x00", b"MM\x00*", b"RIFF")


@dataclass(frozen=True)
class Limits:
    """How much one request may ask of the engine."""

    max_inputs: int = 64
    max_image_pixels: int = 100_000_000
    max_elements: int = 1_000_000


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Place:
    """How messages name an image input that is not a V2 tensor to its sender (chariot-v2's body or JSONL lines):
    the input itself, the image within it, and where its own settings came from."""

    input: str
    data: str = "data[0]"
    parameters: str = "parameters"
    apart: bool = False  # its settings came apart from it (a header): messages about them name that place first


@dataclass(frozen=True)
class ImageInput:
    """One image input as sent, before its pixels are decoded."""

    name: str
    encoded: bytes
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
class Image:
    """One image handed to predict: RGB pixels, plus the request's settings for it."""

    name: str
    pixels: np.ndarray = field(repr=False)
    action: str
    score_threshold: float | None
    prompts: tuple[str, ...]
    parameters: Mapping[str, Any]

    @cached_property
    def bgr(self) -> np.ndarray:
        """The pixels in BGR order (OpenCV's, and what many Caffe and ONNX models were trained on), contiguous."""
        return np.ascontiguousarray(self.pixels[..., ::-1])

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])


@dataclass(frozen=True)
class ParsedRequest:
    images: tuple[ImageInput, ...]
    tensors: Mapping[str, np.ndarray]
    metadata: str | None


@dataclass(frozen=True)
class Tensor:
    """One input of a V2 inference request, as the engine's other protocols build it (the V2 routes hand over the
    server's own request object, which has the same fields)."""

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


def parse_request(request: Any, task: TaskType, limits: Limits = DEFAULT_LIMITS) -> ParsedRequest:
    """Check the envelope and every input of a V2 request (a `Request`, or the server's object with the same
    fields); raise BadRequest naming the first problem."""
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
        if _datatype(tensor) == "BYTES" and content_type in IMAGE_CONTENT_TYPES:
            images.append(_image_input(tensor, place or Place(where), own, shared, task))
        else:
            tensors[tensor.name] = decode_tensor(tensor, where)
            elements += tensors[tensor.name].size
            if elements > limits.max_elements:
                raise BadRequest(
                    f"{where}: the request's tensors hold more than {limits.max_elements:,} elements"
                    " (CHARIOT_MAX_ELEMENTS); send fewer values per request"
                )
    if not images:
        raise BadRequest("the request has no image input: send each image as a BYTES input holding base64 of the file")
    return ParsedRequest(images=tuple(images), tensors=tensors, metadata=metadata)


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
    tensor: Any, place: Place, own: Mapping[str, Any], shared: Mapping[str, Any], task: TaskType
) -> ImageInput:
    where, item = place.input, f"{place.input}: {place.data}"
    values = _flat_data(tensor)
    _check_shape(tensor.shape, len(values), where)
    if len(values) != 1:
        raise BadRequest(f"{where} holds {len(values)} images; send each image as its own input with shape [1]")
    action, named = _setting("action", own, shared, place)
    if action is None:
        action = task.actions[0]
    elif action not in task.actions:
        allowed = ", ".join(repr(a) for a in task.actions)
        raise BadRequest(f"{named(f'unknown action {action!r}')} for {task.value}; allowed: {allowed}")
    threshold, threshold_named = _setting("score_threshold", own, shared, place)
    prompts, prompts_named = _setting("prompts", own, shared, place)
    prompts = _read_prompts(prompts, prompts_named("'prompts'"))
    if task is TaskType.IMAGE_TEXT_TO_TEXT and not prompts:
        raise BadRequest(
            f"{where}: Image Text to Text needs a 'prompts' parameter: a list of questions about the image"
        )
    merged = {k: v for k, v in {**shared, **own}.items() if k != "metadata"}
    return ImageInput(
        name=tensor.name,
        encoded=_image_bytes(values[0], item),
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
        raise BadRequest(f"{where} must be a list of strings, got {json.dumps(value)[:100]}")
    return tuple(value)


def refuse_data_url(text: str, where: str) -> None:
    """A browser's `data:image/png;base64,` prefix is not base64; say to drop it rather than that it is invalid."""
    if text[:5].lower() == "data:" and "," in text[:200]:
        raise BadRequest(
            f"{where} starts with a data URL prefix ({text.split(',', 1)[0]},): drop the prefix and send only the"
            " base64 after the comma"
        )


def check_base64(text: str, where: str) -> None:
    """Refuse text that is not the standard base64 of a non-empty file, saying where it was."""
    refuse_data_url(text, where)
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadRequest(f"{where} is not valid base64 ({exc}); send the image file as standard base64") from None
    if not raw:
        raise BadRequest(f"{where} is empty; send the image file as base64")


def _image_bytes(value: Any, item: str) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        if bytes(value[:4]).startswith(_IMAGE_MAGIC):
            return bytes(value)
        value = bytes(value).decode("ascii", errors="replace")
    if not isinstance(value, str):
        raise BadRequest(f"{item} must be a base64 string of an image file, got {type(value).__name__}")
    refuse_data_url(value, item)
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        try:
            # Tolerate line-wrapped base64 (MIME style), nothing else.
            raw = base64.b64decode("".join(value.split()), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadRequest(f"{item} is not valid base64 ({exc}); send the image file as standard base64") from None
    if not raw:
        raise BadRequest(f"{item} is empty; send the image file as base64")
    return raw


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# JPEG start-of-frame markers, which carry the image's height and width (C4, C8 and CC are other segments).
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _quick_header(encoded: bytes) -> tuple[int, int, str] | None:
    """Width, height and format of a well-formed PNG or JPEG from its first bytes, in microseconds; None for
    anything else, which Pillow then reads."""
    if encoded.startswith(_PNG_SIGNATURE) and encoded[12:16] == b"IHDR" and len(encoded) >= 24:
        return int.from_bytes(encoded[16:20], "big"), int.from_bytes(encoded[20:24], "big"), "PNG"
    if not encoded.startswith(b"\xff\xd8"):
        return None
    position, size = 2, len(encoded)
    while position + 9 <= size and encoded[position] == 0xFF:
        marker = encoded[position + 1]
        if marker in _JPEG_FRAMES:
            height = int.from_bytes(encoded[position + 5 : position + 7], "big")
            return int.from_bytes(encoded[position + 7 : position + 9], "big"), height, "JPEG"
        if marker == 0xFF:
            position += 1
        elif marker == 0x01 or 0xD0 <= marker <= 0xD9 or marker == 0xDA:
            return None  # a scan or a stand-alone marker before any frame: not a layout read here
        else:
            position += 2 + int.from_bytes(encoded[position + 2 : position + 4], "big")
    return None


def image_header(
    encoded: bytes, where: str, limits: Limits = DEFAULT_LIMITS, item: str = ""
) -> tuple[int, int, str | None]:
    """Width, height and format of an image file, read from its header alone and checked against the limits.
    `where` names the input in messages, `item` the image within it (by default `where`'s data[0])."""
    quick = _quick_header(encoded)
    if quick is not None and quick[0] and quick[1]:  # Pillow has its own word for a file of no pixels
        width, height, kind = quick
        cap = 2 * PIL.Image.MAX_IMAGE_PIXELS
        if width * height > cap:  # what Pillow says of such a file
            raise BadRequest(
                f"{where}: the image has more than {cap} pixels; this engine accepts at most "
                f"{min(cap, limits.max_image_pixels)}"
            )
        return _checked(width, height, kind, where, limits)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PIL.Image.DecompressionBombWarning)
            with PIL.Image.open(io.BytesIO(encoded)) as header:
                width, height = header.size  # read from the header alone: no pixels decoded yet
                kind = header.format
    except PIL.Image.DecompressionBombError:  # Pillow's own cap, reached before the size is returned
        cap = 2 * PIL.Image.MAX_IMAGE_PIXELS
        raise BadRequest(
            f"{where}: the image has more than {cap} pixels; this engine accepts at most "
            f"{min(cap, limits.max_image_pixels)}"
        ) from None
    except (PIL.UnidentifiedImageError, OSError, ValueError):
        raise BadRequest(
            f"{item or where + ': data[0]'} is not an image this engine can read (JPEG, PNG, BMP, TIFF, WebP, GIF)"
        ) from None
    return _checked(width, height, kind, where, limits)


def _checked(width: int, height: int, kind: str | None, where: str, limits: Limits) -> tuple[int, int, str | None]:
    if width * height > limits.max_image_pixels:
        raise BadRequest(
            f"{where}: the image is {width}x{height} pixels, more than the {limits.max_image_pixels} this engine accepts"
        )
    if width == 0 or height == 0:
        raise BadRequest(f"{where}: the image has no pixels ({width}x{height})")
    return width, height, kind


def decode_image(encoded: bytes, where: str, limits: Limits = DEFAULT_LIMITS, item: str = "") -> np.ndarray:
    """Decode an image file to RGB uint8 pixels (H, W, 3), honouring EXIF orientation."""
    _, _, kind = image_header(encoded, where, limits, item)
    if not _complete(encoded, kind):
        raise BadRequest(f"{where}: the {kind} file is cut short (it has no end marker); send the whole file")
    buffer = np.frombuffer(encoded, np.uint8)
    pixels = cv2.imdecode(buffer, cv2.IMREAD_COLOR_RGB)
    if pixels is None and kind == "TIFF":
        pixels = _float_tiff(buffer)
    if pixels is None:
        raise BadRequest(f"{item or where + ': data[0]'} could not be decoded as an image; is the file complete?")
    return pixels


def _float_tiff(buffer: np.ndarray) -> np.ndarray | None:
    """RGB pixels of a TIFF of floating-point samples (Pillow's mode F: measurements, masks), which OpenCV reads only
    as they are; None for any other file. Samples are 0-1 when none is above 1, else 0-255; beyond is clipped and
    NaN is 0."""
    samples = cv2.imdecode(buffer, cv2.IMREAD_UNCHANGED)
    if samples is None or samples.dtype.kind != "f":
        return None
    samples = np.nan_to_num(samples, copy=False, nan=0.0, posinf=255.0, neginf=0.0)
    if samples.max(initial=0.0) <= 1.0:
        samples *= 255
    pixels = np.clip(np.rint(samples, out=samples), 0, 255, out=samples).astype(np.uint8)
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[:, :, 0]
    if pixels.ndim == 2:
        return cv2.cvtColor(pixels, cv2.COLOR_GRAY2RGB)
    return cv2.cvtColor(pixels, cv2.COLOR_BGRA2RGB if pixels.shape[2] == 4 else cv2.COLOR_BGR2RGB)


def _complete(encoded: bytes, kind: str | None) -> bool:
    """Whether a JPEG, PNG or WebP file reaches its end. OpenCV decodes a cut-off file without complaint, filling
    the missing rows with grey; this looks only at markers and lengths, never at pixels, so it costs microseconds."""
    if kind == "JPEG":
        # Walk the segments to the first start-of-scan; the end-of-image marker must follow it. Scan data cannot
        # hold FF D9, an EXIF thumbnail's markers lie inside a segment before it, and data appended after the
        # image (motion photos) does not hide a missing end.
        position, size = 2, len(encoded)
        while position + 4 <= size:
            if encoded[position] != 0xFF:
                return True  # not a layout this check knows; the decoder has the last word
            marker = encoded[position + 1]
            if marker == 0xDA:
                # Most files end with the marker: look at the tail before scanning all of the scan data for it.
                tail = max(position, size - 64)
                return encoded.find(b"\xff\xd9", tail) != -1 or encoded.find(b"\xff\xd9", position) != -1
            if marker == 0xFF:
                position += 1
            elif marker == 0x01 or 0xD0 <= marker <= 0xD8:
                position += 2
            else:
                position += 2 + int.from_bytes(encoded[position + 2 : position + 4], "big")
        return False
    if kind == "PNG":
        return encoded.rfind(b"IEND\xaeB`\x82") != -1  # the IEND chunk, whose CRC never varies
    if kind == "WEBP":
        return len(encoded) >= 8 + int.from_bytes(encoded[4:8], "little")
    return True


def _datatype(tensor: Any) -> str:
    return getattr(tensor.datatype, "value", tensor.datatype)


def _flat_data(tensor: Any) -> list:
    data = tensor.data.root if hasattr(tensor.data, "root") else tensor.data
    if not isinstance(data, list):
        data = [data]
    if any(isinstance(v, list) for v in data):
        flat: list = []
        stack = [iter(data)]
        while stack:
            for item in stack[-1]:
                if isinstance(item, list):
                    stack.append(iter(item))
                    break
                flat.append(item)
            else:
                stack.pop()
        data = flat
    return data


def _check_shape(shape: list[int], count: int, where: str) -> tuple[int, ...]:
    """Check `shape` against the element count and return it with any -1 filled in."""
    if not shape:
        raise BadRequest(f"{where}: shape is empty; give the tensor's dimensions, e.g. [1]")
    if shape.count(-1) > 1:
        raise BadRequest(f"{where}: shape {shape} has more than one variable (-1) dimension")
    bad = [d for d in shape if d == 0 or d < -1 or d >= 2**63]
    if bad:
        raise BadRequest(
            f"{where}: shape {shape} has an invalid dimension {bad[0]}; dimensions are positive, or -1 for variable"
        )
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if count == 0 or count % known:
            raise BadRequest(f"{where}: {count} data elements do not fit shape {shape}")
        return tuple(count // known if d == -1 else d for d in shape)
    if known != count:
        raise BadRequest(f"{where}: shape {shape} holds {known} elements but data has {count}")
    return tuple(shape)


def decode_tensor(tensor: Any, where: str) -> np.ndarray:
    """Decode a non-image input to a numpy array of its datatype and shape, checking every value fits."""
    values = _flat_data(tensor)
    shape = _check_shape(tensor.shape, len(values), where)
    datatype = _datatype(tensor)
    if datatype == "BYTES":
        if not all(isinstance(v, (str, bytes)) for v in values):
            raise BadRequest(f"{where}: BYTES data must be strings")
        return np.array(values, dtype=object).reshape(shape)
    target = np.dtype(NUMERIC_DTYPES[datatype])
    if any(isinstance(v, (str, bytes, dict)) or v is None for v in values):
        expected = "true/false" if datatype == "BOOL" else "numbers"
        wrong = next(v for v in values if not isinstance(v, (int, float)))
        raise BadRequest(f"{where}: {datatype} data must be {expected}, got {wrong!r}")
    array = np.asarray(values)
    kind = array.dtype.kind
    if target.kind == "b":
        if kind == "b" or (kind in "iu" and np.isin(array, (0, 1)).all()):
            return array.astype(target).reshape(shape)
        raise BadRequest(f"{where}: BOOL data must be true/false")
    if target.kind in "iu":
        info = np.iinfo(target)
        if kind in "fO":
            # Floats, or ints beyond int64 (numpy holds them as objects, or rounds them to float64 beside other ints):
            # check and convert each value exactly, as Python compares ints with floats exactly.
            fraction = next((v for v in values if isinstance(v, float) and not v.is_integer()), None)
            if fraction is not None:
                raise BadRequest(f"{where}: {datatype} data must be whole numbers, got {fraction!r}")
            if not all(info.min <= v <= info.max for v in values):
                raise BadRequest(f"{where}: a value is out of range for {datatype} ({info.min}..{info.max})")
            return np.array([int(v) for v in values], dtype=target).reshape(shape)
        # Compared as Python ints: numpy cannot compare its booleans with UINT64's maximum.
        if array.size and (int(array.min()) < info.min or int(array.max()) > info.max):
            raise BadRequest(f"{where}: a value is out of range for {datatype} ({info.min}..{info.max})")
        return array.astype(target).reshape(shape)
    if kind == "b" or any(isinstance(v, (bool, np.bool_)) for v in values):
        raise BadRequest(f"{where}: {datatype} data must be numbers, got booleans")
    try:
        wide = array.astype(np.float64)
    except OverflowError:  # a Python int beyond any float
        raise BadRequest(f"{where}: a value is out of range for {datatype}") from None
    with np.errstate(over="ignore"):
        cast = wide.astype(target)
    if (np.isinf(cast) & ~np.isinf(wide)).any():
        raise BadRequest(f"{where}: a value is out of range for {datatype}")
    return cast.reshape(shape)
