"""uv, which resolves the engine's dependencies: found beside this Python or on PATH, run for the image's platform and
Python wherever the command runs, and its output read back into pins and what requires each."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from chariot_support.dev.deps.pyproject import _name, excluded

# How to get uv when it is missing: the version the engine pins (its test extra has it too).
INSTALL_UV = "pip install -c constraints.txt uv"
REINSTALL = "uv pip install -c constraints.txt -e '.[test]'"
# The image's base, as the Dockerfile names it: python:3.11-slim-bookworm.
BASE_IMAGE = re.compile(r"^FROM\s+(?:--\S+\s+)*(?:\S+/)?python:(3\.\d+)(?:\.\d+)?-slim-(\w+)", re.M)
# The glibc of each Debian release the slim images are built on, as the manylinux tag a wheel must fit.
GLIBC = {"bullseye": "2_31", "bookworm": "2_36", "trixie": "2_40"}


@dataclass(frozen=True)
class Target:
    """What a resolution is for: the image's Python and platform, as uv's --python-version and --python-platform."""

    python: str
    platform: str
    described: str


def image_target(engine: Path) -> Target:
    """The image's Python and platform, read from the Dockerfile's base (python:3.11-slim-bookworm: Python 3.11 on
    linux x86_64 with bookworm's glibc 2.36); without such a line, this Python on linux x86_64."""
    dockerfile = engine / "Dockerfile"
    found = BASE_IMAGE.search(dockerfile.read_text()) if dockerfile.is_file() else None
    if found is None:
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        return Target(
            python,
            "x86_64-manylinux_2_28",
            f"linux x86_64, Python {python} (the Dockerfile names no"
            " python:X.Y-slim-<release> base: this Python's version)",
        )
    python, release = found[1], found[2]
    glibc = GLIBC.get(release, "2_28")
    return Target(
        python,
        f"x86_64-manylinux_{glibc}",
        f"linux x86_64 (manylinux_{glibc}), Python {python}: the image's, python:{python}-slim-{release}",
    )


def find_uv() -> str:
    """The uv installed beside this Python (the engine's test extra has it), else the one on PATH."""
    try:
        from uv import find_uv_bin
    except ImportError:
        pass
    else:
        try:
            return find_uv_bin()
        except FileNotFoundError:
            pass
    found = shutil.which("uv")
    if found is None:
        raise SystemExit(
            f"uv, which resolves the engine's dependencies, is not installed: `{INSTALL_UV}` in the engine's folder"
            " installs the version the engine pins"
        )
    return found


@dataclass
class Resolution:
    """What uv resolved: each package's pin, and the packages that require it."""

    pins: dict[str, str] = field(default_factory=dict)
    required_by: dict[str, list[str]] = field(default_factory=dict)


def parse_resolution(output: str) -> Resolution:
    """uv pip compile's output with line annotations: `numpy==2.4.6  # via mlserver, -c held.txt, x (pyproject.toml)`;
    the constraint files and pyproject.toml itself are not counted as requiring a package."""
    resolution = Resolution()
    for line in output.splitlines():
        requirement, _, comment = line.partition("#")
        requirement = requirement.strip()
        if "==" not in requirement:
            continue
        name, comment = _name(requirement), comment.strip()
        resolution.pins[name] = requirement
        via = [v.strip() for v in comment.removeprefix("via ").split(",")] if comment.startswith("via ") else []
        resolution.required_by[name] = [v for v in via if v and not v.startswith("-") and "(" not in v]
    return resolution


def read_pins(constraints: Path) -> dict[str, str]:
    pins = {}
    for line in constraints.read_text().splitlines() if constraints.is_file() else []:
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            pins[_name(line)] = line
    return pins


def uv_reason(stderr: str, returncode: int) -> str:
    """uv's message from its first `error:` line on, without blank lines."""
    lines = stderr.splitlines()
    start = next((n for n, line in enumerate(lines) if line.startswith("error:")), 0)
    return "\n".join(line.rstrip() for line in lines[start:] if line.strip()) or f"uv exited {returncode}"


def compile_requirements(
    engine: Path,
    requirements: list[str],
    *,
    pyproject: str | None = None,
    held: dict[str, str] | None = None,
    no_deps: bool = False,
    timeout: float | None = None,
) -> Resolution | str:
    """Resolve `requirements` (and `pyproject`, the text of a pyproject.toml, with every extra) for the image, run in
    the engine's folder so that uv reads its [tool.uv] settings, holding the pins in `held`; the resolution, or uv's
    reason why there is none (a timeout is one)."""
    target = image_target(engine)
    command = [find_uv(), "pip", "compile", "--no-header", "--color", "never", "--annotation-style", "line"]
    command += ["--python", sys.executable, "--python-version", target.python, "--python-platform", target.platform]
    command += ["--no-deps"] if no_deps else []
    with tempfile.TemporaryDirectory(prefix="lock-") as folder:
        if pyproject is not None:
            (Path(folder) / "pyproject.toml").write_text(pyproject)
            command.append(str(Path(folder) / "pyproject.toml"))
            command += ["--all-extras"] if tomllib.loads(pyproject)["project"].get("optional-dependencies") else []
        if requirements:
            (Path(folder) / "requirements.txt").write_text("\n".join(requirements) + "\n")
            command.append(str(Path(folder) / "requirements.txt"))
        if held:
            (Path(folder) / "held.txt").write_text("\n".join(held.values()) + "\n")
            command += ["--constraints", str(Path(folder) / "held.txt")]
        # uv reads [tool.uv] from the pyproject.toml where it runs as well; named here, the lock does not depend on it.
        if leave_out := excluded(engine / "pyproject.toml"):
            (Path(folder) / "excluded.txt").write_text("\n".join(leave_out) + "\n")
            command += ["--excludes", str(Path(folder) / "excluded.txt")]
        try:
            result = subprocess.run(command, cwd=engine, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"uv took longer than {timeout:.0f} s"
    if result.returncode != 0:
        return uv_reason(result.stderr, result.returncode)
    return parse_resolution(result.stdout)


def resolve(
    engine: Path, held: dict[str, str], *, pyproject: str | None = None, timeout: float | None = None
) -> Resolution | str:
    """Resolve the engine's pyproject.toml (or `pyproject`, text that stands in for it) with every extra for the
    image, holding the pins in `held` and leaving out what [tool.uv] exclude-dependencies lists; the resolution, or
    uv's reason why there is none."""
    text = (engine / "pyproject.toml").read_text() if pyproject is None else pyproject
    return compile_requirements(engine, [], pyproject=text, held=held, timeout=timeout)


def requirements_of(engine: Path, requirements: list[str], *, timeout: float = 120) -> dict[str, list[str]]:
    """Each package's own requirements (Requires-Dist, without those of its extras), read from the wheels uv installs
    without their dependencies into a folder of their own, for the image's platform and Python; {} for a package
    whose wheel could not be had in `timeout` seconds."""
    target = image_target(engine)
    with tempfile.TemporaryDirectory(prefix="metadata-") as folder:
        command = [find_uv(), "pip", "install", "--no-deps", "--no-compile", "--quiet", "--target", folder]
        command += [
            "--python",
            sys.executable,
            "--python-version",
            target.python,
            "--python-platform",
            target.platform,
            *requirements,
        ]
        try:
            subprocess.run(command, cwd=engine, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {}
        found = {}
        for metadata in Path(folder).glob("*.dist-info/METADATA"):
            text = metadata.read_text(errors="replace").split("\n\n", 1)[0]
            name = re.search(r"^Name:\s*(\S+)", text, re.M)
            requires = re.findall(r"^Requires-Dist:\s*(.+?)\s*$", text, re.M)
            if name:
                found[_name(name[1])] = [r for r in requires if "extra ==" not in r and "extra==" not in r]
        return found
