"""The catalogue of bad requests: what is sent, and the 4xx `{"error"}` that must come back, whatever the
transport. A transport (REST path, gRPC, the parser called directly) says which cases it can carry and sends one."""

from __future__ import annotations

import base64
import io
import json
import re
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc
import numpy as np
import PIL.Image
import requests
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub
from mlserver.types import InferenceRequest
from pydantic import ValidationError

from chariot_support.dev.grpc_client import grpc_request
from chariot_support.dev.testing import encode_image
from chariot_support.errors import ChariotError
from chariot_support.pipeline.pipeline import request_id_of
from chariot_support.protocols.chariot_v2_kserve import parse_request
from chariot_support.protocols.images import decode_pixels

# Prompts are optional for every task (an Image Text to Text model answers a bare image about itself); the cases
# about them carry these, and the fuzzers send them.
PROMPTS = ["what colours are in the picture?"]


def _picture() -> np.ndarray:
    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)  # noise, so the files are long enough to cut
    pixels[8:30, 10:40] = (255, 0, 0)
    return pixels


PICTURE = _picture()
PNG = base64.b64decode(encode_image(PICTURE, ".png"))
JPEG = base64.b64decode(encode_image(PICTURE, ".jpg"))


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def png_declaring(width: int, height: int, *, real: bool = False) -> bytes:
    """A PNG whose header claims width x height. With `real`, its 1-bit pixel data truly fills that canvas (a
    decompression bomb: a few KB that decode to width x height x 3 bytes); otherwise it holds a few bytes."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    if real:
        header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)  # 1-bit greyscale
        pixels = zlib.compress(b"\0" * ((width + 7) // 8 + 1) * height, 9)
    else:
        header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
        pixels = zlib.compress(b"\0" * 16)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def _gif() -> bytes:
    buffer = io.BytesIO()
    PIL.Image.fromarray(PICTURE).save(buffer, "GIF")
    return buffer.getvalue()


# 12000 x 12000 is above the engine's default limit of 100 million pixels (CHARIOT_MAX_IMAGE_PIXELS) and below
# Pillow's own cap, so the engine's check is the one that refuses it. Decoded, it would take 432 MB.
BOMB_SIDE = 12_000
BOMB = png_declaring(BOMB_SIDE, BOMB_SIDE, real=True)


def image(name: str = "image-0", data: Any = None, **overrides: Any) -> dict:
    """A good image input, a bare image as Chariot sends one, with any field replaced or added."""
    tensor = {"name": name, "shape": [1], "datatype": "BYTES", "data": [b64(PNG) if data is None else data]}
    tensor.update(overrides)
    return tensor


def without(tensor: dict, key: str) -> dict:
    return {k: v for k, v in tensor.items() if k != key}


def request(*inputs: dict, **parameters: Any) -> dict:
    body: dict = {"inputs": list(inputs or [image()])}
    if parameters:
        body["parameters"] = parameters
    return body


def number(datatype: str, data: list, shape: list | None = None, name: str = "x") -> dict:
    return {"name": name, "datatype": datatype, "shape": [len(data)] if shape is None else shape, "data": data}


GOOD = request()
# The engine's REST configurations: as it starts, with MLServer's CORS headers (MLSERVER_CORS_SETTINGS holds
# MLServer's CORSSettings as a JSON object), and with MLServer's reply compression on.
CONFIGURATIONS = {
    "default": {},
    "cors": {"MLSERVER_CORS_SETTINGS": '{"allow_origins": ["http://app.example"]}'},
    "gzip": {"MLSERVER_GZIP_ENABLED": "true"},
}
BROWSER = {"Origin": "http://app.example"}  # a browser's cross-origin request, which CORS answers


@dataclass(frozen=True)
class Case:
    name: str
    body: dict | bytes  # bytes are sent as they are, by transports that carry a raw body
    status: int
    fragments: tuple[str, ...]  # every one must appear in the error message
    model: str | None = None  # address this model instead of the engine's own
    version: str | None = None
    method: str = "POST"
    headers: tuple[tuple[str, str], ...] = ()  # sent with the body (the binary tensor data extension's length)

    @property
    def addressed_plainly(self) -> bool:
        """Sent the usual way: a POST to the engine's own model."""
        return self.model is None and self.version is None and self.method == "POST"


def case(name: str, body: dict | bytes, *fragments: str, status: int = 400, **where: Any) -> Case:
    return Case(name, body, status, fragments, **where)


def _truncated(raw: bytes, keep: float) -> str:
    return b64(raw[: int(len(raw) * keep)])


LENGTH_HEADER = "Inference-Header-Content-Length"


def element(*items: bytes) -> bytes:
    """BYTES elements as the binary tensor data extension sends them: each a 4-byte little-endian length, then it."""
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def binary_input(name: str = "image-0", size: Any = None, **overrides: Any) -> dict:
    """`image()` whose bytes follow the JSON instead of being in its data: its binary_data_size is the PNG's as one
    BYTES element unless `size` says otherwise."""
    tensor = without(image(name, **overrides), "data")
    tensor.setdefault("parameters", {})["binary_data_size"] = len(element(PNG)) if size is None else size
    return tensor


def binary(head: dict, *tensors: bytes) -> bytes:
    """A body in the binary tensor data extension: `head` as JSON, then the tensors' bytes."""
    return json.dumps(head).encode() + b"".join(tensors)


def binary_case(name: str, head: dict, tensors: tuple, *fragments: str, length: str | None = None, **kw) -> Case:
    """A case sent as `binary(head, *tensors)`, with the JSON's length in its header (or `length`)."""
    sent = length if length is not None else str(len(json.dumps(head).encode()))
    return case(name, binary(head, *tensors), *fragments, headers=((LENGTH_HEADER, sent),), **kw)


_ONE_IMAGE = request(binary_input())
_ONE_IMAGE_BODY = binary(_ONE_IMAGE, element(PNG))
_BAD_PREFIX = struct.pack("<I", 1000) + b"\0" * 16  # an element saying 1,000 bytes, in 20


CASES: list[Case] = [
    # the body
    case("malformed JSON", b"{not json", "not valid JSON"),
    case("body not UTF-8", b"\xff\xfe{}", "not valid JSON"),
    case("empty body", b"", "JSON object"),
    case("body a list", b"[1, 2]", "JSON object"),
    case("body a string", b'"hello"', "JSON object"),
    case("no inputs field", {}, "inputs: Field required"),
    case("inputs not a list", {"inputs": {"name": "x"}}, "inputs: Input should be a valid list"),
    case("empty inputs", {"inputs": []}, "no inputs"),
    case("request parameters not an object", {**GOOD, "parameters": "fast"}, "parameters: Input should be"),
    # The id goes back in response headers, which hold Latin-1 text on one line.
    case("request id beyond Latin-1", {**GOOD, "id": "Ā"}, "request id 'Ā' cannot travel in an HTTP header"),
    case("request id with a line break", {**GOOD, "id": "a\nb"}, "cannot travel in an HTTP header"),
    case("request id too long", {**GOOD, "id": "x" * 300}, "the request id is 300 characters long", "at most 256"),
    case(
        "too many inputs",
        request(*(image(f"image-{i}") for i in range(65))),
        "65 inputs",
        "at most 64",  # CHARIOT_MAX_INPUTS' default
    ),
    # the fields of an input
    case("missing name", request(without(image(), "name")), "inputs[0].name: Field required"),
    case("missing shape", request(without(image(), "shape")), "inputs[0].shape: Field required"),
    case("missing datatype", request(without(image(), "datatype")), "inputs[0].datatype: Field required"),
    case("missing data", request(without(image(), "data")), "inputs[0].data: Field required"),
    case("name not a string", request(image(name=5)), "inputs[0].name"),
    case("empty name", request(image(), image("")), "inputs[1]", "empty name"),
    case("duplicate names", request(image(), image()), "input 'image-0'", "appears twice"),
    case("unknown datatype", request(image(datatype="FP8")), "inputs[0].datatype"),
    case("input parameters not an object", request(image() | {"parameters": "x"}), "inputs[0].parameters"),
    case("no image input", request(number("FP32", [1.0])), "no image input"),
    # shapes
    case("zero dimension", request(image(shape=[0])), "input 'image-0'", "invalid dimension 0"),
    case("negative dimension", request(image(shape=[-2])), "input 'image-0'", "invalid dimension -2"),
    case("dimension beyond int64", request(image(shape=[2**63])), "input 'image-0'", "invalid dimension"),
    # JSON parsers stop at 64 bits, Python does not: the two refusals differ, both name the shape.
    case("dimension beyond any integer", request(image(shape=[2**64])), "shape"),
    case("dimension not a number", request(image(shape=["one"])), "inputs[0].shape[0]"),
    case("empty shape", request(image(shape=[])), "input 'image-0'", "shape is empty"),
    case(
        "two variable dimensions",
        request(image(), number("FP32", [1, 2], [-1, -1])),
        "input 'x'",
        "more than one variable",
    ),
    case(
        "variable dimension that does not fit",
        request(image(), number("FP32", [1, 2, 3], [-1, 2])),
        "input 'x'",
        "3 data elements do not fit shape [-1, 2]",
    ),
    case(
        "fixed shape larger than the data",
        request(image(), number("FP32", [1, 2, 3], [4])),
        "input 'x'",
        "shape [4] holds 4 elements but data has 3",
    ),
    case("shape disagrees with the data", request(image(shape=[3])), "input 'image-0'", "shape [3]"),
    case(
        "dimensions whose product overflows",
        request(image(), number("FP32", [1], [2**40, 2**40])),
        "input 'x'",
        "data has 1",
    ),
    case(
        "several images in one input",
        request(image(shape=[2]) | {"data": [b64(PNG)] * 2}),
        "input 'image-0'",
        "holds 2 images",
    ),
    # values against the datatype
    case("text in an INT32 tensor", request(image(), number("INT32", [1, "two"])), "input 'x'", "must be numbers"),
    case("fraction in an INT32 tensor", request(image(), number("INT32", [2.5])), "input 'x'", "whole numbers"),
    case("UINT8 out of range", request(image(), number("UINT8", [300])), "input 'x'", "out of range for UINT8"),
    case("null in an FP32 tensor", request(image(), number("FP32", [None])), "input 'x'", "must be numbers"),
    case("string as BOOL", request(image(), number("BOOL", ["true"])), "input 'x'", "true/false"),
    case(
        "number in a text tensor",
        request(image(), number("BYTES", ["a", 1]) | {"parameters": {"content_type": "str"}}),
        "input 'x'",
        "must be strings",
    ),
    # image data
    case("invalid base64", request(image(data="@@not base64@@")), "input 'image-0'", "not valid base64"),
    case("base64 cut mid-quantum", request(image(data=b64(PNG)[:-1])), "input 'image-0'", "not valid base64"),
    case("empty image data", request(image(data="")), "input 'image-0'", "is empty"),
    case("image data not a string", request(image(data=5)), "input 'image-0'", "must be a base64 string"),
    case("image data null", request(image() | {"data": [None]}), "input 'image-0'", "must be a base64 string"),
    case(
        "bytes that are no image",
        request(image(data=b64(b"hello, this is not an image"))),
        "input 'image-0'",
        "not an image this engine can read",
    ),
    case("image magic then garbage", request(image(data=b64(PNG[:8] + b"\0" * 64))), "input 'image-0'", "not an image"),
    case("truncated JPEG", request(image(data=_truncated(JPEG, 0.6))), "input 'image-0'", "JPEG file is cut short"),
    case(
        "JPEG missing its last bytes", request(image(data=b64(JPEG[:-2]))), "input 'image-0'", "JPEG file is cut short"
    ),
    case("truncated PNG", request(image(data=_truncated(PNG, 0.6))), "input 'image-0'", "PNG file is cut short"),
    case("truncated GIF", request(image(data=_truncated(_gif(), 0.5))), "input 'image-0'", "GIF file is cut short"),
    case("image of zero width", request(image(data=b64(png_declaring(0, 10)))), "input 'image-0'", "not an image"),
    case("image of zero height", request(image(data=b64(png_declaring(10, 0)))), "input 'image-0'", "not an image"),
    case(
        "decompression bomb over the engine's limit",
        request(image(data=b64(BOMB))),
        "input 'image-0'",
        "12000x12000 pixels",
        "100000000",
    ),
    case(
        "header beyond Pillow's cap",
        request(image(data=b64(png_declaring(100_000, 100_000)))),
        "input 'image-0'",
        "more than",
        "accepts at most",
    ),
    # parameters
    case(
        "unknown action", request(image(parameters={"action": "explode"})), "input 'image-0'", "'explode'", "allowed:"
    ),
    case("action not a string", request(image(parameters={"action": 5})), "input 'image-0'", "unknown action 5"),
    # An answer long enough that MLServer's gzip (MLSERVER_GZIP_ENABLED) compresses it: 500 bytes and more.
    case(
        "unknown action at length",
        request(image(parameters={"action": "explode" * 80})),
        "input 'image-0'",
        "unknown action 'explodeexplode",
    ),
    case("unknown request action", request(action="explode"), "'explode'", "request parameters"),
    case(
        "score_threshold a word",
        request(image(parameters={"score_threshold": "high"})),
        "input 'image-0'",
        "'score_threshold'",
        "between 0 and 1",
    ),
    case(
        "score_threshold above 1",
        request(image(parameters={"score_threshold": 1.5})),
        "'score_threshold'",
        "between 0 and 1",
    ),
    case(
        "score_threshold a boolean",
        request(image(parameters={"score_threshold": True})),
        "'score_threshold'",
        "between 0 and 1",
    ),
    case(
        "score_threshold a list",
        request(image(parameters={"score_threshold": [0.5]})),
        "'score_threshold'",
        "between 0 and 1",
    ),
    case(
        "score_threshold below 0",
        request(image(parameters={"score_threshold": -0.1})),
        "'score_threshold'",
        "between 0 and 1",
    ),
    case(
        "score_threshold infinite",
        request(image(parameters={"score_threshold": "inf"})),
        "'score_threshold'",
        "between 0 and 1",
    ),
    case(
        "score_threshold NaN",
        request(image(parameters={"score_threshold": "nan"})),
        "'score_threshold'",
        "between 0 and 1",
    ),
    case(
        "prompts not strings",
        request(image(parameters={"prompts": [1, 2]})),
        "input 'image-0'",
        "'prompts'",
        "list of strings",
    ),
    case("prompts a number", request(image(parameters={"prompts": 5})), "'prompts'", "list of strings"),
    case("prompts an object", request(image(parameters={"prompts": {"q": "a"}})), "'prompts'", "list of strings"),
    case("prompts broken JSON", request(image(parameters={"prompts": '["a",'})), "'prompts'", "not valid JSON"),
    case("metadata not JSON", request(metadata="{oops"), "parameters.metadata is not valid JSON"),
    case("metadata not a string", request(metadata={"a": 1}), "parameters.metadata", "JSON-encoded string"),
    case("metadata JSON but not an object", request(metadata="[1]"), "parameters.metadata", "JSON object"),
    case(
        "input metadata not JSON",
        request(image(parameters={"metadata": "nope"})),
        "input 'image-0'",
        "parameters.metadata",
        "not valid JSON",
    ),
    case(
        "input metadata not a string",
        request(image(parameters={"metadata": {"a": 1}})),
        "input 'image-0'",
        "parameters.metadata",
        "JSON-encoded string",
    ),
    case(
        "input metadata JSON but not an object",
        request(image(parameters={"metadata": "3"})),
        "input 'image-0'",
        "parameters.metadata",
        "JSON object",
    ),
    # the binary tensor data extension: JSON, then each binary input's bytes
    binary_case(
        "binary: JSON length past the body",
        _ONE_IMAGE,
        (element(PNG),),
        LENGTH_HEADER,
        "99,999 bytes of JSON",
        f"the body is {len(_ONE_IMAGE_BODY):,}",
        length="99999",
    ),
    binary_case(
        "binary: JSON length not a number", _ONE_IMAGE, (element(PNG),), LENGTH_HEADER, "'12abc'", length="12abc"
    ),
    binary_case(
        "binary: JSON length cutting the JSON",
        _ONE_IMAGE,
        (element(PNG),),
        "the body's first 10 bytes",
        "not valid JSON",
        length="10",
    ),
    case(
        "binary: JSON and tensor bytes without the length header",
        binary(_ONE_IMAGE, element(PNG)),
        "binary tensor data",
        LENGTH_HEADER,
    ),
    binary_case("binary: negative size", request(binary_input(size=-1)), (element(PNG),), "input 'image-0'", "is -1"),
    binary_case(
        "binary: size not a whole number",
        request(binary_input(size="12")),
        (element(PNG),),
        "input 'image-0'",
        "whole number of bytes, got '12'",
    ),
    binary_case(
        "binary: size past the body",
        request(binary_input(size=len(element(PNG)) + 10)),
        (element(PNG),),
        "input 'image-0'",
        f"binary_data_size is {len(element(PNG)) + 10:,} bytes",
        f"the body holds {len(element(PNG)):,}",
    ),
    binary_case(
        "binary: size not the shape's",
        request(
            binary_input(), {"name": "x", "shape": [4], "datatype": "FP32", "parameters": {"binary_data_size": 12}}
        ),
        (element(PNG), bytes(12)),
        "input 'x'",
        "shape [4] of FP32 takes 16 bytes",
        "binary_data_size is 12",
    ),
    binary_case(
        "binary: element longer than its size",
        request(binary_input(size=20)),
        (_BAD_PREFIX,),
        "input 'image-0'",
        "element 0 is 1,000 bytes long",
        "16 bytes of its binary_data_size (20)",
    ),
    binary_case(
        "binary: more elements than the shape",
        request(binary_input(size=2 * len(element(PNG)))),
        (element(PNG, PNG),),
        "input 'image-0'",
        "shape [1] holds 1 elements but data has 2",
    ),
    binary_case(
        "binary: input with neither data nor a size",
        request(without(image(), "data")),
        (element(PNG),),
        "input 'image-0' has neither data nor parameters.binary_data_size",
    ),
    binary_case(
        "binary: data and a size",
        request(image(parameters={"binary_data_size": len(element(PNG))})),
        (element(PNG),),
        "input 'image-0' has both data and parameters.binary_data_size",
    ),
    binary_case(
        "binary: bytes after the last input",
        _ONE_IMAGE,
        (element(PNG), b"extra"),
        "the body holds 5 bytes after its JSON",
        f"({len(element(PNG)):,} bytes, the sum of their binary_data_size)",
    ),
    binary_case(
        "binary: BOOL byte neither 0 nor 1",
        request(binary_input(), {"name": "x", "shape": [2], "datatype": "BOOL", "parameters": {"binary_data_size": 2}}),
        (element(PNG), b"\x01\x07"),
        "input 'x'",
        "BOOL data must be bytes of 0 (false) or 1 (true), got 7",
    ),
    binary_case(
        "binary: tensor past CHARIOT_MAX_ELEMENTS",
        request(
            binary_input(),
            {"name": "x", "shape": [1_000_001], "datatype": "UINT8", "parameters": {"binary_data_size": 1_000_001}},
        ),
        (element(PNG), bytes(1_000_001)),
        "input 'x'",
        "more than 1,000,000 elements",
        "CHARIOT_MAX_ELEMENTS",
        status=413,
    ),
    # addressing
    case("unknown model", GOOD, "no model named 'not-chariot'", "m-<id>", status=404, model="not-chariot"),
    case("unknown version", GOOD, "has no version '999'", status=404, version="999"),
    case("GET on infer", b"", "GET is not allowed", status=405, method="GET"),
    case("PUT on infer", GOOD, "PUT is not allowed", status=405, method="PUT"),
]
assert len({c.name for c in CASES}) == len(CASES), "case names must be unique: they name the tests"


@dataclass(frozen=True)
class Answer:
    status: Any  # an HTTP status, or the grpc.StatusCode a gRPC call ended with
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)


class Transport(Protocol):
    name: str

    def carries(self, case: Case) -> bool: ...

    def send(self, engine, model_name: str, case: Case, headers: Mapping[str, str]) -> Answer: ...


def _answer(response: requests.Response) -> Answer:
    return Answer(response.status_code, response.json(), response.headers)


@dataclass(frozen=True)
class Rest:
    """A REST path the engine serves V2 inference on; `{model}` is the model name in it, if it has one."""

    name: str
    path: str

    def carries(self, case: Case) -> bool:
        return "{model}" in self.path or case.addressed_plainly or case.method != "POST"

    def url(self, engine, model_name: str, case: Case) -> str:
        path = self.path
        if case.version is not None:
            path = path.replace("/infer", f"/versions/{case.version}/infer")
        return engine.url + path.format(model=case.model or model_name)

    def send(self, engine, model_name: str, case: Case, headers: Mapping[str, str]) -> Answer:
        body = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
        url = self.url(engine, model_name, case)
        headers = {**headers, **dict(case.headers)}
        return _answer(
            requests.request(case.method, url, data=body, headers=headers, timeout=60, allow_redirects=False)
        )


REST_TRANSPORTS = [
    Rest("v2", "/v2/models/{model}/infer"),
    Rest("v2-slash", "/v2/models/{model}/infer/"),
    Rest("chariot-root", "/infer"),
]


@dataclass(frozen=True)
class OneImage:
    """A case's request as one image and its settings, which every protocol can express: the image's base64 text,
    its own settings, and the request's."""

    data: str
    own: dict
    shared: dict

    @property
    def settings(self) -> dict:
        return {**self.shared, **self.own}

    @classmethod
    def of(cls, case: Case) -> OneImage | None:
        body = case.body
        if not case.addressed_plainly or not isinstance(body, dict) or set(body) - {"inputs", "parameters"}:
            return None
        inputs, shared = body.get("inputs"), body.get("parameters", {})
        if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
            return None
        tensor = inputs[0]
        if set(tensor) - {"name", "shape", "datatype", "data", "parameters"} or tensor.get("datatype") != "BYTES":
            return None
        if not isinstance(tensor.get("name"), str):  # the other protocols' images have no name to get wrong
            return None
        data, own = tensor.get("data"), tensor.get("parameters", {})
        if tensor.get("shape") != [1] or not isinstance(data, list) or len(data) != 1 or not isinstance(data[0], str):
            return None
        if not isinstance(shared, dict) or not isinstance(own, dict) or {"content_type", "metadata"} & {*own, *shared}:
            return None
        return cls(data[0], own, shared)


_V2_PLACE = re.compile(r"input '[^']*'|request parameters|inputs\[\d+\][\w.\[\]]*")


def placeless(case: Case) -> tuple[str, ...]:
    """What the message must say in a protocol without V2's inputs: the catalogue's words but for where V2 would
    place the fault (an input's name, request parameters), which the other protocols place elsewhere."""
    return tuple(f for f in case.fragments if not _V2_PLACE.fullmatch(f))


@dataclass(frozen=True)
class ChariotV2:
    """chariot-v2 at /infer, in one of its three forms: a JSON object, a JSONL line, or the image file as the body
    with its parameters in the chariot-inference-parameters header. Carries the cases about one image and its
    settings, which chariot-v2 can express."""

    form: str  # "json", "jsonl" or "file"

    @property
    def name(self) -> str:
        return f"chariot-v2-{self.form}"

    def carries(self, case: Case) -> bool:
        found = OneImage.of(case)
        return found is not None and (self.form != "file" or _is_base64(found.data)) and bool(placeless(case))

    def fragments(self, case: Case) -> tuple[str, ...]:
        return placeless(case)

    def send(self, engine, model_name: str, case: Case, headers: Mapping[str, str]) -> Answer:
        one = OneImage.of(case)
        line = json.dumps({"input": one.data, "parameters": one.settings})
        if self.form == "file":
            own = {"Content-Type": "application/octet-stream", "chariot-inference-parameters": json.dumps(one.settings)}
            data = base64.b64decode(one.data)
        else:
            own = {"Content-Type": "application/json" if self.form == "json" else "application/jsonl"}
            data = line.encode() + (b"\n" if self.form == "jsonl" else b"")
        return _answer(requests.post(f"{engine.url}/infer", data=data, headers={**headers, **own}, timeout=60))


def _is_base64(text: str) -> bool:
    try:
        return bool(base64.b64decode(text, validate=True))
    except (ValueError, TypeError):
        return False


CHARIOT_V2_TRANSPORTS = [ChariotV2("json"), ChariotV2("jsonl"), ChariotV2("file")]


@dataclass(frozen=True)
class V1:
    """KServe V1 and TensorFlow Serving's :predict, in rows (`instances`: the image with its own settings beside
    it) or columns (`inputs`: an image column, and a column per setting). Carries the cases about one image and its
    settings."""

    form: str  # "instances" or "inputs"

    @property
    def name(self) -> str:
        return f"v1-{self.form}"

    def carries(self, case: Case) -> bool:
        return OneImage.of(case) is not None and bool(placeless(case))

    def fragments(self, case: Case) -> tuple[str, ...]:
        return placeless(case)

    def send(self, engine, model_name: str, case: Case, headers: Mapping[str, str]) -> Answer:
        one = OneImage.of(case)
        if self.form == "instances":
            body: dict = {"instances": [{"image": {"b64": one.data}, **one.own}]}
        else:
            body = {"inputs": {"image": [{"b64": one.data}], **one.own}}
        if one.shared:
            body["parameters"] = one.shared
        url = f"{engine.url}/v1/models/{model_name}:predict"
        return _answer(requests.post(url, data=json.dumps(body), headers=headers, timeout=60))


V1_TRANSPORTS = [V1("instances"), V1("inputs")]


@dataclass(frozen=True)
class Grpc:
    """ModelInfer over gRPC. Carries the POSTs whose body a gRPC client can express: a valid InferenceRequest
    whose values fit the protobuf fields (a JSON syntax error has no gRPC form). Its answer's status is the call's
    grpc.StatusCode."""

    name: str = "grpc"

    def carries(self, case: Case) -> bool:
        if case.method != "POST" or not isinstance(case.body, dict):
            return False
        try:
            InferenceRequest.model_validate(case.body)
            grpc_request(case.body, "m-any")
        except (ValidationError, TypeError, ValueError):
            return False
        return True

    def send(self, engine, model_name: str, case: Case, headers: Mapping[str, str]) -> Answer:
        message = grpc_request(case.body, case.model or model_name)
        if case.version is not None:
            message.model_version = case.version
        with grpc.insecure_channel(engine.grpc_address) as channel:
            try:
                GRPCInferenceServiceStub(channel).ModelInfer(message, timeout=60)
            except grpc.RpcError as error:
                return Answer(error.code(), {"error": error.details()})
        return Answer(grpc.StatusCode.OK, {})


@dataclass(frozen=True)
class Parser:
    """No transport: the request envelope straight into the engine's parser and image decoder, as the pipeline and
    the runtime call them. Carries the cases that are valid InferenceRequests, whose refusal is the engine's own."""

    task: Any  # TaskType
    name: str = "parser"

    def carries(self, case: Case) -> bool:
        if not (isinstance(case.body, dict) and case.addressed_plainly):
            return False
        try:
            InferenceRequest.model_validate(case.body)
        except ValidationError:
            return False
        return True

    def send(self, engine, model_name: str, case: Case, headers: Mapping[str, str]) -> Answer:
        try:
            request_id_of(case.body.get("id"), {})  # the pipeline's check, before the parser
            parsed = parse_request(InferenceRequest.model_validate(case.body), self.task)
            for i in parsed.images:  # as the runtime decodes what the pipeline checked
                decode_pixels(i.encoded, i.kind, i.where, i.item)
        except ChariotError as error:
            return Answer(error.status_code, {"error": str(error)})
        return Answer(200, {})
