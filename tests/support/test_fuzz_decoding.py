"""Property: whatever JSON arrives, the parser and image decoder answer with a request or a 4xx ChariotError,
never another exception, and a numeric tensor they accept holds the values sent, in its datatype. Every bound holds
for each example drawn, whatever the draw."""

import numpy as np
from fuzzing import examples, mangled_images, numeric_tensors, requests_, valid_envelopes
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from mlserver.types import InferenceRequest
from pydantic import ValidationError

from chariot_support.errors import ChariotError
from chariot_support.model.tasks import TaskType
from chariot_support.protocols.chariot_v2_kserve import parse_request, request_from_json
from chariot_support.protocols.images import decode_image
from chariot_support.protocols.request import Tensor
from chariot_support.protocols.tensors import NUMERIC_DTYPES, decode_tensor

BOUNDED = settings(max_examples=examples(100))


def client_error(call):
    try:
        return call()
    except ChariotError as error:
        assert 400 <= error.status_code < 500, (error.status_code, str(error))
        assert str(error)
        return None


def read_as_the_engine_does(body):
    """The request a V2 body becomes: the engine's plain reading, else the server's request model; None when the
    protocol's schema refuses it (the server turns that into a 400)."""
    plain = request_from_json(body)
    if plain is not None:
        return plain
    try:
        return InferenceRequest.model_validate(body)
    except ValidationError:
        return None


def flat(data) -> list:
    return [v for item in data for v in flat(item)] if isinstance(data, list) else [data]


def holds_what_was_sent(array: np.ndarray, tensor) -> bool:
    datatype = getattr(tensor.datatype, "value", tensor.datatype)
    sent = flat(tensor.data.root if hasattr(tensor.data, "root") else tensor.data)
    if array.dtype != NUMERIC_DTYPES[datatype] or array.size != len(sent):
        return False
    if array.dtype.kind in "biu":
        return [int(v) for v in array.ravel()] == [int(v) for v in sent]
    expected = np.array(sent, np.float64).astype(array.dtype)
    return np.array_equal(array.ravel(), expected, equal_nan=True)


def numeric_of(request) -> list:
    return [t for t in request.inputs if getattr(t.datatype, "value", t.datatype) in NUMERIC_DTYPES]


@BOUNDED
@given(body=requests_, task=st.sampled_from(list(TaskType)))
def test_any_request_is_parsed_or_refused_as_a_client_error(body, task):
    request = read_as_the_engine_does(body)
    if request is None:
        return
    parsed = client_error(lambda: parse_request(request, task))
    if parsed is None:
        return
    for tensor in numeric_of(request):
        if tensor.name in parsed.tensors:
            assert holds_what_was_sent(parsed.tensors[tensor.name], tensor), (tensor, parsed.tensors[tensor.name])
    for image in parsed.images:
        pixels = client_error(lambda image=image: decode_image(image.encoded, f"input '{image.name}'"))
        assert pixels is None or (pixels.ndim == 3 and pixels.shape[2] == 3 and pixels.dtype == np.uint8)


# What the property above is worth: three requests in four it draws are valid envelopes, each of which gets past the
# protocol's schema to the engine's own parser, and among them are numeric tensors the parser takes.
@BOUNDED
@given(body=valid_envelopes)
def test_every_valid_envelope_gets_past_the_protocols_schema(body):
    assert read_as_the_engine_does(body) is not None, body


def test_valid_envelopes_bring_numeric_tensors_the_parser_takes():
    def numeric_taken(body) -> bool:
        request = read_as_the_engine_does(body)
        parsed = client_error(lambda: parse_request(request, TaskType.OBJECT_DETECTION))
        return parsed is not None and any(t.name in parsed.tensors for t in numeric_of(request))

    # Raises NoSuchExample if the strategy never gets there; the first example found will do (shrinking it is dear).
    find(valid_envelopes, numeric_taken, settings=settings(phases=[Phase.generate]))


@BOUNDED
@given(body=numeric_tensors())
def test_any_numeric_tensor_holds_what_was_sent_or_is_refused_as_a_client_error(body):
    tensor = Tensor(**body)
    array = client_error(lambda: decode_tensor(tensor, "input 'x'"))
    assert array is None or holds_what_was_sent(array, tensor), (body, array)


@BOUNDED
@given(body=numeric_tensors(fitting=True))
def test_a_numeric_tensor_that_fits_its_datatype_and_shape_holds_what_was_sent(body):
    tensor = Tensor(**body)
    array = decode_tensor(tensor, "input 'x'")
    assert holds_what_was_sent(array, tensor), (body, array)


@BOUNDED
@given(raw=mangled_images() | st.binary(max_size=256))
def test_any_bytes_decode_to_rgb_or_are_refused(raw):
    pixels = client_error(lambda: decode_image(raw, "input 'x'"))
    assert pixels is None or (pixels.ndim == 3 and pixels.shape[2] == 3 and pixels.size > 0)
