"""How much one request may ask of the engine: the limits every protocol's requests are checked against."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """How much one request may ask of the engine."""

    max_inputs: int = 64
    max_image_pixels: int = 100_000_000
    max_elements: int = 1_000_000


DEFAULT_LIMITS = Limits()
