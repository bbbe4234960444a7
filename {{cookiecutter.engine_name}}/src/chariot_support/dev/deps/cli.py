"""`python -m chariot_support.dev.deps`: its options, and `add` and `lock` carried out, with pyproject.toml and
constraints.txt put back as they were when they fail."""

from __future__ import annotations

import argparse
import os
import re
import sys
import tomllib
from pathlib import Path

from chariot_support.dev.deps.clashes import explain_package
from chariot_support.dev.deps.lock import changes, lock
from chariot_support.dev.deps.opencv import opencv_conflicts
from chariot_support.dev.deps.pyproject import (
    PYTORCH_CPU_INDEX,
    TORCH_FAMILY,
    _name,
    add_dependency,
    exclude,
    override,
    route_torch,
    template_dependencies,
)
from chariot_support.dev.deps.torch_build import build_said, cuda_note, cuda_packages, direct_torch
from chariot_support.dev.deps.uv import REINSTALL, Resolution, image_target, read_pins, requirements_of

PACKAGE_NAME = "[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?"


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m chariot_support.dev.deps",
        description=(sys.modules["chariot_support.dev.deps"].__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="add a dependency to pyproject.toml and lock")
    add.add_argument("requirement", help="a requirement with a tight pin, such as 'onnxruntime==1.32.0'")
    lock_command = commands.add_parser("lock", help="resolve pyproject.toml again into constraints.txt, for the image")
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
        command.add_argument(
            "--torch",
            choices=("cpu", "cuda"),
            help="which build of torch (and torchvision, torchaudio) the image gets: cpu, PyTorch's CPU-only build"
            " from its own index; cuda, PyPI's, which on Linux is the CUDA build (several GB more). Kept in"
            " pyproject.toml ([[tool.uv.index]] and [tool.uv.sources])",
        )
        command.add_argument(
            "--torch-index",
            metavar="URL",
            default=os.environ.get("CHARIOT_TORCH_INDEX", PYTORCH_CPU_INDEX),
            help=f"the index of torch's CPU-only builds for --torch cpu: a mirror of {PYTORCH_CPU_INDEX} (the"
            " default; CHARIOT_TORCH_INDEX sets it too)",
        )
        command.add_argument(
            "--override",
            action="append",
            default=[],
            metavar="REQUIREMENT",
            help="replace every requirement on a package by this one, such as 'torch>=2.5' or numpy, where a"
            " dependency pins it tighter than it needs (repeatable); kept in pyproject.toml's [tool.uv]"
            " override-dependencies, with the template's and MLServer's own ranges kept beside it",
        )
    commands.add_parser("check", help="check that this environment has one OpenCV, the headless one")
    return parser


def main(argv: list[str] | None = None) -> int:
    arguments = parser()
    args = arguments.parse_args(argv)
    if args.command == "check":
        problems = opencv_conflicts()
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    engine = Path.cwd()
    pyproject = engine / "pyproject.toml"
    if not pyproject.is_file():
        arguments.error("run it from the engine's folder, where pyproject.toml is")
    project = tomllib.loads(pyproject.read_text())["project"]
    direct = {_name(r) for r in project["dependencies"]}
    direct |= {_name(r) for extra in project.get("optional-dependencies", {}).values() for r in extra}
    if args.command == "add":
        direct.add(_name(args.requirement))
    for package_name in args.without:
        if not re.fullmatch(PACKAGE_NAME, package_name):
            arguments.error(f"--without takes a package's name, such as opencv-python, not {package_name!r}")
        if _name(package_name) in direct:
            arguments.error(
                f"--without {package_name}: pyproject.toml requires {_name(package_name)} itself; --without leaves out"
                " what your dependencies require, not what the engine does"
            )
    if not args.torch_index.startswith(("https://", "http://", "file://")):
        arguments.error(f"--torch-index takes the URL of a package index, not {args.torch_index!r}")
    old = read_pins(engine / "constraints.txt")
    files = {p: p.read_bytes() for p in (pyproject, engine / "constraints.txt") if p.is_file()}
    release: list[str] = args.release
    if args.command == "add":
        if not add_dependency(pyproject, args.requirement):
            arguments.error(f"{_name(args.requirement)} is already a dependency in pyproject.toml: edit its pin there")
        release = [args.requirement, *release]
        print(f"added {args.requirement} to pyproject.toml")
    print(f"resolving for {image_target(engine).described}, wherever this runs")
    if left_out := exclude(pyproject, args.without):
        print(f"pyproject.toml leaves out {', '.join(left_out)} ([tool.uv] exclude-dependencies)")
    mlserver = [r for r in template_dependencies(pyproject) if _name(r) == "mlserver"]
    engines = requirements_of(engine, mlserver).get("mlserver", []) if args.override and mlserver else []
    if written := override(pyproject, args.override, engines):
        print(f"pyproject.toml overrides {', '.join(written)} ([tool.uv] override-dependencies)")
    if args.torch:  # the pins of torch and of the CUDA packages are the other build's
        release += [*TORCH_FAMILY, *cuda_packages(Resolution(pins=old))]
    held = {name: pin for name, pin in old.items() if name not in {_name(r) for r in release}}
    try:
        if args.torch:
            route_torch(pyproject, args.torch_index if args.torch == "cpu" else None)
        new = lock(engine, release=release)
        if args.torch == "cpu" and (added := direct_torch(pyproject, Resolution(pins=new))):
            print(
                f"added {', '.join(added)} to pyproject.toml: uv takes a package from PyTorch's index only for"
                " dependencies pyproject.toml lists itself"
            )
            new = lock(engine, release=release)
    except SystemExit as failed:
        message = str(failed.code)
        if args.torch == "cpu" and re.search(r"no version of (torch|torchvision|torchaudio)\b", message):
            message += (
                f"\nThe CPU-only index at {args.torch_index} has no such build: pin torch (and torchvision) in"
                " pyproject.toml to versions it has, or check the URL (--torch-index, CHARIOT_TORCH_INDEX)."
            )
        elif args.command == "add" and message.startswith("uv cannot resolve"):
            pins_only = "run the command again with `--release" in message
            message += "\n" + explain_package(engine, args.requirement, held, pins_only=pins_only)
        for path, content in files.items():
            path.write_bytes(content)
        raise SystemExit(f"{message}\npyproject.toml and constraints.txt are as they were.") from None
    print("constraints.txt:", *(changes(old, new) or ["  no changes"]), sep="\n")
    resolution = Resolution(pins=new)
    for line in build_said(resolution, pyproject) if args.torch else cuda_note(resolution, pyproject):
        print(line)
    print(f"reinstall: {REINSTALL}")
    return 0
