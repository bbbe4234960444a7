"""Sending images to an engine as a Chariot request (chariot-v2-kserve or chariot-v2) and matching the reply's
results to the images sent: the part of the client other tools (evaluation, tests) use too."""

from __future__ import annotations

import base64
import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://localhost:8080"
PROTOCOLS = ("chariot-v2-kserve", "chariot-v2")


class ClientError(Exception):
    """A request that failed: the message is what the user needs to read."""


@dataclass(frozen=True)
class Answer:
    """One image's results, as the engine returned them."""

    path: Path
    name: str
    results: list[dict]
    metadata: str | None = None


# --- the request ------------------------------------------------------------------------------------------------


def image_input(name: str, encoded: bytes, parameters: dict[str, Any]) -> dict:
    """One image as Chariot sends it: a BYTES tensor of shape [1] holding standard base64 of the file."""
    tensor: dict[str, Any] = {
        "name": name,
        "shape": [1],
        "datatype": "BYTES",
        "data": [base64.b64encode(encoded).decode("ascii")],
    }
    if parameters:
        tensor["parameters"] = dict(parameters)
    return tensor


def build_request(
    images: Sequence[tuple[str, bytes]],
    *,
    action: str | None = None,
    prompts: Sequence[str] = (),
    score_threshold: float | None = None,
    metadata: str | None = None,
) -> dict:
    """A chariot-v2-kserve request body with one input per `(name, encoded file)`; metadata goes on the request."""
    parameters: dict[str, Any] = {}
    if action is not None:
        parameters["action"] = action
    if prompts:
        parameters["prompts"] = list(prompts)
    if score_threshold is not None:
        parameters["score_threshold"] = score_threshold
    body: dict[str, Any] = {"inputs": [image_input(name, encoded, parameters) for name, encoded in images]}
    if metadata is not None:
        body["parameters"] = {"metadata": metadata}
    return body


def infer_url(url: str, model_id: str) -> str:
    """Where Chariot sends inference for a model: `<url>/v2/models/m-<id>/infer/`, trailing slash included."""
    return f"{url.rstrip('/')}/v2/models/m-{model_id}/infer/"


def send(
    url: str, data: bytes, content_type: str, *, timeout: float = 60.0, headers: Sequence[tuple[str, str]] = ()
) -> bytes:
    """POST `data` and return the reply's body; every way of failing is a ClientError of one sentence."""
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("Content-Type", content_type)
    for key, value in headers:
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()
    except urllib.error.HTTPError as error:
        raise ClientError(f"HTTP {error.code} from {url}: {_error_message(error.read())}") from None
    except urllib.error.URLError as error:
        if isinstance(error.reason, TimeoutError):
            raise ClientError(f"no answer from {url} within {timeout:g} s; raise --timeout for slow models") from None
        raise ClientError(f"cannot reach {url}: {error.reason}; is the engine running and listening there?") from None
    except TimeoutError:
        raise ClientError(f"no answer from {url} within {timeout:g} s; raise --timeout for slow models") from None
    except (http.client.HTTPException, ConnectionError) as error:
        # Something listens there but does not speak HTTP/1.1, such as the engine's gRPC port.
        raise ClientError(
            f"{url} did not answer as an HTTP server ({type(error).__name__}); is that the engine's REST port"
            " (8080 by default; 8081 is gRPC)?"
        ) from None
    except OSError as error:
        raise ClientError(f"cannot talk to {url}: {error}") from None


def post(url: str, body: dict, *, timeout: float = 60.0, headers: Sequence[tuple[str, str]] = ()) -> dict:
    """POST `body` as JSON and return the decoded reply; raise ClientError with the engine's `{"error"}` message."""
    raw = send(url, json.dumps(body).encode(), "application/json", timeout=timeout, headers=headers)
    try:
        answer = json.loads(raw)
    except ValueError:
        raise ClientError(f"{url} answered with something that is not JSON: {raw[:200]!r}") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("outputs"), list):
        raise ClientError(f"{url} answered without an 'outputs' list: {raw[:200]!r}")
    return answer


def chariot_v2_lines(images: Sequence[tuple[str, bytes]], **settings: Any) -> bytes:
    """A chariot-v2 JSONL body: one `{"input": "<base64>", "parameters": {...}}` line per image."""
    body = build_request(images, **settings)
    lines = [
        {"input": t["data"][0], **({"parameters": t["parameters"]} if "parameters" in t else {})}
        for t in body["inputs"]
    ]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def post_chariot_v2(
    url: str, names: Sequence[str], data: bytes, *, timeout: float = 60.0, headers: Sequence[tuple[str, str]] = ()
) -> dict:
    """POST a chariot-v2 JSONL body and return its answer lines in chariot-v2-kserve's shape, named as sent."""
    raw = send(url, data, "application/jsonl", timeout=timeout, headers=headers)
    try:
        lines = [json.loads(line) for line in raw.splitlines() if line.strip()]
    except ValueError:
        raise ClientError(f"{url} answered with something that is not JSON lines: {raw[:200]!r}") from None
    if len(lines) != len(names) or not all(isinstance(line, dict) and "output" in line for line in lines):
        raise ClientError(f'{url} did not answer one {{"output": [...]}} line per image: {raw[:200]!r}')
    return {"outputs": [{"name": n, "data": [line["output"]]} for n, line in zip(names, lines, strict=True)]}


def _error_message(raw: bytes) -> str:
    try:
        decoded = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace").strip()[:500] or "(empty body)"
    if isinstance(decoded, dict) and "error" in decoded:
        return str(decoded["error"])
    return json.dumps(decoded)[:500]


def answers_for(paths: Sequence[Path], names: Sequence[str], reply: dict) -> list[Answer]:
    """Match the reply's outputs to the images sent, by input name."""
    outputs = {o.get("name"): o for o in reply["outputs"] if isinstance(o, dict)}
    metadata = (reply.get("parameters") or {}).get("metadata")
    answers = []
    for path, name in zip(paths, names, strict=True):
        output = outputs.get(name)
        if output is None:
            raise ClientError(f"the reply has no output named {name!r} for {path}")
        data = output.get("data")
        results = data[0] if isinstance(data, list) and data else []
        if isinstance(results, (str, bytes)):  # a result list JSON-encoded inside BYTES, as gRPC carries it
            results = json.loads(results)
        answers.append(Answer(path=path, name=name, results=list(results), metadata=metadata))
    return answers
