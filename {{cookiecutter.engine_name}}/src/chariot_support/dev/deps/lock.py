"""The lock: pyproject.toml resolved for the image into constraints.txt, every version it already pins held but those
let move; when uv cannot resolve, why, and which pins stand in the way."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from chariot_support.dev.deps.opencv import second_opencvs
from chariot_support.dev.deps.pyproject import _name
from chariot_support.dev.deps.uv import Resolution, read_pins, resolve

HEADER = """\
# Every package the engine installs, pinned, so an image built a year from now gets the same versions as today;
# pyproject.toml keeps the ranges the engine's code accepts, this file picks one version in each (the engine itself
# is not listed). The image installs the engine's run-time dependencies from it; `uv pip install -c constraints.txt
# -e '.[test]'` installs the test extra too, and '.[eval]' the evaluation's. Written by `python -m
# chariot_support.dev.deps lock` (or `add`) for the image's platform and Python; do not edit by hand.
"""
# A pin as uv writes one in its messages: protobuf==6.33.6.
PIN_IN_TEXT = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]*[A-Za-z0-9])")


def _version(pin: str) -> str:
    return pin.split("==", 1)[1].strip()


def pins_in_the_way(reason: str, held: dict[str, str], free: Resolution) -> list[str]:
    """The pins of `held` that uv's `reason` names and that the resolution without pins (`free`) moves; when the
    reason names none, every pin `free` moves."""
    named = {(_name(n), v) for n, v in PIN_IN_TEXT.findall(reason)}
    moved = [n for n, pin in held.items() if n in free.pins and _version(free.pins[n]) != _version(pin)]
    return [held[n] for n in moved if (n, _version(held[n])) in named] or [held[n] for n in moved]


def explain(engine: Path, held: dict[str, str], reason: str) -> str:
    """Why the engine does not resolve and what to do. Resolved again without constraints.txt's pins, it either
    does not (the requirements themselves conflict) or does, and then the pins in the way are released one reason
    at a time until it resolves: what --release must name for the command to succeed."""
    free = resolve(engine, {}) if held else reason
    if isinstance(free, str):
        return (
            f"uv cannot resolve pyproject.toml's requirements together, whatever constraints.txt pins:\n{free}\n"
            "Pick a version of the requirement uv names that accepts what the others need, or remove it."
        )
    released: list[str] = []
    why = reason
    while isinstance(why, str):
        kept = {n: pin for n, pin in held.items() if pin not in released}
        more = pins_in_the_way(why, kept, free)
        if not more:  # holding only what the resolution without pins picks should resolve; uv said otherwise
            return f"uv cannot resolve pyproject.toml's requirements with the versions constraints.txt pins:\n{why}"
        released += more
        why = resolve(engine, {n: pin for n, pin in kept.items() if pin not in more})
    releases = " ".join(f"--release {_name(p)}" for p in released)
    return (
        f"uv cannot resolve pyproject.toml's requirements with the versions constraints.txt pins:\n{reason}\n"
        "(uv counts a pin as a requirement of the package that depends on it.) constraints.txt pins"
        f" {_listed(released)}, which {'stands' if len(released) == 1 else 'stand'} in the way; run the command"
        f" again with `{releases}` to let"
        f" {'it' if len(released) == 1 else 'them'} move."
    )


def _listed(items: list[str]) -> str:
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)


def lock(engine: Path, *, release: Iterable[str] = ()) -> dict[str, str]:
    """Resolve the engine (with every extra) for the image and write constraints.txt, holding every version it
    already pins but those of the packages in `release`. Returns the new pins."""
    constraints = engine / "constraints.txt"
    released = {_name(r) for r in release}
    held = {name: pin for name, pin in read_pins(constraints).items() if name not in released}
    resolution = resolve(engine, held)
    if isinstance(resolution, str):
        raise SystemExit(explain(engine, held, resolution))
    if problems := second_opencvs(resolution):
        raise SystemExit("\n".join(problems))
    new = resolution.pins
    constraints.write_text(HEADER + "\n".join(new[name] for name in sorted(new)) + "\n")
    return new


def changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    lines = [f"  + {new[n]}" for n in sorted(new.keys() - old.keys())]
    moved = sorted(n for n in new.keys() & old.keys() if _version(old[n]) != _version(new[n]))
    lines += [f"  ~ {old[n]} -> {new[n]}" for n in moved]
    lines += [f"  - {old[n]}" for n in sorted(old.keys() - new.keys())]
    return lines
