"""The images the benchmark sends: deterministic JPEG scenes of saturated colour shapes on a dark, slightly noisy
background, so the demo model finds real regions and the files compress like photographs rather than flat art."""

from __future__ import annotations

import base64

import cv2
import numpy as np

COLOURS = ((255, 0, 0), (0, 255, 0), (0, 0, 255))  # RGB


def scene(width: int, height: int, shapes: int, seed: int = 0) -> np.ndarray:
    """RGB pixels: a dark gradient with sensor-like noise and `shapes` filled rectangles and discs."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(10, 60, width, dtype=np.float32)[None, :, None]
    pixels = np.broadcast_to(ramp, (height, width, 3)) + rng.normal(0, 6, (height, width, 3))
    pixels = np.clip(pixels, 0, 255).astype(np.uint8)
    scale = min(width, height)
    for index in range(shapes):
        colour = COLOURS[index % 3]
        x, y = int(rng.integers(0, width)), int(rng.integers(0, height))
        size = int(rng.integers(scale // 40, scale // 8))
        if index % 2:
            cv2.circle(pixels, (x, y), size, colour, -1)
        else:
            cv2.rectangle(pixels, (x, y), (x + size, y + size * 2 // 3), colour, -1)
    return pixels


def jpeg(pixels: np.ndarray, quality: int = 90) -> bytes:
    ok, encoded = cv2.imencode(".jpg", cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError(f"OpenCV could not encode a {pixels.shape} image as JPEG")
    return encoded.tobytes()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# Scenario images: name -> (width, height, shapes). Segmentation gets many discs, whose contours have the most points.
IMAGES = {
    "vga": (640, 480, 12),
    "uhd": (3840, 2160, 12),
    "many": (640, 480, 60),
    "tiny": (32, 24, 1),
}


def image(name: str, seed: int = 0) -> bytes:
    width, height, shapes = IMAGES[name]
    return jpeg(scene(width, height, shapes, seed))
