"""The floor: the same decode and demo predict as a request costs, called in-process with no server, so the
servers' CPU per request can be compared with the work itself. Prints JSON: CPU and wall ms per request."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from baseline.runtime import decode
from chariot_support.demo import ColourFinder


def floor(values: list[str], count: int) -> dict:
    finder = ColourFinder()
    for value in values:  # warm up caches and OpenCV's lazily built tables
        finder.find(decode(value))
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(count):
        for value in values:
            finder.find(decode(value))
    return {"cpu_ms": (time.process_time() - cpu) * 1000 / count, "wall_ms": (time.perf_counter() - wall) * 1000 / count}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--body", type=Path, required=True, help="a REST request body; every input is decoded")
    parser.add_argument("--count", type=int, default=50)
    args = parser.parse_args(argv)
    body = json.loads(args.body.read_text())
    json.dump(floor([i["data"][0] for i in body["inputs"]], args.count), sys.stdout)


if __name__ == "__main__":
    main()
