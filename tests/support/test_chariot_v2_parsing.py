"""Unit tests of chariot_support.protocols.chariot_v2 as a protocol: bytes and headers in, the engine's request out, every
message naming the place as the sender knows it (the body, a line, the parameters header), and JSONL's line limit
met while the body is read."""

import base64
import json
import random

import numpy as np
import pytest

from chariot_support.dev.testing import encode_image, expect_error
from chariot_support.errors import BadRequest
from chariot_support.model.tasks import TaskType
from chariot_support.protocols import chariot_v2
from chariot_support.protocols.chariot_v2_kserve import parse_request

PNG_B64 = encode_image(np.zeros((8, 8, 3), np.uint8))
PNG = base64.b64decode(PNG_B64)
OD = TaskType.OBJECT_DETECTION
HEADER = chariot_v2.PARAMETERS_HEADER


def checked(body: bytes, content_type: str, header: str | None = None):
    """The request as the pipeline checks it (each image's file too, from its header)."""
    sent = chariot_v2.parse(body, content_type, header, 64)
    return sent.form, parse_request(sent.request, OD)


def refused(body: bytes, content_type: str, header: str | None = None) -> str:
    return expect_error(lambda: checked(body, content_type, header), BadRequest)


def test_each_form_reads_the_image_and_its_settings():
    form, parsed = checked(PNG, "image/png", '{"action": "detect", "score_threshold": 0.25}')
    assert form is chariot_v2.Form.FILE and parsed.images[0].encoded == PNG
    assert (parsed.images[0].action, parsed.images[0].score_threshold) == ("detect", 0.25)
    line = json.dumps({"input": PNG_B64, "parameters": {"score_threshold": 0.5}}).encode()
    form, parsed = checked(line, "application/json")
    assert form is chariot_v2.Form.JSON and parsed.images[0].score_threshold == 0.5
    form, parsed = checked(line + b"\n\n" + line + b"\n", "application/jsonl")
    assert form is chariot_v2.Form.JSONL and [i.name for i in parsed.images] == ["line-1", "line-3"]


def test_a_bad_setting_in_the_header_is_named_as_the_header():
    message = refused(PNG, "image/png", '{"action": "dance"}')
    assert message.startswith(f"the {HEADER} header: unknown action 'dance' for Object Detection; allowed:"), message
    message = refused(PNG, "image/png", '{"score_threshold": 2}')
    assert message == f"the {HEADER} header: 'score_threshold' must be a number between 0 and 1, got 2"


def test_messages_name_the_line_and_the_body_not_tensors():
    good = json.dumps({"input": PNG_B64}).encode()
    bad = json.dumps({"input": PNG_B64, "parameters": {"action": "dance"}}).encode()
    message = refused(good + b"\n" + bad, "application/jsonl")
    assert message.startswith("line 2: unknown action 'dance' in parameters for Object Detection"), message
    message = refused(json.dumps({"input": "bm90IGFuIGltYWdl"}).encode(), "application/json")
    assert "input '" not in message and "data[0]" not in message
    message = refused(b"GIF89a" + b"\0" * 4, "image/gif")
    assert message.startswith("the request body: the image is not an image this engine can read"), message


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_the_line_counter_refuses_past_the_limit_whatever_the_chunks(chunk):
    body = b"".join(b'{"input": "x"}\n' if i % 3 else b"\n" for i in range(300))
    counter = chariot_v2.LineCounter(64)
    with pytest.raises(BadRequest) as error:
        for start in range(0, len(body), chunk):
            counter.add(body[start : start + chunk])
    assert str(error.value) == (
        "the request has more than 64 lines; this engine takes at most 64 images per request (CHARIOT_MAX_INPUTS)"
    )
    assert counter.lines > 64  # a chunk is counted whole: bounded by its size, not by the body's


@pytest.mark.parametrize("chunk", [1, 5, 100])
def test_the_line_counter_counts_lines_across_chunks_and_skips_blank_ones(chunk):
    body = b'{"a": 1}\n  \n{"b"\n: 2}\n\n\n' + b'{"c": 3}'
    counter = chariot_v2.LineCounter(64)
    for start in range(0, len(body), chunk):
        counter.add(body[start : start + chunk])
    assert counter.lines == len(list(chariot_v2.jsonl_lines(body))) == 4


def test_jsonl_lines_and_the_line_counter_agree_with_reading_line_by_line():
    # Both skip blank runs by searching for content; any body, cut into any chunks, must read as split lines do.
    rng = random.Random(7)
    pieces = [b"\n", b"\n\n", b" ", b"\t", b"\r", b"\x0b", b"\x0c", b"a", b"{}"]
    for _ in range(3000):
        body = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 24)))
        expected = [(n, line) for n, line in enumerate(body.split(b"\n"), 1) if line.strip()]
        assert list(chariot_v2.jsonl_lines(body)) == expected, body
        for chunk in (1, 3, 64):
            counter = chariot_v2.LineCounter(100)
            for start in range(0, len(body), chunk):
                counter.add(body[start : start + chunk])
            assert counter.lines == len(expected), (body, chunk)


def test_a_jsonl_body_past_the_limit_is_refused_without_reading_every_line():
    line = json.dumps({"input": PNG_B64}).encode()
    body = (line + b"\n") * 65 + b"not json at all\n" * 1000
    message = refused(body, "application/jsonl")
    assert message.startswith("the request has more than 64 lines"), message
