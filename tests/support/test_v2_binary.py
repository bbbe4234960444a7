"""Unit tests of chariot_support.protocols.v2_binary, the binary tensor data extension over REST, with bodies built
by hand: every datatype read as its JSON form reads, the sizes checked before anything is copied (the malformed
bodies a client sends are in the bad-request catalogue, bad_requests.py), which outputs go back as binary data, and
the answer written so."""

import json
import struct

import numpy as np
import orjson
import pytest
from bad_requests import PNG, b64, binary, binary_input, element, image, request
from fuzzing import json_values, requests_
from hypothesis import given, settings
from hypothesis import strategies as st

from chariot_support.dev.testing import expect_error
from chariot_support.errors import BadRequest, ChariotError, TooLarge
from chariot_support.model.tasks import TaskType
from chariot_support.protocols import v2_binary
from chariot_support.protocols import v2_rest as v2
from chariot_support.protocols.chariot_v2_kserve import parse_request
from chariot_support.protocols.request import Answer, Answered
from chariot_support.protocols.tensors import NUMERIC_DTYPES

OD = TaskType.OBJECT_DETECTION


def parsed(head: dict, *tensors: bytes, max_elements: int = 1_000_000):
    """The request a binary body carries as the runtime checks it, and the outputs it asks for as binary data."""
    body = binary(head, *tensors)
    request, outputs = v2_binary.parse(body, len(json.dumps(head).encode()), max_elements)
    return parse_request(request, OD), outputs


def refused(head: dict, *tensors: bytes, error=BadRequest, max_elements: int = 1_000_000) -> str:
    return expect_error(lambda: parsed(head, *tensors, max_elements=max_elements), error)


def tensor(name: str, datatype: str, shape: list, size: int, **parameters) -> dict:
    return {"name": name, "datatype": datatype, "shape": shape, "parameters": {"binary_data_size": size, **parameters}}


@pytest.mark.parametrize("datatype", list(NUMERIC_DTYPES))
def test_every_numeric_datatype_reads_as_its_json_form_does(datatype):
    values = np.array([[0, 1, 0], [1, 1, 0]]) if datatype == "BOOL" else np.array([[0, 1, 2], [3, 100, 127]])
    array = values.astype(NUMERIC_DTYPES[datatype])
    raw = array.astype(array.dtype.newbyteorder("<")).tobytes()  # little-endian, row-major
    found, _ = parsed(request(binary_input(), tensor("x", datatype, [2, 3], len(raw))), element(PNG), raw)
    as_json = parse_request(
        v2.parse(request(image(), {**tensor("x", datatype, [2, 3], 0), "data": values.tolist()})), OD
    )
    assert found.tensors["x"].dtype == as_json.tensors["x"].dtype == array.dtype
    assert np.array_equal(found.tensors["x"], as_json.tensors["x"]) and found.tensors["x"].shape == (2, 3)
    assert found.tensors["x"].flags.writeable, "a model may change its tensors in place, as it may a JSON one's"


def test_an_image_element_is_the_file_itself_or_its_base64():
    for sent in (PNG, b64(PNG).encode()):
        found, _ = parsed(request(binary_input(size=len(element(sent)))), element(sent))
        assert found.images[0].encoded == PNG


def test_json_and_binary_inputs_mix_and_take_the_bytes_in_input_order():
    text = element(b"first", b"", "third ü".encode())
    numbers = np.array([1.5, -2.0], "<f8").tobytes()
    head = request(
        image("image-0"),
        binary_input("image-1"),
        tensor("words", "BYTES", [3], len(text), content_type="str"),
        tensor("y", "FP64", [-1], len(numbers)),
    )
    found, _ = parsed(head, element(PNG), text, numbers)
    assert [i.name for i in found.images] == ["image-0", "image-1"]
    assert found.tensors["words"].tolist() == [b"first", b"", "third ü".encode()]
    assert found.tensors["y"].tolist() == [1.5, -2.0]


def test_what_the_extension_says_is_not_a_setting_the_model_sees():
    head = request(binary_input(), binary_data_output=True, action="detect")
    head["outputs"] = [{"name": "image-0", "parameters": {"binary_data": False}}]
    found, outputs = parsed(head, element(PNG))
    assert (
        "binary_data_size" not in found.images[0].parameters and "binary_data_output" not in found.images[0].parameters
    )
    assert found.images[0].action == "detect" and outputs == v2_binary.Outputs(True, {"image-0": False})


@pytest.mark.parametrize(
    "value, expected",
    [(None, None), ("57", 57), (" 57 ", 57), ("100", 100)],
)
def test_the_json_length_header(value, expected):
    assert v2_binary.head_length(value, 100) == expected


def test_a_json_length_of_zero_is_refused():
    expect_error(lambda: v2_binary.head_length("0", 100), BadRequest, "Inference-Header-Content-Length header is 0")


def test_sizes_add_up_in_input_order_against_what_is_left():
    # Each size fits the body alone; the second does not fit after the first.
    head = request(binary_input(), binary_input("image-1", size=len(element(PNG)) + 1))
    message = refused(head, element(PNG), element(PNG))
    assert message.startswith("input 'image-1': parameters.binary_data_size is"), message
    assert f"the body holds {len(element(PNG)):,} after the JSON and the inputs before it" in message


def test_no_tensor_is_copied_before_every_size_is_checked(monkeypatch):
    read = []
    monkeypatch.setattr(v2_binary, "_values", lambda *args: read.append(args))
    refused(request(binary_input(), binary_input("image-1", size=len(element(PNG)) + 1)), element(PNG), element(PNG))
    assert read == [], "the first input's bytes were copied before the second's size was found wrong"


def test_an_element_length_cut_short_is_named():
    message = refused(request(binary_input(size=len(element(PNG)) + 2)), element(PNG), b"\0\0")
    assert "input 'image-0': element 1 starts 2 bytes before the end of its binary_data_size" in message, message


def test_a_size_that_is_not_whole_elements_is_named():
    message = refused(request(binary_input(), tensor("x", "INT32", [-1], 6)), element(PNG), bytes(6))
    assert message == (
        "input 'x': parameters.binary_data_size is 6 bytes, not a whole number of INT32 elements (4 bytes each)"
    )


def test_a_variable_dimension_must_fit_the_elements_sent():
    message = refused(request(binary_input(), tensor("x", "FP32", [-1, 2], 12)), element(PNG), bytes(12))
    assert message == "input 'x': 3 data elements do not fit shape [-1, 2]"


def test_a_datatype_or_shape_without_a_binary_form_is_named():
    message = refused(request(binary_input(), tensor("x", "FP8", [1], 1)), element(PNG), bytes(1))
    assert message.startswith("input 'x': datatype 'FP8' has no binary form; the datatypes are BOOL, UINT8"), message
    message = refused(request(binary_input(), tensor("x", "FP32", ["1"], 4)), element(PNG), bytes(4))
    assert message == "input 'x': shape must be a list of whole numbers, got a list"


def test_bytes_elements_past_the_element_limit_are_refused_while_counted():
    # 16 empty elements are 64 bytes: a small body of many elements is stopped at the limit, not unpacked whole.
    empty = element(*[b""] * 16)
    head = request(binary_input(), tensor("words", "BYTES", [16], len(empty), content_type="str"))
    message = refused(head, element(PNG), empty, error=TooLarge, max_elements=8)
    assert message.startswith("input 'words' holds more than 8 elements"), message


@settings(max_examples=300, deadline=None, database=None)
@given(
    head=requests_,
    sizes=st.lists(st.integers(-2, 80) | json_values, max_size=3),
    tail=st.binary(max_size=80),
    off=st.integers(-6, 6),
    header=st.none() | st.text(max_size=6),
)
def test_any_binary_body_is_read_or_refused_as_the_clients_mistake(head, sizes, tail, off, header):
    """Any request, its first inputs' data swapped for a binary_data_size, any bytes after it, and a JSON length a
    little off, or any header: a request, or an error with a client's status, never another exception."""
    if isinstance(head, dict) and isinstance(head.get("inputs"), list):
        for tensor, size in zip(head["inputs"], sizes, strict=False):
            if isinstance(tensor, dict):
                tensor.pop("data", None)
                own = tensor.get("parameters")
                tensor["parameters"] = {**(own if isinstance(own, dict) else {}), "binary_data_size": size}
    encoded = json.dumps(head).encode()
    body = encoded + tail
    try:
        length = v2_binary.head_length(header if header is not None else str(len(encoded) + off), len(body))
        request, _ = v2_binary.parse(body, length or len(body), max_elements=1000)
        parse_request(request, OD)
    except ChariotError as error:
        assert error.status_code in (400, 413), error


@pytest.mark.parametrize(
    "body, message",
    [
        (
            {"parameters": {"binary_data_output": "yes"}},
            "parameters.binary_data_output must be true or false, got 'yes'",
        ),
        (
            {"outputs": {"name": "image-0"}},
            'outputs must be a list of the outputs wanted, each {"name": ...}, got an object',
        ),
        ({"outputs": [{"parameters": {}}]}, "outputs[0] must be an object with the output's name, got an object"),
        ({"outputs": [{"name": "a", "parameters": [1]}]}, "outputs[0].parameters must be a JSON object, got a list"),
        (
            {"outputs": [{"name": "a", "parameters": {"binary_data": 1}}]},
            "outputs[0].parameters.binary_data must be true or false, got 1",
        ),
    ],
)
def test_a_bad_request_for_binary_outputs_is_named(body, message):
    assert expect_error(lambda: v2_binary.requested_outputs({**request(), **body}), BadRequest) == message


def test_binary_outputs_are_those_named_and_the_rest_as_binary_data_output_says():
    def wanted(**body) -> dict[str, bool]:
        rest, outputs = v2_binary.requested_outputs({**request(), **body})
        assert "outputs" not in rest and "binary_data_output" not in rest.get("parameters", {})
        return {name: outputs.binary(name) for name in ("a", "b")}

    assert wanted() == {"a": False, "b": False}
    assert wanted(outputs=None) == {"a": False, "b": False}
    assert wanted(parameters={"binary_data_output": True}) == {"a": True, "b": True}
    assert wanted(outputs=[{"name": "a", "parameters": {"binary_data": True}}, {"name": "b"}]) == {
        "a": True,
        "b": False,
    }
    overridden = [{"name": "a", "parameters": {"binary_data": False}}]
    assert wanted(parameters={"binary_data_output": True}, outputs=overridden) == {"a": False, "b": True}


def answer(metadata: str | None = None) -> Answer:
    answered = Answered(
        names=("image-0", "image-1"),
        results=(b'[{"label":"red","score":0.9}]', b"[]"),
        image_metadata=('{"k": 1}', None),
        metadata=metadata,
    )
    return Answer(answered, "id-1", "m-demo", "1", {"ce-id": "id-1"})


def test_an_answer_without_binary_outputs_is_the_json_answer():
    assert v2_binary.render(answer(), v2_binary.JSON_OUTPUTS) == (v2.render(answer()), "application/json", {})


def test_binary_outputs_follow_the_json_in_output_order_with_its_length_in_the_header():
    sent = answer('{"standard_metadata": {}}')
    body, media_type, headers = v2_binary.render(sent, v2_binary.Outputs(True, {"image-1": False}))
    assert media_type == "application/octet-stream"
    length = int(headers[v2_binary.HEADER])
    head = orjson.loads(body[:length])
    as_json = orjson.loads(v2.render(sent))
    assert {k: v for k, v in head.items() if k != "outputs"} == {k: v for k, v in as_json.items() if k != "outputs"}
    first, second = head["outputs"]
    assert second == as_json["outputs"][1], "an output not asked for as binary data is as the JSON answer has it"
    assert first == {
        "name": "image-0",
        "shape": [1],
        "datatype": "BYTES",
        "parameters": {"binary_data_size": 4 + len(sent.answered.results[0]), "metadata": '{"k": 1}'},
    }
    (size,) = struct.unpack_from("<I", body, length)
    assert body[length + 4 :] == sent.answered.results[0] and size == len(sent.answered.results[0])
