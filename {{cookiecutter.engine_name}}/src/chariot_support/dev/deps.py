"""`python -m chariot_support.dev.deps`, the dependency command of engines baked before they were uv projects, gone:
it says which uv command does the job now, from what the engine's folder holds, and exits 1. uv adds, locks and
installs (docs/dependencies.md).
"""

from __future__ import annotations

import shlex
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

GONE = "python -m chariot_support.dev.deps is gone: engines are uv projects (pyproject.toml and uv.lock)."
NO_LOCK = (
    "This folder has no uv.lock yet: docs/updating.md moves an engine from before uv.lock to it"
    " (`git rm constraints.txt && uv lock`, once pyproject.toml is resolved)."
)
GUIDE = "docs/dependencies.md has the rest (PyTorch's CPU or CUDA build, over-tight pins, updating)."


def excluded(folder: Path) -> list[str]:
    """The packages pyproject.toml's [tool.uv] exclude-dependencies lists in `folder` (none when it cannot say)."""
    try:
        project = tomllib.loads((folder / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return []
    return list(project.get("tool", {}).get("uv", {}).get("exclude-dependencies", []))


def options(args: Sequence[str], option: str) -> tuple[list[str], list[str]]:
    """The values given to `option` (as `--option V` or `--option=V`), and the other arguments."""
    values, rest = [], []
    words = iter(args)
    for word in words:
        if word == option:
            values.append(next(words, ""))
        elif word.startswith(option + "="):
            values.append(word.partition("=")[2])
        else:
            rest.append(word)
    return values, rest


def replacement(args: Sequence[str], folder: Path = Path(".")) -> list[str]:
    """What to run instead of `deps <args>` in the engine's `folder`, as lines to print."""
    command, rest = (args[0], list(args[1:])) if args else ("", [])
    released, rest = options(rest, "--release")
    overrides, rest = options(rest, "--override")
    without, rest = options(rest, "--without")
    torch, rest = options(rest, "--torch")
    _, rest = options(rest, "--torch-index")
    upgrade = "".join(f" --upgrade-package {shlex.quote(package)}" for package in released if package)
    lines = [] if (folder / "uv.lock").is_file() else [NO_LOCK]
    if overrides:
        lines.append(
            "Lift an over-tight pin first: list the requirement that replaces it under [tool.uv] override-dependencies"
            " in pyproject.toml."
        )
    if command == "add":
        requirements = [word for word in rest if not word.startswith("-")] or ["PKG==VERSION"]
        lines.append(f"Add a package with uv: `uv add {shlex.join(requirements)}` (it locks, then installs).")
    elif command == "lock":
        lines.append(f"Lock with uv: `uv lock{upgrade}`, then `uv sync` to install what it locked.")
    elif command == "check":
        lines.append("The OpenCV check is one of the engine's tests: `pytest tests/test_environment.py`.")
    else:
        lines.append("Add a package with `uv add PKG==VERSION`; lock with `uv lock`; install with `uv sync`.")
    if command == "add" and upgrade:
        lines.append(f"A locked version moves with `uv lock{upgrade}`.")
    if without:
        listed = excluded(folder)
        missing = [package for package in without if package and package not in listed]
        if missing:
            lines.append(
                f"Leave a package out by listing it under [tool.uv] exclude-dependencies in pyproject.toml: {', '.join(missing)}."
            )
        else:
            lines.append(f"pyproject.toml's [tool.uv] exclude-dependencies already leaves out {', '.join(listed)}.")
    if torch:
        lines.append("PyTorch's CPU or CUDA build is chosen in pyproject.toml, as docs/dependencies.md shows.")
    return [GONE, *lines, GUIDE]


def main(argv: Sequence[str] | None = None) -> int:
    print("\n".join(replacement(sys.argv[1:] if argv is None else argv)), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
