"""The floor: the same decode and demo predict as a request costs, called in-process with no server, so the
servers' CPU per request can be compared with the work itself. Prints JSON: CPU and wall ms per request."""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import sys
import time
from pathlib import Path

import cv2
import numpy as np
from demo_answer import decode

from chariot_support.model.demo import ColourFinder

# One OpenCV thread: the floor is the least CPU the work can take; a pool of helper threads only adds spinning.
cv2.setNumThreads(1)


def decode_file(raw: bytes) -> np.ndarray:
    """An image file sent as it is (the binary tensor data extension): no base64 to decode."""
    return cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR_RGB)


def floor(values: list[str], count: int, repeats: int = 5, *, files: bool = False) -> dict:
    """Median over `repeats` runs of `count` requests: other work on the machine inflates single runs. With `files`,
    the images arrive as files, not base64."""
    finder = ColourFinder()
    read = decode_file if files else decode
    if files:
        values = [base64.b64decode(v) for v in values]
    for value in values:  # warm up caches and OpenCV's lazily built tables
        finder.find(read(value))
    cpu_ms, wall_ms = [], []
    for _ in range(repeats):
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(count):
            for value in values:
                finder.find(read(value))
        cpu_ms.append((time.process_time() - cpu) * 1000 / count)
        wall_ms.append((time.perf_counter() - wall) * 1000 / count)
    return {"cpu_ms": statistics.median(cpu_ms), "wall_ms": statistics.median(wall_ms)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--body", type=Path, required=True, help="a REST request body; every input is decoded")
    parser.add_argument("--count", type=int, default=20, help="requests per repeat")
    parser.add_argument("--files", action="store_true", help="the images arrive as files, not base64")
    args = parser.parse_args(argv)
    body = json.loads(args.body.read_text())
    json.dump(floor([i["data"][0] for i in body["inputs"]], args.count, files=args.files), sys.stdout)


if __name__ == "__main__":
    main()
