"""A command-line client for an engine: send images as chariot-v2-kserve (or chariot-v2) requests, print what came back as a
table, and draw it on the images. Each engine's `python -m <package>.client` runs `main` with its model id."""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from chariot_support.client.drawing import draw

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


# --- the table --------------------------------------------------------------------------------------------------

# Columns per result format, told apart by their keys; each column is (heading, key, format).
_LAYOUTS: tuple[tuple[frozenset[str], tuple[tuple[str, str, str], ...]], ...] = (
    (frozenset({"prompt", "answer"}), (("prompt", "prompt", "s"), ("answer", "answer", "s"))),
    (
        frozenset({"contour"}),
        (
            ("label", "label", "s"),
            ("score", "score", ".3f"),
            ("contours", "contours", "d"),
            ("points", "points", "d"),
            ("box (x0, y0, x1, y1)", "extent", "s"),
        ),
    ),
    (
        frozenset({"cx", "cy", "w", "h", "r"}),
        (
            ("label", "label", "s"),
            ("score", "score", ".3f"),
            ("cx", "cx", ".3f"),
            ("cy", "cy", ".3f"),
            ("w", "w", ".3f"),
            ("h", "h", ".3f"),
            ("r (rad)", "r", ".3f"),
        ),
    ),
    (
        frozenset({"xmin", "ymin", "xmax", "ymax"}),
        (
            ("label", "label", "s"),
            ("score", "score", ".3f"),
            ("xmin", "xmin", ".1f"),
            ("ymin", "ymin", ".1f"),
            ("xmax", "xmax", ".1f"),
            ("ymax", "ymax", ".1f"),
        ),
    ),
    (frozenset({"label", "score"}), (("label", "label", "s"), ("score", "score", ".3f"))),
)


def _row_values(result: dict) -> dict:
    if "contour" not in result:
        return result
    points = [p for contour in result["contour"] for p in contour]
    xs, ys = [p["x"] for p in points], [p["y"] for p in points]
    extent = f"{min(xs):g}, {min(ys):g}, {max(xs):g}, {max(ys):g}" if points else "-"
    return {**result, "contours": len(result["contour"]), "points": len(points), "extent": extent}


def _cell(value: Any, spec: str) -> str:
    if value is None:
        return "-"
    if spec != "s" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, spec)
    return str(value)


def format_table(results: Sequence[dict]) -> str:
    """The results as an aligned text table with a heading row; numbers right-aligned. Empty for no results."""
    if not results:
        return ""
    keys = set().union(*(r.keys() for r in results))
    columns = next((c for needed, c in _LAYOUTS if needed <= keys), None)
    if columns is None:  # a format this client does not know: show every key as it came
        ordered = list(dict.fromkeys(k for r in results for k in r))
        columns = tuple((k, k, "s") for k in ordered)
    rows = [[_cell(_row_values(r).get(key), spec) for _, key, spec in columns] for r in results]
    headings = [heading for heading, _, _ in columns]
    numeric = [spec not in ("s",) for _, _, spec in columns]
    widths = [max(len(cell) for cell in column) for column in zip(headings, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if right else c.ljust(w) for c, w, right in zip(cells, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headings), *(line(row) for row in rows)])


def describe(answer: Answer) -> str:
    count = len(answer.results)
    heading = f"{answer.path} ({answer.name}): {count or 'no'} result{'' if count == 1 else 's'}"
    table = format_table(answer.results)
    return f"{heading}\n{table}" if table else heading


# --- drawing ----------------------------------------------------------------------------------------------------


def read_image(path: Path) -> np.ndarray:
    """The file's pixels in BGR, turned upright per its EXIF orientation as the engine turns them."""
    pixels = cv2.imdecode(np.frombuffer(path.read_bytes(), np.uint8), cv2.IMREAD_COLOR)
    if pixels is None:
        raise ClientError(f"{path} is not an image OpenCV can read, so there is nothing to draw on")
    return pixels


def write_image(path: Path, pixels: np.ndarray) -> None:
    ok, encoded = cv2.imencode(path.suffix or ".png", pixels)
    if not ok:
        raise ClientError(f"cannot write {path}: use a .png or .jpg name")
    path.write_bytes(encoded.tobytes())


def drawing_paths(images: Sequence[Path], out: Path) -> list[Path]:
    """Where each drawing goes: `out` itself for one image, `out/<name>.png` (made unique) for several."""
    if len(images) == 1 and not out.is_dir():
        return [out]
    names: list[Path] = []
    taken: set[str] = set()
    for image in images:
        stem, number = image.stem, 1
        while f"{stem}.png" in taken:
            number += 1
            stem = f"{image.stem}-{number}"
        taken.add(f"{stem}.png")
        names.append(out / f"{stem}.png")
    return names


# --- the command ------------------------------------------------------------------------------------------------


def add_header_option(p: argparse.ArgumentParser) -> None:
    """`--header`, repeatable; `parse_headers` reads what it gathered."""
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="an extra HTTP header, e.g. 'Authorization: Bearer <token>' for a deployed model",
    )


def parser(default_model_id: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Send images to a Chariot engine (chariot-v2-kserve) and show what it found.",
        epilog="Exit status: 0 when every image got an answer, 1 when a request failed, 2 for a usage mistake.",
    )
    p.add_argument("images", nargs="+", type=Path, metavar="IMAGE", help="image files (JPEG, PNG, ...)")
    p.add_argument("--url", default=DEFAULT_URL, help=f"the engine's base URL (default {DEFAULT_URL})")
    p.add_argument(
        "--model-id",
        default=default_model_id,
        help=f"the model id in /v2/models/m-<id>/infer/ (default {default_model_id})",
    )
    p.add_argument("--action", help="the action parameter: predict, predict_proba, detect (default: the engine's)")
    p.add_argument(
        "--prompt",
        action="append",
        default=[],
        dest="prompts",
        help="a prompt for Image Text to Text; repeat for several",
    )
    p.add_argument("--score-threshold", type=float, help="drop results scoring under this (0..1)")
    p.add_argument("--metadata", help="Chariot metadata as a JSON object, copied through to the reply")
    p.add_argument(
        "--draw",
        type=Path,
        metavar="OUT",
        help="draw the results: OUT is a .png/.jpg file for one image, a folder for several",
    )
    p.add_argument("--batch", type=int, default=1, help="images per request (default 1)")
    add_header_option(p)
    p.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default=PROTOCOLS[0],
        help="chariot-v2-kserve (default: JSON to /v2/models/m-<id>/infer/) or chariot-v2 (JSON lines to /infer)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each reply (default 60)")
    p.add_argument("--json", action="store_true", help="print each raw reply as JSON instead of tables")
    return p


def _check_metadata(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        decoded = json.loads(text)
    except ValueError as exc:
        raise ValueError(
            f"--metadata is not valid JSON ({exc}); pass an object such as "
            '\'{"standard_metadata": {}, "extended_metadata": []}\''
        ) from None
    if not isinstance(decoded, dict):
        raise ValueError(f"--metadata must be a JSON object, got {type(decoded).__name__}")
    return text  # Chariot sends metadata as this JSON-encoded string, and the engine hands it back unchanged


def parse_headers(raw: Sequence[str]) -> list[tuple[str, str]]:
    headers = []
    for item in raw:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--header {item!r} must look like 'Name: value'")
        headers.append((name.strip(), value.strip()))
    return headers


class _Progress:
    """A counter on stderr for runs of several images: rewritten in place on a terminal, one line each otherwise."""

    def __init__(self, total: int):
        self.total = total
        self.done = 0
        self.live = sys.stderr.isatty()

    def advance(self, count: int, last: Path) -> None:
        self.done += count
        if self.total < 2:
            return
        start = "\r" if self.live else ""
        end = "" if self.live and self.done < self.total else "\n"
        print(f"{start}[{self.done}/{self.total}] {last}", end=end, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None, *, default_model_id: str = "demo") -> int:
    args = parser(default_model_id).parse_args(argv)
    try:
        metadata = _check_metadata(args.metadata)
        headers = parse_headers(args.header)
        if args.batch < 1:
            raise ValueError("--batch must be at least 1")
        if args.score_threshold is not None and not 0.0 <= args.score_threshold <= 1.0:
            raise ValueError("--score-threshold must be between 0 and 1")
        missing = [str(p) for p in args.images if not p.is_file()]
        if missing:
            raise ValueError(f"no such file: {', '.join(missing)}")
        if args.protocol == "chariot-v2" and metadata is not None:
            raise ValueError("--metadata is carried by chariot-v2-kserve only; chariot-v2 answers have no place for it")
        drawings = drawing_paths(args.images, args.draw) if args.draw else None
        if args.draw and len(args.images) > 1:
            args.draw.mkdir(parents=True, exist_ok=True)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    v2 = args.protocol == "chariot-v2"
    url = f"{args.url.rstrip('/')}/infer" if v2 else infer_url(args.url, args.model_id)
    progress = _Progress(len(args.images))
    try:
        for start in range(0, len(args.images), args.batch):
            paths = args.images[start : start + args.batch]
            names = [f"image-{start + i}" for i in range(len(paths))]
            images = list(zip(names, (p.read_bytes() for p in paths), strict=True))
            settings = {"action": args.action, "prompts": args.prompts, "score_threshold": args.score_threshold}
            if v2:
                lines = chariot_v2_lines(images, **settings)
                reply = post_chariot_v2(url, names, lines, timeout=args.timeout, headers=headers)
            else:
                reply = post(
                    url, build_request(images, **settings, metadata=metadata), timeout=args.timeout, headers=headers
                )
            answers = answers_for(paths, names, reply)
            if args.json:
                print(json.dumps(reply))
            else:
                for answer in answers:
                    print(describe(answer), end="\n\n" if len(args.images) > 1 else "\n")
                if answers[0].metadata is not None:
                    print(f"metadata: {answers[0].metadata}")
            if drawings is not None:
                for offset, answer in enumerate(answers):
                    write_image(drawings[start + offset], draw(read_image(answer.path), answer.results))
            progress.advance(len(paths), paths[-1])
            sys.stdout.flush()
    except (ClientError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if drawings is not None:
        where = drawings[0] if len(drawings) == 1 else args.draw
        print(f"drawn: {where}", file=sys.stderr)
    return 0
