"""One OpenCV, the headless one: a second (opencv-python, opencv-contrib-python) found in an environment or in a
resolution, named with what brought it and how to leave it out."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable

from chariot_support.dev.deps.pyproject import _name
from chariot_support.dev.deps.uv import REINSTALL, Resolution

HEADLESS = "opencv-python-headless"
# Each installs its own cv2 over the engine's, and needs libGL, which the slim image does not have.
OTHER_OPENCVS = ("opencv-python", "opencv-contrib-python")


def opencv_conflicts(distributions: Iterable[importlib.metadata.Distribution] | None = None) -> list[str]:
    """Sentences, one per OpenCV installed beside opencv-python-headless, naming what required it."""
    installed = list(importlib.metadata.distributions() if distributions is None else distributions)
    names = {_name(d.metadata["Name"]): d for d in installed}
    if HEADLESS not in names:
        return []
    problems = []
    for other in OTHER_OPENCVS:
        if other in names:
            wanted_by = sorted(
                d.metadata["Name"]
                for d in installed
                if any(_name(r) == other for r in (d.requires or []) if "extra ==" not in r)
            )
            by = f", required by {', '.join(wanted_by)}" if wanted_by else ""
            problems.append(
                f"{other} is installed beside {HEADLESS}{by}: both install cv2, so one overwrites the other, and"
                f" {other} needs libGL, which the image does not have. List it under [tool.uv] exclude-dependencies"
                f" in pyproject.toml (`python -m chariot_support.dev.deps lock --without {other}` does) and install"
                f" into a new environment with `{REINSTALL}` from the engine's folder, which leaves it out (pip does"
                " not read that list)"
            )
    return problems


def second_opencvs(resolution: Resolution) -> list[str]:
    """Sentences, one per OpenCV the resolution would install beside opencv-python-headless, with what requires it
    and how to leave it out."""
    if HEADLESS not in resolution.pins:
        return []
    problems = []
    for other in (o for o in OTHER_OPENCVS if o in resolution.pins):
        clash = (
            f"which would be installed beside {HEADLESS}: both install cv2, so one overwrites the other, and {other}"
            " needs libGL, which the image does not have."
        )
        wanted_by = resolution.required_by.get(other)
        if not wanted_by:  # pyproject.toml's own requirement
            problems.append(f"pyproject.toml requires {other}, {clash} Remove it: {HEADLESS} provides cv2.")
            continue
        provides = "the cv2 it imports" if other == "opencv-python" else "cv2's main modules, not the contrib ones"
        problems.append(
            f"{', '.join(wanted_by)} {'requires' if len(wanted_by) == 1 else 'require'} {other}, {clash} Run the"
            f" command again with `--without {other}` to leave it out (the headless OpenCV provides {provides}), or"
            f" use a version of {wanted_by[0]} that requires {HEADLESS}."
        )
    return problems
