"""Property: whatever JSON arrives, the parser and image decoder answer with a request or a 4xx ChariotError,
never another exception."""

import numpy as np
from fuzzing import mangled_images, requests_
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mlserver.types import InferenceRequest
from pydantic import ValidationError

from chariot_support.decoding import decode_image, parse_request
from chariot_support.errors import ChariotError
from chariot_support.tasks import TaskType

BOUNDED = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def client_error(call):
    try:
        return call()
    except ChariotError as error:
        assert 400 <= error.status_code < 500, (error.status_code, str(error))
        assert str(error)
        return None


@BOUNDED
@given(body=requests_, task=st.sampled_from(list(TaskType)))
def test_any_request_is_parsed_or_refused_as_a_client_error(body, task):
    try:
        request = InferenceRequest.model_validate(body)
    except ValidationError:
        return  # the protocol's schema refuses it; the server turns that into a 400
    parsed = client_error(lambda: parse_request(request, task))
    for image in parsed.images if parsed else ():
        pixels = client_error(lambda image=image: decode_image(image.encoded, f"input '{image.name}'"))
        assert pixels is None or (pixels.ndim == 3 and pixels.shape[2] == 3 and pixels.dtype == np.uint8)


@BOUNDED
@given(raw=mangled_images() | st.binary(max_size=256))
def test_any_bytes_decode_to_rgb_or_are_refused(raw):
    pixels = client_error(lambda: decode_image(raw, "input 'x'"))
    assert pixels is None or (pixels.ndim == 3 and pixels.shape[2] == 3 and pixels.size > 0)
