"""Hypothesis strategies for requests an engine may be sent: near-valid chariot-v2-kserve requests with any field
replaced by any JSON value, and image files with bytes cut, flipped or spliced."""

from __future__ import annotations

from bad_requests import JPEG, PNG, PROMPTS, b64
from hypothesis import strategies as st

from chariot_support.decoding import NUMERIC_DTYPES

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
tensors = st.fixed_dictionaries(
    {"name": st.text(min_size=1, max_size=8)},
    optional={
        "shape": st.lists(st.integers(-2, 2**64), max_size=3) | json_values,
        "datatype": st.sampled_from(["BYTES", "FP8", "", *NUMERIC_DTYPES]) | json_values,
        "data": st.lists(image_data | json_values, max_size=3) | json_values,
        "parameters": parameters,
    },
)
good_image = st.builds(
    lambda data, extra: {
        "name": "image-0",
        "shape": [1],
        "datatype": "BYTES",
        "data": [data],
        "parameters": {"prompts": PROMPTS, **extra},
    },
    image_data,
    st.dictionaries(st.sampled_from(["action", "score_threshold", "metadata"]), json_values, max_size=2),
)
requests_ = st.one_of(
    st.fixed_dictionaries(
        {"inputs": st.lists(good_image | tensors, min_size=1, max_size=3)},
        optional={"parameters": parameters, "id": st.text(max_size=8)},
    ),
    st.fixed_dictionaries(
        {}, optional={"inputs": st.lists(tensors, max_size=3) | json_values, "parameters": json_values}
    ),
    json_values,
)
