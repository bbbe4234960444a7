"""A dependency that cannot live with the engine, explained in full: every one of its requirements that the engine's
own requirements (the template's, MLServer's, the user's) or constraints.txt's pins refuse, which of those can move,
and the newest version of the dependency that fits."""

from __future__ import annotations

import re
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from chariot_support.dev.deps.pyproject import _name, _shown, template_dependencies
from chariot_support.dev.deps.uv import compile_requirements, requirements_of, resolve

COMMAND = "PYTHONPATH=src python -m chariot_support.dev.deps"
# How long the search for a version that fits may take: uv tries the dependency's versions newest first.
SEARCH_SECONDS = 120


def _fits(engine: Path, requirements: list[str]) -> bool:
    """Whether one version of a package meets all of `requirements` (on that package, for the image)."""
    return not isinstance(compile_requirements(engine, requirements, no_deps=True, timeout=60), str)


def refused(engine: Path, requirement: str, held: dict[str, str]) -> list[str]:
    """Lines naming each requirement of `requirement`'s package that the engine refuses, and by what: the template's
    dependencies and MLServer's (the engine's own: they cannot move), the user's own in pyproject.toml (change them
    there), and constraints.txt's pins (`--release` lets them move)."""
    pyproject = engine / "pyproject.toml"
    template = template_dependencies(pyproject)
    project = tomllib.loads(pyproject.read_text())["project"]
    own = [r for r in project["dependencies"] if r not in template and _name(r) != _name(requirement)]
    mlserver = next((r for r in template if _name(r) == "mlserver"), None)
    metadata = requirements_of(engine, [requirement, *([mlserver] if mlserver else [])])
    if _name(requirement) not in metadata:
        return [f"(the requirements of {requirement} could not be read from its wheel, so only uv's reason is given)"]
    fixed = [(f"the template requires {_shown(r)}", "the engine's own: it cannot move", r) for r in template]
    if mlserver and _name(mlserver) in metadata:
        fixed += [
            (f"{mlserver} requires {_shown(r)}", "MLServer's: it cannot move", r) for r in metadata[_name(mlserver)]
        ]
    fixed += [(f"pyproject.toml requires {r}", "yours: change it there", r) for r in own]

    def against(wanted: str) -> list[str]:
        name = _name(wanted)
        found = [f"{who} ({can})" for who, can, r in fixed if _name(r) == name and not _fits(engine, [wanted, r])]
        if not found and name in held and not _fits(engine, [wanted, held[name]]):
            found.append(f"constraints.txt pins {held[name]} (it can move: --release {name})")
        return found

    wanted = metadata[_name(requirement)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(against, wanted))
    shown = [_shown(w) for w in wanted]
    lines = [f"  {w}: {'; '.join(found)}" for w, found in zip(shown, results, strict=True) if found]
    if not lines:
        return [f"None of {requirement}'s own requirements clashes with the engine's: uv's reason above is deeper."]
    return [f"Each requirement of {requirement} that the engine refuses:", *lines]


def newest_fit(engine: Path, requirement: str, held: dict[str, str], *, pins_only: bool = False) -> list[str]:
    """The newest version of `requirement`'s package, other than the one asked for, that fits. Where only
    constraints.txt's pins stand in the way (`pins_only`: releasing them lets even this version in), it is sought with
    every pin held; else uv seeks it against the engine's own requirements, then the pins are tried with it."""
    name = _name(requirement)
    pinned = re.fullmatch(r"\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*==\s*([^\s;,]+)\s*", requirement)
    text = (engine / "pyproject.toml").read_text()

    def trying(instead: str, pins: dict[str, str]) -> str | None:
        found = resolve(
            engine, pins, pyproject=text.replace(f'"{requirement}"', f'"{instead}"', 1), timeout=SEARCH_SECONDS
        )
        return None if isinstance(found, str) or name not in found.pins else found.pins[name].split("==", 1)[1]

    version = trying(f"{name}!={pinned[1]}" if pinned else name, held if pins_only else {})
    if version is None:
        other = f"other than {pinned[1]} " if pinned else ""
        return [f"No version of {name} {other}fits the engine: uv searched them, newest first."]
    held_too = pins_only or not held or trying(f"{name}=={version}", held) is not None
    said = "with every pin as it is" if held_too else "once constraints.txt's pins move (`add` names them)"
    return [f"The newest {name} that fits, {said}: {version}. `{COMMAND} add '{name}=={version}'`"]


def override_hint(requirement: str, lines: list[str]) -> list[str]:
    """How to override the dependency's pins the engine's own requirements refuse, and what it risks."""
    names = [_name(line) for line in lines if line.startswith("  ") and "cannot move" in line]
    options = " ".join(f"--override {name}" for name in dict.fromkeys(names))
    if not options:
        return []
    return [
        f"If {_name(requirement)} runs with the engine's versions all the same (its pin tighter than it needs),"
        f" override its pins: `{COMMAND} add '{requirement}' {options}` (uv's override-dependencies in pyproject.toml;"
        " an override replaces every requirement on the package, so the engine's range is kept beside it). The"
        " package was never tested with those versions: test your model."
    ]


def explain_package(engine: Path, requirement: str, held: dict[str, str], *, pins_only: bool = False) -> str:
    """Everything `add` can say about a requirement that does not fit: what clashes, what fits, how to override."""
    lines = refused(engine, requirement, held)
    fit = newest_fit(engine, requirement, held, pins_only=pins_only)
    return "\n".join([*lines, *fit, *override_hint(requirement, lines)])
