"""Unit tests of chariot_support.protocols.chariot_v2_kserve: how a chariot-v2-kserve request is read, and how it is refused."""

import base64
import io
import json
import struct
import textwrap
import zlib

import numpy as np
import PIL.Image
import pytest
from bad_requests import CASES, Parser
from fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from mlserver.types import InferenceRequest

from chariot_support.dev.testing import as_image, encode_image, expect_error
from chariot_support.errors import BadRequest, TooLarge
from chariot_support.model.tasks import TaskType
from chariot_support.protocols import chariot_v2, legacy, v2_rest
from chariot_support.protocols.chariot_v2_kserve import parse_request, request_from_json
from chariot_support.protocols.images import _quick_header, decode_image, image_header
from chariot_support.protocols.request import Request, Tensor
from chariot_support.protocols.tensors import too_many_elements
from chariot_support.settings import DEFAULTS, EngineSettings

DETECTION = TaskType.OBJECT_DETECTION
RED, BLUE = (255, 0, 0), (0, 0, 255)


def picture(height: int = 20, width: int = 30) -> np.ndarray:
    """RGB: red block at the top left, blue block at the bottom right."""
    rgb = np.zeros((height, width, 3), np.uint8)
    rgb[:8, :8] = RED
    rgb[-6:, -6:] = BLUE
    return rgb


PICTURE = picture()
B64 = encode_image(PICTURE)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def png_declaring(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height but whose pixel data is a few bytes of nothing."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\0" * 16)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def image(name: str = "img", data=None, **parameters) -> dict:
    tensor = {"name": name, "shape": [1], "datatype": "BYTES", "data": [B64 if data is None else data]}
    if parameters:
        tensor["parameters"] = parameters
    return tensor


def tensor(datatype: str, data: list, shape=None, name: str = "x", **parameters) -> dict:
    body = {"name": name, "datatype": datatype, "shape": [len(data)] if shape is None else shape, "data": data}
    if parameters:
        body["parameters"] = parameters
    return body


def parse(*inputs, task=DETECTION, limits=DEFAULTS, **parameters):
    body = {"inputs": list(inputs)}
    if parameters:
        body["parameters"] = parameters
    return parse_request(InferenceRequest.model_validate(body), task, limits)


def first(*inputs, task=DETECTION, **parameters):
    return parse(*(inputs or [image()]), task=task, **parameters).images[0]


def decoded(data, limits=DEFAULTS) -> np.ndarray:
    return decode_image(first(image(data=data)).encoded, "input 'img'", limits)


def decode_one(datatype: str, data: list, shape=None) -> np.ndarray:
    return parse(image(), tensor(datatype, data, shape)).tensors["x"]


def refused(call, *fragments: str) -> str:
    return expect_error(call, BadRequest, *fragments)


# --- images -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("extension", [".png", ".jpg"])
def test_image_decodes_to_rgb_in_channel_order(extension):
    pixels = decoded(encode_image(PICTURE, extension))
    assert pixels.shape == (20, 30, 3) and pixels.dtype == np.uint8
    assert np.abs(pixels[3, 3].astype(int) - RED).max() <= 20  # red stays red, not blue
    assert np.abs(pixels[-3, -3].astype(int) - BLUE).max() <= 20
    shown = as_image(pixels)
    assert (shown.width, shown.height) == (30, 20)


@pytest.mark.parametrize(
    "mode, colour, expected",
    [
        ("L", 128, (128, 128, 128)),
        ("RGBA", (255, 0, 0, 255), RED),
        ("LA", (90, 255), (90, 90, 90)),
        ("P", 0, (0, 0, 0)),
    ],
)
def test_grey_and_alpha_pngs_give_three_channels(mode, colour, expected):
    buffer = io.BytesIO()
    PIL.Image.new(mode, (30, 20), colour).save(buffer, "PNG")
    pixels = decoded(b64(buffer.getvalue()))
    assert pixels.shape == (20, 30, 3)
    assert tuple(pixels[5, 5]) == expected


@pytest.mark.parametrize("mode, colour, expected", [("L", 128, (128, 128, 128)), ("CMYK", (0, 255, 255, 0), RED)])
def test_grey_and_cmyk_jpegs_give_rgb(mode, colour, expected):
    buffer = io.BytesIO()
    PIL.Image.new(mode, (30, 20), colour).save(buffer, "JPEG", quality=95)
    pixels = decoded(b64(buffer.getvalue()))
    assert pixels.shape == (20, 30, 3)
    assert np.abs(pixels[5, 5].astype(int) - expected).max() <= 12


def test_sixteen_bit_png_is_scaled_to_eight_bits():
    buffer = io.BytesIO()
    PIL.Image.new("I;16", (30, 20), 0xFFFF).save(buffer, "PNG")
    pixels = decoded(b64(buffer.getvalue()))
    assert pixels.shape == (20, 30, 3) and pixels.dtype == np.uint8
    assert tuple(pixels[5, 5]) == (255, 255, 255)


@pytest.mark.parametrize(
    "orientation, shape, red_at",
    [
        (3, (20, 40, 3), (10, -2)),  # turned half a turn: the left edge lands on the right
        (8, (40, 20, 3), (-2, 10)),  # turned a quarter anticlockwise: the left edge lands on the bottom
    ],
)
def test_other_exif_orientations_are_honoured(orientation, shape, red_at):
    stored = np.zeros((20, 40, 3), np.uint8)
    stored[:, :8] = RED
    source = PIL.Image.fromarray(stored)
    exif = source.getexif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    source.save(buffer, "JPEG", exif=exif, quality=95)
    pixels = decoded(b64(buffer.getvalue()))
    assert pixels.shape == shape
    assert pixels[red_at][0] > 200 and pixels[red_at][2] < 50


def test_exif_orientation_is_honoured():
    stored = np.zeros((20, 40, 3), np.uint8)
    stored[:, :8] = RED  # left edge as stored; orientation 6 turns it clockwise onto the top
    source = PIL.Image.fromarray(stored)
    exif = source.getexif()
    exif[0x0112] = 6
    buffer = io.BytesIO()
    source.save(buffer, "JPEG", exif=exif, quality=95)
    pixels = decoded(b64(buffer.getvalue()))
    assert pixels.shape == (40, 20, 3)
    assert pixels[2, 10, 0] > 200 and pixels[2, 10, 2] < 50
    assert pixels[-2, 10].max() < 50


@pytest.mark.parametrize("separator", ["\n", "\r\n", " ", "\t", "\u3000"])  # any whitespace str.split() drops
def test_line_wrapped_base64_is_accepted(separator):
    wrapped = separator.join(textwrap.wrap(B64, 76)) + separator
    assert first(image(data=wrapped)).encoded == base64.b64decode(B64)


def test_raw_image_bytes_are_accepted_as_grpc_sends_them():
    raw = base64.b64decode(B64)
    assert first(image(data=raw)).encoded == raw
    assert decoded(raw).shape == (20, 30, 3)


def read_as_the_front_does(body: bytes, route: str, content_type: str = "application/json"):
    """`body` read by its protocol as the REST front reads it at `route`, then checked by the pipeline's parse."""
    if route == "v1":
        request = legacy.read_predict(legacy.read_body(body))
    else:
        protocol, decoded = chariot_v2.choose(chariot_v2.Protocol.AUTO, content_type, body)
        if protocol is chariot_v2.Protocol.KSERVE:
            request = v2_rest.parse(decoded)
        else:
            request = chariot_v2.parse(body, content_type, None, DEFAULTS.max_inputs, decoded=decoded).request
    return parse_request(request, DETECTION)


IMAGES = 10


@pytest.mark.parametrize(
    "route, body, content_type, decodes",
    [
        ("v1", {"instances": [{"b64": B64}] * IMAGES}, "application/json", IMAGES),
        ("v1", {"instances": [B64] * IMAGES}, "application/json", IMAGES),
        ("root", {"inputs": [image(f"img-{i}") for i in range(IMAGES)]}, "application/json", IMAGES),
        ("root", {"input": B64}, "application/json", 1),
        ("root", "\n".join(json.dumps({"input": B64}) for _ in range(IMAGES)).encode(), "application/jsonl", IMAGES),
        ("root", base64.b64decode(B64), "image/png", 0),
    ],
    ids=["KServe V1 b64", "KServe V1 strings", "chariot-v2-kserve", "chariot-v2 JSON", "chariot-v2 JSONL", "file"],
)
def test_each_image_is_decoded_from_base64_once_and_a_file_body_never(monkeypatch, route, body, content_type, decodes):
    file, decoded_texts = base64.b64decode(B64), []
    b64decode = base64.b64decode
    monkeypatch.setattr(
        base64, "b64decode", lambda text, *a, **k: decoded_texts.append(text) or b64decode(text, *a, **k)
    )
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    parsed = read_as_the_front_does(raw, route, content_type)
    assert [i.encoded for i in parsed.images] == [file] * max(decodes, 1)
    assert len(decoded_texts) == decodes, f"{len(decoded_texts)} base64 decodes for {decodes} images"


def test_tensors_past_the_element_limit_are_a_413_with_the_words_every_protocol_uses():
    limits = EngineSettings(max_elements=5)
    alone = expect_error(lambda: parse(image(), tensor("FP32", [0.0] * 6), limits=limits), TooLarge)
    assert alone == str(too_many_elements("input 'x'", 5)), alone
    together = tensor("FP32", [0.0] * 3), tensor("INT8", [1] * 3, name="y")
    message = expect_error(lambda: parse(image(), *together, limits=limits), TooLarge)
    assert message.startswith("input 'y', with the inputs before it, holds more than 5 elements"), message


def test_pixel_limit_is_inclusive():
    assert decoded(B64, EngineSettings(max_image_pixels=600)).shape == (20, 30, 3)
    refused(lambda: decoded(B64, EngineSettings(max_image_pixels=599)), "input 'img'", "30x20", "599")


# --- parameters -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", list(TaskType))
def test_default_action_is_the_tasks_first(task):
    assert first(image(prompts=["what?"]), task=task).action == task.actions[0]


def test_input_parameters_override_request_parameters():
    request = parse(image("a", action="detect", score_threshold=0.7), image("b"), action="predict", score_threshold=0.2)
    a, b = request.images
    assert (a.action, a.score_threshold) == ("detect", 0.7)
    assert (b.action, b.score_threshold) == ("predict", 0.2)


@pytest.mark.parametrize("value, expected", [(0, 0.0), (1, 1.0), (0.25, 0.25), ("0.25", 0.25), (" 1 ", 1.0)])
def test_score_threshold_as_number_or_numeric_string(value, expected):
    assert first(image(score_threshold=value)).score_threshold == expected


@pytest.mark.parametrize("value, expected", [(["a", "b"], ("a", "b")), ('["a", "b"]', ("a", "b")), ("a?", ("a?",))])
def test_prompts_as_list_json_string_or_single_string(value, expected):
    assert first(image(prompts=value), task=TaskType.IMAGE_TEXT_TO_TEXT).prompts == expected


def test_prompts_are_optional_for_image_text_to_text():
    assert first(task=TaskType.IMAGE_TEXT_TO_TEXT).prompts == ()


def test_metadata_is_kept_as_the_exact_string():
    shared, own = '{"standard_metadata": {},  "extended_metadata": []}', '{ "k" : 1 }'
    request = parse(image(metadata=own), metadata=shared)
    assert request.metadata == shared
    assert request.images[0].metadata == own
    assert "metadata" not in request.images[0].parameters


def test_transport_headers_never_reach_the_model():
    parameters = first(image(headers={"authorization": "secret"}, mode="fast"), headers={"x-a": "1"}).parameters
    assert parameters == {"mode": "fast"}


# --- shapes ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, data, expected",
    [
        ([-1], [1, 2, 3], [1, 2, 3]),
        ([3, 1], [1, 2, 3], [[1], [2], [3]]),
        ([2, -1], [1, 2, 3, 4, 5, 6], [[1, 2, 3], [4, 5, 6]]),
        ([2, 3], [[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 5, 6]]),
    ],
)
def test_shapes_reshape_the_flat_data(shape, data, expected):
    assert decode_one("FP32", data, shape).tolist() == expected


# --- numeric and text tensors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "datatype, data, dtype",
    [
        ("BOOL", [True, False], np.bool_),
        ("UINT8", [0, 255], np.uint8),
        ("UINT16", [1, 65535], np.uint16),
        ("UINT32", [1, 2**32 - 1], np.uint32),
        ("UINT64", [1, 2**64 - 1], np.uint64),
        ("INT8", [-128, 127], np.int8),
        ("INT16", [-3, 3], np.int16),
        ("INT32", [-(2**31), 7], np.int32),
        ("INT64", [-(2**63), 2**63 - 1], np.int64),
        ("FP16", [0.5, -2], np.float16),
        ("FP32", [0.25, 3], np.float32),
        ("FP64", [0.1, 1e300], np.float64),
    ],
)
def test_numeric_datatypes_decode_to_their_dtype(datatype, data, dtype):
    array = decode_one(datatype, data, [2, 1])
    assert array.dtype == np.dtype(dtype) and array.shape == (2, 1)
    assert array.ravel().tolist() == [dtype(v).item() for v in data]


@pytest.mark.parametrize(
    "datatype, data, expected",
    [
        ("INT32", [2.0, -3.0], [2, -3]),
        ("INT8", [True], [1]),  # the protocol page's own do_sample example
        ("UINT64", [True, False], [1, 0]),  # once an OverflowError, a 500
        ("BOOL", [0, 1], [False, True]),
        ("UINT64", [2**64 - 1, 0.0], [2**64 - 1, 0]),  # once wrapped to 0 through float64
        ("INT64", [2**53 + 1, 0.0], [2**53 + 1, 0]),  # once rounded to 2**53 through float64
    ],
)
def test_values_that_are_converted_exactly(datatype, data, expected):
    assert decode_one(datatype, data).tolist() == expected


@pytest.mark.parametrize(
    "datatype, data, problem",
    [
        ("INT32", [1, 2.5], "whole numbers"),
        ("INT8", [float("nan")], "whole numbers"),
        ("UINT8", [300], "out of range for UINT8"),
        ("UINT8", [-1], "out of range for UINT8"),
        ("INT64", [2**70], "out of range for INT64"),
        ("INT64", [2**63, -1], "out of range for INT64"),
        ("INT64", [2.0**63], "out of range for INT64"),  # once wrapped to -2**63
        ("FP64", [10**400], "out of range for FP64"),  # once an OverflowError
        ("FP16", [1e5], "out of range for FP16"),
        ("FP32", ["1.5"], "must be numbers, got '1.5'"),
        ("FP32", [None], "must be numbers"),
        ("FP32", [True], "booleans"),
        ("FP32", [1.5, True], "booleans"),
        ("BOOL", [2], "true/false"),
        ("BOOL", [1.0], "true/false"),
        ("BOOL", ["true"], "true/false"),
    ],
)
def test_bad_values_are_refused(datatype, data, problem):
    refused(lambda: decode_one(datatype, data), "input 'x'", problem)


def test_text_bytes_input_is_a_tensor_not_an_image():
    request = parse(image(), tensor("BYTES", ["hello"], name="caption", content_type="str"))
    assert [i.name for i in request.images] == ["img"]
    assert request.tensors["caption"].dtype == object and request.tensors["caption"].tolist() == ["hello"]
    refused(lambda: parse(image(), tensor("BYTES", ["a", 1], content_type="str")), "input 'x'", "must be strings")


# --- truncated files ---------------------------------------------------------------------------------------


def jpeg(**options) -> bytes:
    buffer = io.BytesIO()
    PIL.Image.fromarray(NOISE).save(buffer, "JPEG", **options)
    return buffer.getvalue()


NOISE = np.random.default_rng(1).integers(0, 255, (40, 60, 3), dtype=np.uint8)


def gif() -> bytes:
    buffer = io.BytesIO()
    PIL.Image.fromarray(NOISE).save(buffer, "GIF")
    return buffer.getvalue()


@pytest.mark.parametrize(
    "raw",
    [
        jpeg(),
        jpeg(progressive=True),
        base64.b64decode(encode_image(NOISE)),
        base64.b64decode(encode_image(NOISE, ".webp")),
        gif(),
    ],
    ids=["jpeg", "progressive", "png", "webp", "gif"],
)
def test_a_file_cut_anywhere_is_refused_and_whole_is_read(raw):
    assert decoded(b64(raw)).shape == (40, 60, 3)
    for end in range(1, len(raw), max(1, len(raw) // 97)):
        message = refused(lambda end=end: decoded(b64(raw[:end])), "input 'img'")
        assert "cut short" in message or "not an image" in message, (end, message)


def test_a_gif_padded_with_zero_bytes_after_its_trailer_is_read():
    assert decoded(b64(gif() + b"\x00" * 3)).shape == (40, 60, 3)


def test_jpeg_end_is_looked_for_after_the_image_not_in_a_thumbnail_or_trailer():
    whole = jpeg()
    thumbnail = jpeg(quality=20)  # a complete JPEG, end marker included, inside an APP2 segment before the image
    segment = b"\xff\xe2" + (len(thumbnail) + 2).to_bytes(2, "big") + thumbnail
    with_thumbnail = whole[:2] + segment + whole[2:]
    assert decoded(b64(with_thumbnail)).shape == (40, 60, 3)
    refused(lambda: decoded(b64(with_thumbnail[:-40])), "input 'img'", "JPEG file is cut short")
    # Motion photos append a video after the image; its bytes may hold anything, start-of-scan markers included.
    trailer = b"\x00\x00\x00\x18ftypmp42" + b"\xff\xda\x00\x08" * 50
    assert decoded(b64(whole + trailer)).shape == (40, 60, 3)


# --- the catalogue ----------------------------------------------------------------------------------------------

PARSED = [c for c in CASES if Parser(TaskType.OBJECT_DETECTION).carries(c)]


@pytest.mark.parametrize("case", PARSED, ids=[c.name for c in PARSED])
def test_catalogued_bad_request_is_refused_by_the_parser_for_every_task(case):
    for task in TaskType:
        answer = Parser(task).send(None, "", case, {})
        assert answer.status == case.status, (task, answer.body)
        missing = [f for f in case.fragments if f not in answer.body["error"]]
        assert not missing, f"{task.value}: {missing} not in {answer.body['error']!r}"


@settings(max_examples=examples(60))
@given(
    width=st.integers(1, 300),
    height=st.integers(1, 300),
    form=st.sampled_from(["PNG", "JPEG", "JPEG progressive", "JPEG with EXIF", "JPEG grey", "PNG grey", "BMP"]),
)
def test_the_quick_header_reads_what_pillow_reads(width, height, form):
    """The engine reads PNG and JPEG sizes from their first bytes; it must agree with Pillow, which reads the rest."""
    picture = PIL.Image.new("L" if "grey" in form else "RGB", (width, height), 128)
    buffer = io.BytesIO()
    kind = form.split()[0]
    options = {"progressive": True} if "progressive" in form else {}
    if "EXIF" in form:
        options["exif"] = PIL.Image.Exif()
        options["exif"][0x0112] = 6
    picture.save(buffer, kind, **options)
    encoded = buffer.getvalue()
    with PIL.Image.open(io.BytesIO(encoded)) as reference:
        expected = (*reference.size, reference.format)
    quick = _quick_header(encoded)
    assert quick == (expected if kind in ("PNG", "JPEG") else None)
    assert image_header(encoded, "x") == expected


@pytest.mark.parametrize("cut", [2, 8, 16, 23, 40])
def test_a_header_cut_short_is_left_to_pillow_and_refused(cut):
    encoded = encode_image(np.zeros((20, 30, 3), np.uint8), ".jpg")
    raw = base64.b64decode(encoded)[:cut]
    assert _quick_header(raw) is None
    with pytest.raises(BadRequest, match="not an image this engine can read"):
        image_header(raw, "x")


# --- the fast path's reading of a JSON body --------------------------------------------------------------------

PLAIN = {
    "id": "r1",
    "parameters": {"action": "detect"},
    "inputs": [{"name": "a", "shape": [1], "datatype": "BYTES", "data": ["eA=="]}],
}


def with_input(**changes):
    return {**PLAIN, "inputs": [{**PLAIN["inputs"][0], **changes}]}


def test_a_plain_body_reads_straight_into_a_request():
    assert request_from_json(PLAIN) == Request(
        inputs=[Tensor(name="a", data=["eA=="], shape=[1], datatype="BYTES")], parameters={"action": "detect"}, id="r1"
    )
    # A content_type string (MLServer's codecs send one with every input) reads the same either way.
    typed = request_from_json(with_input(parameters={"content_type": "base64"}))
    assert typed is not None and typed.inputs[0].parameters == {"content_type": "base64"}


@pytest.mark.parametrize(
    "body",
    [
        with_input(shape=["1"]),  # the server's request model reads a numeric string as a number
        with_input(parameters={"content_type": 5}),  # and refuses this one with its own message
        with_input(parameters={"headers": {}}),
        with_input(datatype="STRING"),
        {**PLAIN, "id": 7},
        {**PLAIN, "extra": 1},
        {**PLAIN, "inputs": {"a": 1}},
        [PLAIN],
    ],
)
def test_a_body_in_any_other_shape_is_left_to_the_servers_request_model(body):
    assert request_from_json(body) is None


@pytest.mark.parametrize(
    "values, expected",
    [
        (np.array([[0.0, 0.5, 1.0]], np.float32), [0, 128, 255]),  # 0-1 samples
        (np.array([[0.0, 100.4, 300.0]], np.float32), [0, 100, 255]),  # 0-255 samples, clipped
        (np.array([[np.nan, 20.0, -5.0]], np.float32), [0, 20, 0]),
    ],
    ids=["unit", "bytes", "nan"],
)
def test_a_float_tiff_is_read_as_grey_pixels(values, expected):
    encoded = io.BytesIO()
    PIL.Image.fromarray(values, mode="F").save(encoded, "TIFF")
    pixels = decode_image(encoded.getvalue(), "input 'image'")
    assert pixels.dtype == np.uint8 and pixels.shape == (1, 3, 3)
    assert pixels[0, :, 0].tolist() == expected
    assert (pixels == pixels[..., :1]).all()  # grey: the same in every channel


def test_a_tiff_that_is_not_an_image_is_still_refused():
    encoded = io.BytesIO()
    PIL.Image.fromarray(np.zeros((4, 4), np.float32), mode="F").save(encoded, "TIFF")
    cut = encoded.getvalue()[:-40]
    expect_error(lambda: decode_image(cut, "input 'image'"), BadRequest, "input 'image'")
