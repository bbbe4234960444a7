"""Hypothesis strategies for requests an engine may be sent: chariot-v2-kserve requests in a valid envelope whose
images, numeric tensors and settings are near-valid, requests with any field replaced by any JSON value, and image
files with bytes cut, flipped or spliced."""

from __future__ import annotations

import math

from bad_requests import JPEG, PNG, PROMPTS, b64
from hypothesis import settings
from hypothesis import strategies as st

from chariot_support.protocols.tensors import NUMERIC_DTYPES


def examples(count: int) -> int:
    """A property test's number of examples: `count` under the `ci` profile (whose default is 100), scaled with the
    profile's default under another (tests/conftest.py registers them)."""
    return count * settings.default.max_examples // 100


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


@st.composite
def mangled_images(draw) -> bytes:
    """A real PNG or JPEG cut short, with bytes overwritten, or with junk spliced in."""
    raw = bytearray(draw(st.sampled_from([PNG, JPEG])))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(raw) - 1))
        edit = draw(st.sampled_from(["flip", "cut", "splice"]))
        if edit == "flip":
            raw[at] = draw(st.integers(0, 255))
        elif edit == "cut":
            del raw[at:]
            if not raw:
                break
        else:
            raw[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(raw)


image_data = st.one_of(
    st.just(b64(PNG)),
    mangled_images().map(b64),
    st.binary(max_size=64).map(b64),
    st.text(max_size=20),
    json_values,
)
parameters = (
    st.fixed_dictionaries(
        {},
        optional={
            "prompts": st.just(PROMPTS) | json_values,
            "action": st.sampled_from(["predict", "detect", "predict_proba", "explode"]) | json_values,
            "score_threshold": st.floats(-1, 2) | st.text(max_size=6) | json_values,
            "metadata": st.just('{"extended_metadata": []}') | st.text(max_size=12) | json_values,
            "content_type": st.sampled_from(["str", "base64", "np", "raw"]) | json_values,
        },
    )
    | json_values
)
# Parameters in the shape the protocol's schema takes (an object whose content_type, if any, is a string): what is odd
# about them is left to the engine's own reading.
_object_parameters = parameters.filter(lambda p: isinstance(p, dict) and isinstance(p.get("content_type", ""), str))
tensors = st.fixed_dictionaries(
    {"name": st.text(min_size=1, max_size=8)},
    optional={
        "shape": st.lists(st.integers(-2, 2**64), max_size=3) | json_values,
        "datatype": st.sampled_from(["BYTES", "FP8", "", *NUMERIC_DTYPES]) | json_values,
        "data": st.lists(image_data | json_values, max_size=3) | json_values,
        "parameters": parameters,
    },
)
# What each datatype holds, and values just beyond it: ints past their range, fractions, booleans, infinities.
_FITTING = {
    "BOOL": st.booleans() | st.sampled_from([0, 1]),
    **{
        f"{kind}{bits}": st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        for kind, bits in [("INT", 8), ("INT", 16), ("INT", 32), ("INT", 64)]
    },
    **{f"UINT{bits}": st.integers(0, 2**bits - 1) for bits in (8, 16, 32, 64)},
    "FP16": st.floats(width=16),
    "FP32": st.floats(width=32),
    "FP64": st.floats(),
}
_STRAY = st.integers(-(2**65), 2**65) | st.floats() | st.booleans() | st.none() | st.text(max_size=3)


def _nested(values: list, shape: list[int]) -> list:
    """`values` as nested lists of `shape`, as V2 clients may send them (they must hold exactly that many)."""
    for size in reversed(shape[1:]):
        values = [values[i : i + size] for i in range(0, len(values), size)]
    return values


@st.composite
def numeric_tensors(draw, fitting: bool = False) -> dict:
    """A numeric input: a datatype, a shape, and data that mostly fits both, with values, counts and dimensions
    sometimes just wrong; with `fitting`, data that always fits both."""
    datatype = draw(st.sampled_from(sorted(NUMERIC_DTYPES)))
    dims = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    count = math.prod(dims)
    # One in ten gets stray values, one in ten a wrong count, one in ten any shape; a fitting one, none of these.
    wrong = draw(st.integers(3, 9) if fitting else st.integers(0, 9))
    value = _FITTING[datatype] | _STRAY if wrong == 0 else _FITTING[datatype]
    data = draw(st.lists(value, max_size=count + 2) if wrong == 1 else st.lists(value, min_size=count, max_size=count))
    if wrong == 2:
        shape = draw(st.lists(st.integers(-2, 5) | st.sampled_from([2**63, 2**40]), max_size=3))
    else:
        shape = draw(st.just(dims) | st.just([-1, *dims[1:]]))
    if len(data) == count and draw(st.booleans()):
        data = _nested(data, dims)
    tensor = {"name": draw(st.text(min_size=1, max_size=6)), "shape": shape, "datatype": datatype, "data": data}
    if draw(st.integers(0, 4)) == 0:
        tensor["parameters"] = draw(_object_parameters)
    return tensor


image_tensors = st.fixed_dictionaries(
    {
        "name": st.text(min_size=1, max_size=8) | st.just("image-0"),
        "shape": st.just([1]) | st.lists(st.integers(-2, 3), max_size=2),
        "datatype": st.just("BYTES"),
        "data": st.lists(image_data, min_size=1, max_size=2),
    },
    optional={"parameters": _object_parameters},
)


def _often(usual: st.SearchStrategy, odd: st.SearchStrategy) -> st.SearchStrategy:
    """`usual` three times in four, else `odd`."""
    return st.integers(0, 3).flatmap(lambda n: odd if n == 0 else usual)


_SETTINGS = {
    "action": st.sampled_from(["predict", "detect", "predict_proba"]),
    "score_threshold": st.floats(0, 1),
    "metadata": st.just('{"extended_metadata": []}'),
}
good_image = st.builds(
    lambda data, extra: {
        "name": "image-0",
        "shape": [1],
        "datatype": "BYTES",
        "data": [data],
        "parameters": {"prompts": PROMPTS, **extra},
    },
    _often(st.just(b64(PNG)), image_data),
    st.fixed_dictionaries({}, optional={key: _often(value, json_values) for key, value in _SETTINGS.items()}),
)
_request_parameters = st.fixed_dictionaries(
    {}, optional={key: _often(value, json_values) for key, value in {**_SETTINGS, "prompts": st.just(PROMPTS)}.items()}
)
# Envelopes the protocol's schema accepts (every one: test_fuzz_decoding.py checks), so that what is fuzzed is the
# engine's own reading of them: an image and numeric tensors, near-valid, in any order.
valid_envelopes = st.fixed_dictionaries(
    {
        "inputs": st.tuples(
            st.lists(_often(good_image, image_tensors), min_size=1, max_size=2),
            st.integers(0, 2).flatmap(lambda n: st.lists(numeric_tensors(), min_size=n, max_size=n)),
        )
        .map(lambda both: both[0] + both[1])
        .flatmap(st.permutations)
    },
    optional={"parameters": _request_parameters, "id": st.text(max_size=8)},
)
# Anything at all in any field of a request, or any JSON.
odd_requests = st.one_of(
    st.fixed_dictionaries(
        {"inputs": st.lists(good_image | tensors, min_size=1, max_size=3)},
        optional={"parameters": parameters, "id": st.text(max_size=8)},
    ),
    st.fixed_dictionaries(
        {}, optional={"inputs": st.lists(tensors, max_size=3) | json_values, "parameters": json_values}
    ),
    json_values,
)
# Three requests in four are valid envelopes.
requests_ = _often(valid_envelopes, odd_requests)
