"""Micro-benchmark of the image decode paths an engine could take, per image: OpenCV alone, Pillow alone, and
the engine's decode_image (Pillow reads the header for the pixel limit, OpenCV decodes). Prints ms per image."""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import PIL.Image
import PIL.ImageOps

sys.path.insert(0, str(Path(__file__).resolve().parent))

from images import image, jpeg, scene  # noqa: E402


def opencv_only(data: bytes) -> np.ndarray:
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR_RGB)


def pillow_header(data: bytes) -> tuple[int, int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PIL.Image.DecompressionBombWarning)
        with PIL.Image.open(io.BytesIO(data)) as header:
            return header.size


def pillow_header_then_opencv(data: bytes) -> np.ndarray:
    pillow_header(data)
    return opencv_only(data)


def pillow_only(data: bytes) -> np.ndarray:
    with PIL.Image.open(io.BytesIO(data)) as img:
        img = PIL.ImageOps.exif_transpose(img)
        return np.asarray(img.convert("RGB"))


def png(pixels: np.ndarray) -> bytes:
    ok, encoded = cv2.imencode(".png", cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR))
    return encoded.tobytes()


def time_per_call(call: Callable[[bytes], object], data: bytes, repeat: int, rounds: int = 5) -> tuple[float, float]:
    """Median and min over rounds of the mean wall ms per call."""
    call(data)
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeat):
            call(data)
        samples.append((time.perf_counter() - start) * 1000 / repeat)
    return statistics.median(samples), min(samples)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    from chariot_support.protocols.images import decode_image

    cv2.setNumThreads(1)  # one image per thread, as the engine decodes; keeps the comparison per core
    files = {
        "JPEG 640x480": image("vga"),
        "JPEG 3840x2160": image("uhd"),
        "PNG 640x480": png(scene(640, 480, 12)),
        "JPEG 640x480 q75": jpeg(scene(640, 480, 12), 75),
    }
    paths = {
        "OpenCV imdecode (no pixel limit)": opencv_only,
        "Pillow header only": pillow_header,
        "Pillow header + OpenCV": pillow_header_then_opencv,
        "Pillow decode + exif_transpose": pillow_only,
        "engine decode_image": lambda data: decode_image(data, "image"),
    }
    print(f"{'image':18} {'path':34} {'median ms':>10} {'min ms':>8}")
    for label, data in files.items():
        repeat = 3 if "3840" in label else 30
        if args.quick:
            repeat = max(1, repeat // 3)
        for name, call in paths.items():
            median, fastest = time_per_call(call, data, repeat)
            print(f"{label:18} {name:34} {median:10.3f} {fastest:8.3f}")


if __name__ == "__main__":
    main()
