"""The engine's Dockerfile read as Docker reads it, for the tests that hold it to what the engine does and that run
the commands it runs."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    args: str  # continuation lines joined, comment lines dropped
    line: int


def parse_dockerfile(text: str) -> list[list[Instruction]]:
    """The Dockerfile's instructions, one list per build stage (the last one is the image that runs)."""
    instructions: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue  # Docker drops comment lines, even inside a continued instruction
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        pending += stripped
        keyword, _, args = pending.strip().partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
        pending = ""
    assert not pending, "the Dockerfile ends in the middle of a continued line"
    stages: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction.keyword == "FROM":
            stages.append([])
        assert stages, f"line {instruction.line}: {instruction.keyword} before the first FROM"
        stages[-1].append(instruction)
    return stages


def command(args: str) -> list[str]:
    """A CMD/RUN/HEALTHCHECK command as an argument list, from the JSON (exec) form or the shell form."""
    if args.startswith("["):
        parsed = json.loads(args)
        assert isinstance(parsed, list) and all(isinstance(a, str) for a in parsed), f"not a JSON string list: {args}"
        return parsed
    return shlex.split(args)


def last(stage: list[Instruction], keyword: str) -> Instruction | None:
    found = [i for i in stage if i.keyword == keyword]
    return found[-1] if found else None


def run_flags(run: str) -> tuple[list[str], str]:
    """A RUN instruction's own flags (`--mount=type=cache,target=...`), and the command after them."""
    words = run.split()
    count = next((i for i, word in enumerate(words) if not word.startswith("--")), len(words))
    return words[:count], run.split(None, count)[-1] if count else run


def commands(run: str) -> list[list[str]]:
    """The commands of a RUN instruction, each as its words (a quoted word, such as python -c code, kept whole); the
    instruction's own flags (`--mount=...`) are not a command's."""
    found: list[list[str]] = [[]]
    for word in shlex.split(run_flags(run)[1]):
        if word in {"&&", "||", ";"}:
            found.append([])
        else:
            found[-1].append(word)
    return [c for c in found if c]


def env_of(stage: list[Instruction]) -> dict[str, str]:
    """The ENV values a stage sets (the `ENV k=v ...` form)."""
    values: dict[str, str] = {}
    for instruction in stage:
        if instruction.keyword == "ENV":
            for pair in shlex.split(instruction.args):
                key, _, value = pair.partition("=")
                values[key] = value
    return values


def uv_syncs(stages: list[list[Instruction]]) -> list[tuple[Instruction, list[str]]]:
    """The `uv sync` commands the Dockerfile runs to install the engine, in order, each with its RUN instruction."""
    runs = [(i, args) for stage in stages for i in stage if i.keyword == "RUN" for args in commands(i.args)]
    return [(i, args) for i, args in runs if args[:2] == ["uv", "sync"]]
