"""The Open Inference Protocol (V2) over REST: a JSON body read into the engine's request, and the answer written as
the V2 response. A body in the plain shape every client sends is read straight from its JSON; any other valid V2 body
(nested data lists, numbers as strings...) is read by MLServer's request model, with its coercions, into the same
request."""

from __future__ import annotations

from typing import Any

import orjson
from mlserver.types import InferenceRequest
from pydantic import ValidationError

from chariot_support.errors import BadRequest
from chariot_support.protocols import chariot_v2
from chariot_support.protocols.chariot_v2_kserve import parameters_of, request_from_json
from chariot_support.protocols.request import Answer, Request, Tensor
from chariot_support.protocols.tensors import datatype_of, flat_data


def read_json(body: bytes) -> Any:
    """A V2 request body read as JSON; an empty or broken one is the client's mistake, said plainly."""
    if not body.strip():
        raise BadRequest("the request body must be a JSON object with an 'inputs' list; it is empty")
    return chariot_v2.read_json(body, "the request body")


def parse(decoded: Any) -> Request:
    """The request a V2 JSON body (already read) carries; BadRequest naming the field at fault."""
    plain = request_from_json(decoded)
    if plain is not None:
        return plain
    try:
        payload = InferenceRequest.model_validate(decoded)
    except ValidationError as error:
        raise BadRequest(validation_message(error.errors())) from None
    return request_from_model(payload)


def request_from_model(payload: Any) -> Request:
    """The engine's request from MLServer's request object (or anything with its fields)."""
    inputs = [
        Tensor(
            name=t.name,
            data=flat_data(t),
            shape=list(t.shape),
            datatype=datatype_of(t),
            parameters=parameters_of(t.parameters) or None,
        )
        for t in payload.inputs
    ]
    return Request(inputs=inputs, parameters=parameters_of(payload.parameters) or None, id=payload.id)


def validation_message(errors: list[dict], wanted: str = "a JSON object with an 'inputs' list") -> str:
    """The first problem a pydantic model (MLServer's request, or a route's body) found, named by its place in the
    body; a body that is not `wanted` at all says so."""
    first = errors[0]
    loc = [p for p in first.get("loc", ()) if p != "body"]  # FastAPI names a route's body "body"
    if first.get("type") == "json_invalid":
        return f"the request body is not valid JSON: {first.get('ctx', {}).get('error', first['msg'])}"
    if not loc:
        return f"the request body must be {wanted} ({first['msg']})"
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return f"{path}: {first['msg']}"


def render(answer: Answer) -> bytes:
    """The V2 response's JSON text: each image's results as the one element of a BYTES output named as its input,
    metadata passed back on the request and on each image as it came."""
    answered = answer.answered
    images = zip(answered.names, answered.results, answered.image_metadata, strict=True)
    return orjson.dumps(response(answer, [json_output(*image) for image in images]))


def json_output(name: str, results: bytes, metadata: str | None) -> dict:
    """One image's output, its results (JSON text) as the one element of its data."""
    output = {"name": name, "shape": [1], "datatype": "BYTES", "data": [orjson.Fragment(results)]}
    if metadata is not None:
        output["parameters"] = {"metadata": metadata}
    return output


def response(answer: Answer, outputs: list[dict]) -> dict:
    """The V2 response object around its `outputs`, with the request's metadata passed back."""
    metadata = answer.answered.metadata
    return {
        "model_name": answer.model_name,
        "model_version": answer.model_version,
        "id": answer.request_id,
        "parameters": {"metadata": metadata} if metadata is not None else {},
        "outputs": outputs,
    }
