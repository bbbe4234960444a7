"""What a template update (`cruft update`) left for you to finish: `python -m chariot_support.dev.update_check`.

cruft applies the template's changes as a three-way merge and says "Good work!" either way: a change that clashes
with one of yours is left in the file between conflict markers, and a change it could not place at all is left in a
`<file>.rej` beside the file. This finds both in the engine's files (those git tracks or would track; every file
when the engine is not in git), names each file and line, and says what to do; and a constraints.txt, which engines
kept before they were uv projects, which no command reads any more. Exit status 0 when there is nothing left, 1
otherwise. tests/test_environment.py runs the same check, so `pytest` fails until they are resolved.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

# The lines git writes around a conflict (`|||||||` only in its diff3 style): at the start of a line, seven of one
# character and, but for the divider, a space and the side's name.
OPENING, BASE, DIVIDER, CLOSING = "<" * 7, "|" * 7, "=" * 7, ">" * 7
# Folders never read when the engine is not in git: environments, caches and build output.
SKIPPED = frozenset({".git", ".venv", "venv", "node_modules", "__pycache__", "build", "dist", ".pytest_cache"})

ADVICE = """\
What to do:
- Between `<<<<<<< ours` and `=======` is your version, between `=======` and `>>>>>>> theirs` the template's. Keep
  what the engine needs (often both), delete the three marker lines, and `git add` the file.
- A `<file>.rej` holds the template's changes to <file> that could not be placed: make them in <file> by hand (or
  leave them out on purpose), then delete the .rej file.
- uv.lock is not merged (pyproject.toml's [tool.cruft] skip lists it): once pyproject.toml is resolved, `uv lock`
  locks it again, then `uv sync` installs what it locked.
- constraints.txt: uv.lock holds the engine's versions now. Once pyproject.toml is resolved (your dependencies below
  the comment that closes the template's), `git rm constraints.txt && uv lock`.
Then run this check again, and `pytest`."""
# Files an engine kept before the template changed them into something else; the update cannot delete them when they
# were changed since baking (constraints.txt, rewritten by the dependency command engines had).
SUPERSEDED = {"constraints.txt": "the versions engines kept before they were uv projects; uv.lock holds them now"}


@dataclass(frozen=True)
class Leftover:
    """One thing an update left: a conflict marker (`line` set), a .rej file or a superseded file (`line` None)."""

    path: str  # relative to the engine's folder
    line: int | None = None
    text: str = ""

    def __str__(self) -> str:
        if self.path in SUPERSEDED:
            return f"{self.path}: {SUPERSEDED[self.path]}"
        if self.line is None:
            target = self.path.removesuffix(".rej")
            return f"{self.path}: the template's changes to {target} that could not be applied"
        return f"{self.path}:{self.line}: {self.text}"


def engine_files(root: Path) -> list[str]:
    """The engine's files, relative to `root`: what git tracks there and what it would track (not ignored), or every
    file outside SKIPPED folders when `root` is not in a git checkout."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        listed = None
    names = set(listed.stdout.decode(errors="surrogateescape").split("\0")) - {""} if listed else set()
    if listed is not None and listed.returncode == 0 and names:  # none: a folder the enclosing checkout ignores
        return sorted(names)
    found = []
    for folder, folders, files in os.walk(root):
        folders[:] = sorted(f for f in folders if f not in SKIPPED and not f.endswith(".egg-info"))
        found += [str((Path(folder) / f).relative_to(root)) for f in files]
    return sorted(found)


def markers(path: Path, name: str) -> Iterator[Leftover]:
    """The conflict marker lines in one text file. A divider (`=======`, which also underlines headings) counts
    only inside a conflict, after an opening marker."""
    try:
        raw = path.read_bytes()
    except OSError:
        return
    if b"\0" in raw[:8192]:  # a binary file: git does not merge those line by line
        return
    inside = False
    for number, line in enumerate(raw.decode(errors="replace").splitlines(), start=1):
        if _marker(line, OPENING):
            inside = True
        elif _marker(line, CLOSING):
            inside = False
        elif not (_marker(line, BASE) or (inside and line.rstrip() == DIVIDER)):
            continue
        yield Leftover(name, number, line.rstrip()[:80])


def _marker(line: str, marker: str) -> bool:
    """Whether `line` is the marker, alone or followed by a space and a name (`<<<<<<<<` is not one)."""
    return line.startswith(marker) and line[len(marker) : len(marker) + 1] in ("", " ")


def leftovers(root: Path) -> list[Leftover]:
    """Everything a template update left in the engine at `root`: .rej files, then conflict markers, by file."""
    found = []
    for name in engine_files(root):
        path = root / name
        if not path.is_file():
            continue  # listed by git but deleted in the working tree
        if name.endswith(".rej") or name in SUPERSEDED:
            found.append(Leftover(name))
        else:
            found.extend(markers(path, name))
    return found


def report(found: Sequence[Leftover]) -> str:
    """The check's verdict as text: what is left, file by file, and what to do; or that nothing is."""
    if not found:
        return "Nothing left from a template update: no conflict markers, no .rej files."
    lines = ["The template update left these to resolve:"]
    lines += [f"  {leftover}" for leftover in found]
    return "\n".join([*lines, "", ADVICE])


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1 or args[:1] in (["-h"], ["--help"]):
        print("usage: python -m chariot_support.dev.update_check [ENGINE_FOLDER]  (default: the current folder)")
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    root = Path(args[0] if args else ".")
    found = leftovers(root)
    print(report(found))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
