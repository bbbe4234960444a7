"""An engine's dependencies: add one and lock every version, and check that no second OpenCV got in.

    python -m chariot_support.dev.deps add 'onnxruntime==1.32.0'   # add to pyproject.toml, then lock
    python -m chariot_support.dev.deps lock                        # resolve pyproject.toml again into constraints.txt
    python -m chariot_support.dev.deps lock --release protobuf     # the same, letting protobuf's pin move
    python -m chariot_support.dev.deps check                       # this environment has one OpenCV, the headless one

Run it from the engine's folder. Locking installs the engine with every extra of pyproject.toml (test, eval) into a
fresh virtual environment with this Python, keeping every version constraints.txt already pins where it can, and
writes every package it installed, exactly pinned, into constraints.txt: the image installs the runtime ones,
`pip install -c constraints.txt -e '.[test]'` the test extra's too. When pip cannot resolve, the command says which requirements conflict
and which pins hold them, and leaves pyproject.toml and constraints.txt as they were.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable
from pathlib import Path

HEADLESS = "opencv-python-headless"
# Each installs its own cv2 over the engine's, and needs libGL, which the slim image does not have.
OTHER_OPENCVS = ("opencv-python", "opencv-contrib-python")
# pip's heading of the lines that say which requirements of a failed resolution conflict.
CONFLICT = "The conflict is caused by:"
HEADER = """\
# Every package the engine installs, pinned, so an image built a year from now gets the same versions as today;
# pyproject.toml keeps the ranges the engine's code accepts, this file picks one version in each (the engine itself
# is not listed). The image installs the engine's run-time dependencies from it; `pip install -c constraints.txt
# -e '.[test]'` installs the test extra too, and '.[eval]' the evaluation's. Written by `python -m
# chariot_support.dev.deps lock` (or `add`), with the image's Python; do not edit by hand.
"""


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;@]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


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
                f" {other} needs libGL, which the image does not have. Use a package that depends on {HEADLESS}, or"
                f" install {wanted_by[0] if wanted_by else 'it'} with `pip install --no-deps` and add its other"
                " dependencies yourself"
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


def read_pins(constraints: Path) -> dict[str, str]:
    pins = {}
    for line in constraints.read_text().splitlines() if constraints.is_file() else []:
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            pins[_name(line)] = line
    return pins


def lock(engine: Path, *, python: str = sys.executable, release: Iterable[str] = ()) -> dict[str, str]:
    """Resolve the engine (with every extra) into a fresh environment and write constraints.txt, holding every
    version it already pins but those of the packages in `release`. Returns the new pins."""
    constraints = engine / "constraints.txt"
    old = read_pins(constraints)
    released = {_name(r) for r in release}
    project = tomllib.loads((engine / "pyproject.toml").read_text())["project"]
    extras = ",".join(sorted(project.get("optional-dependencies", {})))
    wanted = f"{engine}[{extras}]" if extras else str(engine)
    with tempfile.TemporaryDirectory(prefix="lock-") as folder:
        venv = Path(folder) / "venv"
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "--quiet"]
        _run([python, "-m", "venv", str(venv)], "create a virtual environment")
        # A new environment carries its own setuptools; without it pip resolves the version the engine needs.
        _run([*pip, "uninstall", "-y", "setuptools"], "remove the environment's own setuptools")
        held = Path(folder) / "held.txt"
        held.write_text("\n".join(pin for name, pin in old.items() if name not in released) + "\n")
        # Not --quiet: pip says which requirements conflict at its info level.
        _run([*pip[:-1], "install", "-c", str(held), wanted], "install the engine with those pins")
        check = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "chariot_support.dev.deps", "check"], capture_output=True, text=True
        )
        if check.returncode != 0:
            raise SystemExit(check.stderr.strip() or check.stdout.strip())
        frozen = _run(
            [*pip, "freeze", "--all", "--exclude", "pip", "--exclude", project["name"]], "list what was installed"
        )
    new = {_name(line): line.strip() for line in frozen.splitlines() if "==" in line}
    constraints.write_text(HEADER + "\n".join(new[name] for name in sorted(new)) + "\n")
    return new


def _run(command: list[str], doing: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        why = pip_failure(result.stdout + "\n" + result.stderr)
        raise SystemExit(f"could not {doing}:\n{why}")
    return result.stdout


def pip_failure(output: str) -> str:
    """What in pip's output (stdout and stderr together) says why it failed: the lines naming the requirements
    that conflict and, for a pin of constraints.txt among them, how to let it move; else its ERROR lines."""
    lines = output.splitlines()
    if CONFLICT in lines:
        start = lines.index(CONFLICT) + 1
        end = next((n for n in range(start, len(lines)) if not lines[n].strip()), len(lines))
        causes = [line.strip() for line in lines[start:end]]
        pins = [m.group(1) for c in causes if (m := re.fullmatch(r"The user requested \(constraint\) (\S+)", c))]
        said = [CONFLICT, *(f"    {c}" for c in causes)]
        if pins:
            names = " ".join(f"--release {_name(p)}" for p in pins)
            said.append(
                f"constraints.txt pins {', '.join(pins)}: pick a version of your requirement that accepts that, or"
                f" run the command again with `{names}` to let the pin move (a dependency above may still hold it)"
            )
        return "\n".join(said)
    errors = [line for line in lines if line.startswith("ERROR:")]
    return "\n".join(errors or [line for line in lines if line.strip()][-20:])


def _changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    lines = [f"  + {new[n]}" for n in sorted(new.keys() - old.keys())]
    lines += [f"  ~ {old[n]} -> {new[n]}" for n in sorted(new.keys() & old.keys()) if old[n] != new[n]]
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
    commands.add_parser("check", help="check that this environment has one OpenCV, the headless one")
    args = parser.parse_args(argv)
    if args.command == "check":
        problems = opencv_conflicts()
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    engine = Path.cwd()
    if not (engine / "pyproject.toml").is_file():
        parser.error("run it from the engine's folder, where pyproject.toml is")
    old = read_pins(engine / "constraints.txt")
    files = {p: p.read_bytes() for p in (engine / "pyproject.toml", engine / "constraints.txt") if p.is_file()}
    release: list[str] = args.release
    if args.command == "add":
        if not add_dependency(engine / "pyproject.toml", args.requirement):
            parser.error(f"{_name(args.requirement)} is already a dependency in pyproject.toml: edit its pin there")
        release = [args.requirement, *release]
        print(f"added {args.requirement} to pyproject.toml; locking (a minute or two)...")
    try:
        new = lock(engine, release=release)
    except SystemExit as failed:
        for path, content in files.items():
            path.write_bytes(content)
        raise SystemExit(f"{failed.code}\npyproject.toml and constraints.txt are as they were.") from None
    print("constraints.txt:", *(_changes(old, new) or ["  no changes"]), sep="\n")
    print("reinstall: pip install -c constraints.txt -e '.[test]'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
