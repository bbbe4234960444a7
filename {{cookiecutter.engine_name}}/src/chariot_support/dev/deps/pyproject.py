"""pyproject.toml, edited in place with its layout and comments kept: the dependencies `add` appends, the packages
left out of every install, the overrides of a dependency's over-tight pins, and where torch comes from."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

# The comment that closes the template's own dependencies in pyproject.toml; the user's go below it.
TEMPLATE_ENDS = "# The template's dependencies end here."
TORCH_FAMILY = ("torch", "torchvision", "torchaudio")
TORCH_INDEX = "pytorch-cpu"
# PyTorch's own index of CPU-only builds; `--torch-index` (or CHARIOT_TORCH_INDEX) names a mirror of it instead.
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_BLOCK_START = "# --- torch: PyTorch's CPU-only builds"
TORCH_BLOCK_END = "# --- end of torch's CPU-only builds ---"


def _name(requirement: str) -> str:
    """The package's normalised name (PEP 503): `PyYAML>=6` and `zope.event==6.2` give pyyaml and zope-event."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;@]", requirement.strip(), maxsplit=1)[0]).lower()


def _spec(requirement: str) -> str:
    """What follows the name: `numpy >=2.4,<2.5` gives `>=2.4,<2.5`."""
    return re.sub(r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*", "", requirement, count=1).strip()


def _shown(requirement: str) -> str:
    """A requirement as the engine's files write one: `Pillow (<10.3.0,>=10.2.0)` is `Pillow<10.3.0,>=10.2.0`."""
    return re.sub(r"^([A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?)\s*\(?([^;)]*)\)?", r"\1\2", requirement.strip())


def _uv_table(pyproject: Path) -> dict:
    return tomllib.loads(pyproject.read_text()).get("tool", {}).get("uv", {})


def template_dependencies(pyproject: Path) -> list[str]:
    """The template's own requirements: [project] dependencies above the comment that closes them (all of them in
    a pyproject.toml without that comment)."""
    block = re.search(r"^dependencies = \[\n(.*?)^\]", pyproject.read_text(), re.M | re.S)
    text = block[1] if block else ""
    ours = text.split(TEMPLATE_ENDS, 1)[0]
    return re.findall(r'^\s*"([^"]+)"', ours, re.M)


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
    return list(_uv_table(pyproject).get("exclude-dependencies", []))


def overridden(pyproject: Path) -> list[str]:
    """pyproject.toml's [tool.uv] override-dependencies: requirements that replace every other on their package."""
    return list(_uv_table(pyproject).get("override-dependencies", []))


def _set_uv_list(pyproject: Path, key: str, values: list[str]) -> None:
    """Write `key = [values]` into pyproject.toml's [tool.uv] table (the table too, if the file has none)."""
    text = pyproject.read_text()
    line = f"{key} = [" + ", ".join(f'"{v}"' for v in values) + "]"
    table = re.search(r"^\[tool\.uv\][ \t]*\n", text, re.M)
    if table is None:
        text = text.rstrip("\n") + f"\n\n[tool.uv]\n{line}\n"
    else:
        end = re.compile(r"^\[", re.M).search(text, table.end())
        body = slice(table.end(), end.start() if end else len(text))
        found = re.compile(rf"^{key}\s*=\s*\[.*?\][ \t]*$", re.M | re.S).search(text, body.start, body.stop)
        if found is None:
            text = text[: table.end()] + line + "\n" + text[table.end() :]
        else:
            text = text[: found.start()] + line + text[found.end() :]
    pyproject.write_text(text)


def exclude(pyproject: Path, packages: Iterable[str]) -> list[str]:
    """Add `packages` to [tool.uv] exclude-dependencies in `pyproject` (the table and the key too, if the file has
    neither), keeping the rest of the file as it is; returns the ones that were not listed yet."""
    current = excluded(pyproject)
    new = [p for p in dict.fromkeys(packages) if _name(p) not in {_name(c) for c in current}]
    if new:
        _set_uv_list(pyproject, "exclude-dependencies", sorted([*current, *new], key=_name))
    return new


def override(pyproject: Path, requirements: Iterable[str], engines: Iterable[str] = ()) -> list[str]:
    """Put `requirements` in [tool.uv] override-dependencies, replacing an earlier override of the same package.
    An override replaces every requirement on its package, the engine's own too, so the ranges the template and
    `engines` (MLServer's requirements) give that package are kept beside it: `numpy>=2` becomes
    `numpy>=2,>=2.4,<2.5`, and a bare `numpy` the engine's range alone. Returns what it wrote."""
    ranges: dict[str, list[str]] = {}
    for requirement in [*template_dependencies(pyproject), *engines]:
        if (spec := _spec(_shown(requirement).split(";", 1)[0])) and not spec.startswith("["):
            ranges.setdefault(_name(requirement), []).append(spec)
    current = {_name(r): r for r in overridden(pyproject)}
    written = []
    for requirement in requirements:
        name = _name(requirement)
        requirement = name + ",".join(dict.fromkeys(s for s in (_spec(requirement), *ranges.get(name, [])) if s))
        current[name] = requirement
        written.append(requirement)
    if written:
        _set_uv_list(pyproject, "override-dependencies", [current[n] for n in sorted(current)])
    return written


def torch_index(pyproject: Path) -> str | None:
    """The URL of the CPU-only index pyproject.toml routes torch to, or None where torch comes from PyPI."""
    uv = _uv_table(pyproject)
    if uv.get("sources", {}).get("torch", {}).get("index") != TORCH_INDEX:
        return None
    return next((i.get("url") for i in uv.get("index", []) if i.get("name") == TORCH_INDEX), None)


def route_torch(pyproject: Path, index: str | None) -> None:
    """Route torch, torchvision and torchaudio to the CPU-only index at `index` (uv's [[tool.uv.index]], explicit so
    that nothing else comes from it, and [tool.uv.sources]), or back to PyPI when `index` is None: a block of its own at
    the end of pyproject.toml, which `uv pip compile` and `uv pip install` read where they run (the lock, the README's
    install, the image's)."""
    text = pyproject.read_text()
    start, end = text.find(TORCH_BLOCK_START), text.find(TORCH_BLOCK_END)
    if start >= 0 and end >= 0:
        text = text[:start].rstrip("\n") + "\n" + text[end + len(TORCH_BLOCK_END) :].lstrip("\n")
    if index is not None:
        if tomllib.loads(text).get("tool", {}).get("uv", {}).get("sources"):
            raise SystemExit(
                "pyproject.toml has a [tool.uv.sources] table of its own: add"
                f' `torch = {{ index = "{TORCH_INDEX}" }}` (and torchvision, torchaudio) to it and a [[tool.uv.index]]'
                f' named {TORCH_INDEX} with url = "{index}" and explicit = true, by hand'
            )
        sources = "".join(f'{name} = {{ index = "{TORCH_INDEX}" }}\n' for name in TORCH_FAMILY)
        text = (
            text.rstrip("\n") + f"\n\n{TORCH_BLOCK_START} (`python -m chariot_support.dev.deps lock --torch cpu`;\n"
            "# `--torch cuda` removes it). uv takes torch, torchvision and torchaudio from this index, everything else\n"
            "# from PyPI, and only for dependencies [project] lists itself. ---\n"
            f'[[tool.uv.index]]\nname = "{TORCH_INDEX}"\nurl = "{index}"\nexplicit = true\n\n'
            f"[tool.uv.sources]\n{sources}{TORCH_BLOCK_END}\n"
        )
    pyproject.write_text(text)
