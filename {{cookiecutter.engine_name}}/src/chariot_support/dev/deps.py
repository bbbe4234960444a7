"""An engine's dependencies: add one and lock every version, and check that no second OpenCV got in.

    python -m chariot_support.dev.deps add 'onnxruntime==1.32.0'   # add to pyproject.toml, then lock
    python -m chariot_support.dev.deps add 'rapidocr-onnxruntime==1.4.4' --without opencv-python
                                                                   # the same, leaving out the OpenCV it asks for
    python -m chariot_support.dev.deps lock                        # resolve pyproject.toml again into constraints.txt
    python -m chariot_support.dev.deps lock --release protobuf     # the same, letting protobuf's pin move
    python -m chariot_support.dev.deps check                       # this environment has one OpenCV, the headless one

Run it from the engine's folder. `add` and `lock` need Python and uv, not the engine: with `PYTHONPATH=src` they run
in a fresh clone before anything else is installed. Locking resolves pyproject.toml with every extra (test, eval) for
this Python with uv, holding every version constraints.txt already pins and leaving out the packages listed under
pyproject.toml's [tool.uv] exclude-dependencies, and writes every package of the resolution, exactly pinned, into
constraints.txt. `uv pip install -c constraints.txt` run in the engine's folder (the README's install and the
Dockerfile's) installs those versions and leaves out the same packages. When uv cannot resolve, the command says
why, names the pins of constraints.txt that are in the way, and leaves pyproject.toml and constraints.txt as they were.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

HEADLESS = "opencv-python-headless"
# Each installs its own cv2 over the engine's, and needs libGL, which the slim image does not have.
OTHER_OPENCVS = ("opencv-python", "opencv-contrib-python")
# How to get uv when it is missing: the version the engine pins (its test extra has it too).
INSTALL_UV = "pip install -c constraints.txt uv"
REINSTALL = "uv pip install -c constraints.txt -e '.[test]'"
HEADER = """\
# Every package the engine installs, pinned, so an image built a year from now gets the same versions as today;
# pyproject.toml keeps the ranges the engine's code accepts, this file picks one version in each (the engine itself
# is not listed). The image installs the engine's run-time dependencies from it; `uv pip install -c constraints.txt
# -e '.[test]'` installs the test extra too, and '.[eval]' the evaluation's. Written by `python -m
# chariot_support.dev.deps lock` (or `add`), with the image's Python; do not edit by hand.
"""
# A pin as uv writes one in its messages: protobuf==6.33.6.
PIN_IN_TEXT = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]*[A-Za-z0-9])")
PACKAGE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")


def _name(requirement: str) -> str:
    """The package's normalised name (PEP 503): `PyYAML>=6` and `zope.event==6.2` give pyyaml and zope-event."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;@]", requirement.strip(), maxsplit=1)[0]).lower()


def _version(pin: str) -> str:
    return pin.split("==", 1)[1].strip()


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


def add_dependency(pyproject: Path, requirement: str) -> bool:
    """Add `requirement` at the end of [project] dependencies in `pyproject`, keeping the file's layout; False if
    that package is already there. The end is below the template's own dependencies and the comment that closes
    them, where a template update (cruft update) adds nothing, so the two do not meet in a merge."""
    text = pyproject.read_text()
    current = tomllib.loads(text)["project"]["dependencies"]
    if any(_name(r) == _name(requirement) for r in current):
        return False
    block = re.search(r"^dependencies = \[\n(.*?)^\]", text, re.M | re.S)
    if block is None:
        raise ValueError(f"{pyproject} has no multi-line `dependencies = [` list to add {requirement} to")
    text = text[: block.end(1)] + f'    "{requirement}",\n' + text[block.end(1) :]
    pyproject.write_text(text)
    return True


def excluded(pyproject: Path) -> list[str]:
    """The packages pyproject.toml's [tool.uv] exclude-dependencies leaves out of every resolution and install."""
    return list(tomllib.loads(pyproject.read_text()).get("tool", {}).get("uv", {}).get("exclude-dependencies", []))


def exclude(pyproject: Path, packages: Iterable[str]) -> list[str]:
    """Add `packages` to [tool.uv] exclude-dependencies in `pyproject` (the table and the key too, if the file has
    neither), keeping the rest of the file as it is; returns the ones that were not listed yet."""
    text = pyproject.read_text()
    current = excluded(pyproject)
    new = [p for p in dict.fromkeys(packages) if _name(p) not in {_name(c) for c in current}]
    if not new:
        return []
    line = "exclude-dependencies = [" + ", ".join(f'"{p}"' for p in sorted([*current, *new], key=_name)) + "]"
    table = re.search(r"^\[tool\.uv\][ \t]*\n", text, re.M)
    if table is None:
        text = text.rstrip("\n") + f"\n\n[tool.uv]\n{line}\n"
    else:
        end = re.compile(r"^\[", re.M).search(text, table.end())
        body = slice(table.end(), end.start() if end else len(text))
        key = re.compile(r"^exclude-dependencies\s*=\s*\[.*?\][ \t]*$", re.M | re.S).search(text, body.start, body.stop)
        if key is None:
            text = text[: table.end()] + line + "\n" + text[table.end() :]
        else:
            text = text[: key.start()] + line + text[key.end() :]
    pyproject.write_text(text)
    return new


def read_pins(constraints: Path) -> dict[str, str]:
    pins = {}
    for line in constraints.read_text().splitlines() if constraints.is_file() else []:
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            pins[_name(line)] = line
    return pins


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


def resolve(engine: Path, held: dict[str, str], *, python: str = sys.executable) -> Resolution | str:
    """Resolve the engine's pyproject.toml with every extra for `python`, holding the pins in `held` and leaving out
    what [tool.uv] exclude-dependencies lists; the resolution, or uv's reason why there is none."""
    pyproject = engine / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text())["project"]
    command = [find_uv(), "pip", "compile", "pyproject.toml", "--python", python, "--no-header", "--color", "never"]
    command += ["--annotation-style", "line", *(["--all-extras"] if project.get("optional-dependencies") else [])]
    with tempfile.TemporaryDirectory(prefix="lock-") as folder:
        if held:
            (Path(folder) / "held.txt").write_text("\n".join(held.values()) + "\n")
            command += ["--constraints", str(Path(folder) / "held.txt")]
        # uv reads [tool.uv] from the pyproject.toml where it runs as well; named here, the lock does not depend on it.
        if leave_out := excluded(pyproject):
            (Path(folder) / "excluded.txt").write_text("\n".join(leave_out) + "\n")
            command += ["--excludes", str(Path(folder) / "excluded.txt")]
        result = subprocess.run(command, cwd=engine, capture_output=True, text=True)
    if result.returncode != 0:
        lines = result.stderr.splitlines()
        start = next((n for n, line in enumerate(lines) if line.startswith("error:")), 0)
        return "\n".join(line.rstrip() for line in lines[start:] if line.strip()) or f"uv exited {result.returncode}"
    return parse_resolution(result.stdout)


def pins_in_the_way(reason: str, held: dict[str, str], free: Resolution) -> list[str]:
    """The pins of `held` that uv's `reason` names and that the resolution without pins (`free`) moves; when the
    reason names none, every pin `free` moves."""
    named = {(_name(n), v) for n, v in PIN_IN_TEXT.findall(reason)}
    moved = [n for n, pin in held.items() if n in free.pins and _version(free.pins[n]) != _version(pin)]
    return [held[n] for n in moved if (n, _version(held[n])) in named] or [held[n] for n in moved]


def explain(engine: Path, held: dict[str, str], reason: str, *, python: str = sys.executable) -> str:
    """Why the engine does not resolve and what to do. Resolved again without constraints.txt's pins, it either
    does not (the requirements themselves conflict) or does, and then the pins in the way are released one reason
    at a time until it resolves: what --release must name for the command to succeed."""
    free = resolve(engine, {}, python=python) if held else reason
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
        why = resolve(engine, {n: pin for n, pin in kept.items() if pin not in more}, python=python)
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


def lock(engine: Path, *, python: str = sys.executable, release: Iterable[str] = ()) -> dict[str, str]:
    """Resolve the engine (with every extra) and write constraints.txt, holding every version it already pins but
    those of the packages in `release`. Returns the new pins."""
    constraints = engine / "constraints.txt"
    released = {_name(r) for r in release}
    held = {name: pin for name, pin in read_pins(constraints).items() if name not in released}
    resolution = resolve(engine, held, python=python)
    if isinstance(resolution, str):
        raise SystemExit(explain(engine, held, resolution, python=python))
    if problems := second_opencvs(resolution):
        raise SystemExit("\n".join(problems))
    new = resolution.pins
    constraints.write_text(HEADER + "\n".join(new[name] for name in sorted(new)) + "\n")
    return new


def _changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    lines = [f"  + {new[n]}" for n in sorted(new.keys() - old.keys())]
    moved = sorted(n for n in new.keys() & old.keys() if _version(old[n]) != _version(new[n]))
    lines += [f"  ~ {old[n]} -> {new[n]}" for n in moved]
    lines += [f"  - {old[n]}" for n in sorted(old.keys() - new.keys())]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chariot_support.dev.deps", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="add a dependency to pyproject.toml and lock")
    add.add_argument("requirement", help="a requirement with a tight pin, such as 'onnxruntime==1.32.0'")
    lock_command = commands.add_parser("lock", help="resolve pyproject.toml again into constraints.txt")
    for command in (add, lock_command):
        command.add_argument(
            "--release", action="append", default=[], metavar="PACKAGE", help="let this package's pin move (repeatable)"
        )
        command.add_argument(
            "--without",
            action="append",
            default=[],
            metavar="PACKAGE",
            help="leave out this package a dependency requires, such as opencv-python (repeatable); kept in"
            " pyproject.toml's [tool.uv] exclude-dependencies",
        )
    commands.add_parser("check", help="check that this environment has one OpenCV, the headless one")
    args = parser.parse_args(argv)
    if args.command == "check":
        problems = opencv_conflicts()
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    engine = Path.cwd()
    pyproject = engine / "pyproject.toml"
    if not pyproject.is_file():
        parser.error("run it from the engine's folder, where pyproject.toml is")
    project = tomllib.loads(pyproject.read_text())["project"]
    direct = {_name(r) for r in project["dependencies"]}
    direct |= {_name(r) for extra in project.get("optional-dependencies", {}).values() for r in extra}
    if args.command == "add":
        direct.add(_name(args.requirement))
    for package in args.without:
        if not PACKAGE_NAME.fullmatch(package):
            parser.error(f"--without takes a package's name, such as opencv-python, not {package!r}")
        if _name(package) in direct:
            parser.error(
                f"--without {package}: pyproject.toml requires {_name(package)} itself; --without leaves out what"
                " your dependencies require, not what the engine does"
            )
    old = read_pins(engine / "constraints.txt")
    files = {p: p.read_bytes() for p in (pyproject, engine / "constraints.txt") if p.is_file()}
    release: list[str] = args.release
    if args.command == "add":
        if not add_dependency(pyproject, args.requirement):
            parser.error(f"{_name(args.requirement)} is already a dependency in pyproject.toml: edit its pin there")
        release = [args.requirement, *release]
        print(f"added {args.requirement} to pyproject.toml")
    if left_out := exclude(pyproject, args.without):
        print(f"pyproject.toml leaves out {', '.join(left_out)} ([tool.uv] exclude-dependencies)")
    try:
        new = lock(engine, release=release)
    except SystemExit as failed:
        for path, content in files.items():
            path.write_bytes(content)
        raise SystemExit(f"{failed.code}\npyproject.toml and constraints.txt are as they were.") from None
    print("constraints.txt:", *(_changes(old, new) or ["  no changes"]), sep="\n")
    print(f"reinstall: {REINSTALL}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
