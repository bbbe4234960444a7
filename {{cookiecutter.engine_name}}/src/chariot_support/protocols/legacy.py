"""The legacy protocols beside V2: KServe V1 and TensorFlow Serving's REST API (`/v1/models/...`), read into the
same parsed request as V2 and answered by the same predict."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import cv2
import numpy as np
import orjson

from chariot_support.errors import BadRequest, NotImplementedByModel
from chariot_support.model.tasks import TaskType
from chariot_support.protocols.chariot_v2_kserve import decode_base64, refuse_reserved
from chariot_support.protocols.request import Answer, ImageFile, Tensor
from chariot_support.protocols.request import Request as V2Request

_TARGET = r"(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
STATUS_PATH = re.compile(_TARGET + r"(?P<metadata>/metadata)?")
VERB_PATH = re.compile(_TARGET + r":(?P<verb>[^/:]+)")
VERBS = ("predict", "explain", "classify", "regress")
TOP_LEVEL = {
    "predict": ("instances", "inputs", "parameters", "signature_name"),
    "classify": ("examples", "context", "parameters", "signature_name"),
}
DEFAULT_SIGNATURE = "serving_default"

# --- reading requests ---------------------------------------------------------------------------------------


def read_body(raw: bytes) -> dict:
    """A JSON object, with NaN, Infinity and -Infinity accepted as TensorFlow Serving accepts them."""
    try:
        body = orjson.loads(raw)  # fast; what it refuses (NaN, Infinity, integers past 64 bits) json reads below
    except orjson.JSONDecodeError:
        body = _read_slowly(raw)
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def _read_slowly(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest("the request body nests too deep to read") from None


def read_predict(body: Mapping[str, Any]) -> V2Request:
    """Read a `:predict` / `:explain` body: `instances` (rows) or `inputs` (rows, or columns by name)."""
    _check_keys(body, TOP_LEVEL["predict"])
    _check_signature(body, (DEFAULT_SIGNATURE,))
    if "instances" in body and "inputs" in body:
        raise BadRequest("the request has both 'instances' and 'inputs'; send one of them (rows or columns), not both")
    shared = _object(body.get("parameters", {}), "parameters")
    if "instances" in body:
        rows = _rows(body["instances"], "instances")
    elif "inputs" not in body:
        raise BadRequest("the request has neither 'instances' nor 'inputs': send the images as {\"instances\": [...]}")
    elif isinstance(body["inputs"], dict):
        rows, columns = _columns(body["inputs"])
        shared = {**shared, **columns}
    else:
        rows = _rows(body["inputs"], "inputs")
    return _request(rows, shared)


def read_classify(body: Mapping[str, Any]) -> V2Request:
    """Read a `:classify` body: `examples`, one image each, and `context` features shared by all of them."""
    _check_keys(body, TOP_LEVEL["classify"])
    _check_signature(body, (DEFAULT_SIGNATURE, "classify"))
    if "examples" not in body:
        raise BadRequest('the request has no \'examples\': send {"examples": [{"image": {"b64": "..."}}]}')
    rows = _rows(body["examples"], "examples")
    context = _object(body.get("context", {}), "context")
    for name, (_, own) in rows:
        repeated = sorted(set(own) & set(context))
        if repeated:
            raise BadRequest(f"{name} repeats {repeated[0]!r} from 'context'; a feature goes in one of them, not both")
    # Classify answers every label with its score, unless the client asks for the top one.
    shared = {"action": "predict_proba", **_object(body.get("parameters", {}), "parameters"), **context}
    return _request(rows, shared)


def _check_keys(body: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise BadRequest(f"the request has an unknown key {unknown[0]!r}; it takes {', '.join(map(repr, allowed))}")


def _check_signature(body: Mapping[str, Any], known: tuple[str, ...]) -> None:
    signature = body.get("signature_name")
    if signature not in (None, "", *known):
        raise BadRequest(
            f"signature_name {signature!r} is not served here; this engine serves {', '.join(map(repr, known))}"
        )


def _object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise BadRequest(f"'{where}' must be a JSON object, got {type(value).__name__}")
    return dict(value)


Row = tuple[str, tuple[Any, dict]]


def _rows(value: Any, where: str) -> list[Row]:
    if not isinstance(value, list) or not value:
        raise BadRequest(f"'{where}' must be a non-empty list with one image per entry")
    return [(f"{where}[{i}]", _instance(item, f"{where}[{i}]")) for i, item in enumerate(value)]


def _instance(item: Any, where: str) -> tuple[Any, dict]:
    """One row: an image on its own, or an object holding the image and that image's settings."""
    image = _image_value(item, where)
    if image is not None:
        return image, {}
    if not isinstance(item, dict):
        raise BadRequest(
            f'{where} is not an image: send {{"b64": "<base64 of the file>"}}, or an object such as '
            '{"image": {"b64": "..."}} with the image\'s settings beside it'
        )
    keys = _image_keys(item)
    if len(keys) != 1:
        found = "no image" if not keys else f"{len(keys)} images ({', '.join(keys)})"
        raise BadRequest(
            f"{where} holds {found}; put exactly one image in each entry, under 'image' or as a {{\"b64\": ...}} value"
        )
    image = _image_value(item[keys[0]], f"{where}.{keys[0]}")
    if image is None:
        raise BadRequest(f'{where}.{keys[0]} is not an image: send {{"b64": "<base64 of the file>"}}')
    own = {k: v for k, v in item.items() if k != keys[0]}
    return image, refuse_reserved(own, where)


def _image_keys(item: Mapping[str, Any]) -> list[str]:
    if "image" in item:
        return ["image"]
    return [k for k, v in item.items() if isinstance(v, dict) and "b64" in v]


def _columns(columns: Mapping[str, Any]) -> tuple[list[Row], dict]:
    """Columnar inputs: the image column holds one image per row; every other column applies to all images."""
    keys = _image_keys(columns) or [
        k
        for k, v in columns.items()
        if isinstance(v, list) and v and all(isinstance(i, dict) and "b64" in i for i in v)
    ]
    if len(keys) != 1:
        found = "no image column" if not keys else f"{len(keys)} image columns ({', '.join(keys)})"
        raise BadRequest(f"'inputs' holds {found}; name one column 'image' with a list of {{\"b64\": ...}} images")
    name = keys[0]
    column = columns[name]
    single = _image_value(column, f"inputs.{name}") if not isinstance(column, list) else None
    rows = [(f"inputs.{name}[0]", (single, {}))] if single is not None else _rows(column, f"inputs.{name}")
    for row_name, (_, own) in rows:
        if own:
            raise BadRequest(f"{row_name} must be an image; in columnar 'inputs', settings are columns of their own")
    return rows, refuse_reserved({k: v for k, v in columns.items() if k != name}, "inputs")


def _image_value(value: Any, where: str) -> ImageFile | None:
    """The image file in `value` (its base64 read here, once); None if none."""
    if isinstance(value, dict) and "b64" in value:
        if len(value) != 1 or not isinstance(value["b64"], str):
            raise BadRequest(f'{where} must be {{"b64": "<base64 of the image file>"}} and nothing else')
        return ImageFile(decode_base64(value["b64"], f"{where}.b64"))
    if isinstance(value, str):
        return ImageFile(decode_base64(value, where))
    if isinstance(value, list):
        return ImageFile(_pixels_file(value, where))
    return None


def _pixels_file(value: list, where: str) -> bytes:
    """An image sent as nested lists of RGB pixel values (height x width x 3), as many TensorFlow clients send
    them, encoded losslessly so it takes the same decoding path as a file."""
    try:
        pixels = np.array(value, dtype=np.float64)
    except (ValueError, TypeError):
        raise BadRequest(
            f"{where} is not an image: a list must hold pixel rows (height x width x 3) of numbers"
        ) from None
    # Grey (height x width) is refused: a columnar image sent without its batch dimension would look like one.
    if pixels.ndim != 3 or pixels.shape[2] != 3 or 0 in pixels.shape:
        raise BadRequest(
            f"{where} is a list of shape {list(pixels.shape)}; an image as pixels is height x width x 3 (RGB)"
        )
    if not np.isfinite(pixels).all() or (pixels < 0).any() or (pixels > 255).any() or (pixels % 1).any():
        raise BadRequest(f"{where}: pixel values must be whole numbers from 0 to 255")
    bgr = cv2.cvtColor(pixels.astype(np.uint8), cv2.COLOR_RGB2BGR)
    ok, encoded = cv2.imencode(".png", bgr, [cv2.IMWRITE_PNG_COMPRESSION, 0])
    if not ok:
        raise BadRequest(f"{where}: these pixels could not be read as an image")
    return encoded.tobytes()


def _request(rows: list[Row], shared: dict) -> V2Request:
    """Each row becomes one V2 image input, so V2's own checks and settings rules apply word for word."""
    return V2Request(
        inputs=[Tensor(name=name, data=[image], parameters=own or None) for name, (image, own) in rows],
        parameters=refuse_reserved(shared, "parameters"),
    )


def check_verb(verb: str, model: Any) -> None:
    """Refuse a verb the engine's model (its `name`, `task` and whether it `explains`) cannot answer, saying which
    one would do."""
    task = model.task
    if verb == "regress":
        raise BadRequest(f"this engine does not regress: its model gives {task.value} results; use :predict")
    if verb == "classify" and task is not TaskType.IMAGE_CLASSIFICATION:
        raise BadRequest(
            f":classify is for Image Classification and this model gives {task.value} results; use :predict"
        )
    if verb == "explain" and not model.explains:
        raise NotImplementedByModel(
            f"this engine's model ({model.name}) has no explain method; :predict works, or add"
            " explain(images, tensors, results) to the model"
        )


# --- rendering responses ------------------------------------------------------------------------------------


def render(verb: str, answer: Answer) -> bytes:
    """The answer to `:predict` (`{"predictions": [...]}`, one result list per image), `:explain` (the same, and
    `explanations`) or `:classify` (`{"results": [[[label, score], ...], ...]}`)."""
    answered = answer.answered
    if verb == "classify":
        return orjson.dumps(
            {"results": [[[r["label"], r["score"]] for r in orjson.loads(each)] for each in answered.results]}
        )
    content: dict[str, Any] = {"predictions": [orjson.Fragment(each) for each in answered.results]}
    if verb == "explain":
        content["explanations"] = list(answered.explanations or ())
    return orjson.dumps(content)
