"""One OpenCV, the headless one: a second (opencv-python, opencv-contrib-python) found in uv.lock or in the
environment, named with what requires it. uv leaves opencv-python out of the lock (pyproject.toml's [tool.uv]
exclude-dependencies); these checks, which the engine's tests run, catch what that setting does not."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

HEADLESS = "opencv-python-headless"
# Each installs its own cv2 over the headless build's, and needs libGL, which the image does not have.
OTHER_OPENCVS = ("opencv-python", "opencv-contrib-python")
CLASH = (
    "both install cv2, so one overwrites the other, and {other} needs libGL, which the image does not have (the"
    f" engine's {HEADLESS} provides cv2 without it)"
)


def name(requirement: str) -> str:
    """A package's normalised name (PEP 503): `PyYAML>=6` gives pyyaml, `zope.event==6.2` zope-event."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;@(]", requirement.strip(), maxsplit=1)[0]).lower()


def how_to_leave_out(other: str) -> str:
    if other == "opencv-python":
        return (
            f"pyproject.toml's [tool.uv] exclude-dependencies should list {other} (the template's does): put it back,"
            " then `uv lock` and `uv sync`"
        )
    return (
        f"if those packages run without OpenCV's contrib modules, list {other} under pyproject.toml's [tool.uv]"
        " exclude-dependencies and `uv lock`; else use a version of them that requires the headless OpenCV"
    )


def locked_opencvs(lock: Path) -> list[str]:
    """Sentences, one per OpenCV uv.lock holds beside opencv-python-headless (on any platform it covers), naming the
    locked packages that require it."""
    packages = tomllib.loads(lock.read_text())["package"]
    names = {name(package["name"]) for package in packages}
    problems = []
    for other in (o for o in OTHER_OPENCVS if o in names):
        wanted_by = sorted(
            {
                package["name"]
                for package in packages
                for dependency in package.get("dependencies", [])
                if name(dependency["name"]) == other
            }
        )
        by = f", required by {', '.join(wanted_by)}" if wanted_by else ""
        problems.append(
            f"{lock.name} holds {other} beside {HEADLESS}{by}: {CLASH.format(other=other)}. {how_to_leave_out(other)}"
        )
    return problems


def opencv_conflicts(distributions: Iterable[importlib.metadata.Distribution] | None = None) -> list[str]:
    """Sentences, one per OpenCV installed beside opencv-python-headless, naming what required it."""
    installed = list(importlib.metadata.distributions() if distributions is None else distributions)
    names = {name(d.metadata["Name"]) for d in installed}
    if HEADLESS not in names:
        return []
    problems = []
    for other in (o for o in OTHER_OPENCVS if o in names):
        wanted_by = sorted(
            d.metadata["Name"]
            for d in installed
            if any(name(r) == other for r in (d.requires or []) if "extra ==" not in r)
        )
        by = f", required by {', '.join(wanted_by)}" if wanted_by else ""
        problems.append(
            f"{other} is installed beside {HEADLESS}{by}: {CLASH.format(other=other)}. `uv sync` installs what uv.lock"
            f" holds and removes the rest (pip does not read pyproject.toml's [tool.uv] exclude-dependencies); if"
            f" uv.lock holds {other} too, {how_to_leave_out(other)}"
        )
    return problems
