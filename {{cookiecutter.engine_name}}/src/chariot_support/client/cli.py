"""A command-line client for an engine: send images as chariot-v2-kserve (or chariot-v2) requests, print what came back as a
table, and draw it on the images. Each engine's `python -m <package>.client` runs `main` with its model id."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from chariot_support.client.drawing import draw
from chariot_support.client.send import (
    DEFAULT_URL,
    PROTOCOLS,
    Answer,
    ClientError,
    answers_for,
    build_request,
    chariot_v2_lines,
    infer_url,
    post,
    post_chariot_v2,
)

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
    """The results as an aligned text table with a heading row; numbers right-aligned. A text of several lines (an
    answer that reads a page) keeps its lines, each below the last in its own column. Empty for no results."""
    if not results:
        return ""
    keys = set().union(*(r.keys() for r in results))
    columns = next((c for needed, c in _LAYOUTS if needed <= keys), None)
    if columns is None:  # a format this client does not know: show every key as it came
        ordered = list(dict.fromkeys(k for r in results for k in r))
        columns = tuple((k, k, "s") for k in ordered)
    rows = []
    for result in results:
        cells = [
            _cell(_row_values(result).get(key), spec).expandtabs(4).splitlines() or [""] for _, key, spec in columns
        ]
        height = max(map(len, cells))
        rows += [[cell[i] if i < len(cell) else "" for cell in cells] for i in range(height)]
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


def command_name() -> str:
    """What the user ran, for the usage line: `python -m <package>.client` (the module run as __main__), or the
    installed script's name (`<engine>-client`)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        return f"python -m {spec.name.removesuffix('.__main__')}"
    return Path(sys.argv[0]).name


def parser(default_model_id: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=command_name(),
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
        help="a prompt for Image Text to Text, a question or instruction about the image; repeat for several"
        " (without one, the model answers about the image itself)",
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
