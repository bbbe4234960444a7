"""The Markdown a person reads, the template's and each baked engine's, renders as written on GitHub and GitLab:
every code fence closed, every relative link and picture pointing at a file (inside the engine, for an engine's
pages) and at a heading where it names one, under both sites' anchors; no raw HTML, which both would hide; table
rows with their header's cells. The two READMEs stay short enough to read as a way in."""

import functools
import os
import re
from pathlib import Path

import pytest

from baking import TASKS
from template_paths import ENGINE_TEMPLATE, TEMPLATE_ROOT

# The template README and a baked engine's: a newcomer reads either in ten minutes.
TEMPLATE_README_BYTES = 15_000
ENGINE_README_BYTES = 25_000
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
TAG = re.compile(r"<(?!!--)/?[A-Za-z][\w-]*[\s/>]")  # a tag; comments and <https://...> autolinks are not
DELIMITER = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def prose(text: str) -> tuple[list[tuple[int, str]], list[str]]:
    """The lines outside code fences, numbered from 1, and the fences left open."""
    lines, problems, open_fence = [], [], None
    for number, line in enumerate(text.splitlines(), start=1):
        fence = FENCE.match(line)
        if open_fence is None:
            if fence and not (fence[1][0] == "`" and "`" in fence[2]):
                open_fence = (fence[1], number)
            else:
                lines.append((number, line))
        elif fence and fence[1][0] == open_fence[0][0] and len(fence[1]) >= len(open_fence[0]):
            if not fence[2].strip():
                open_fence = None
            else:  # a fence with an info string never closes one: the block above lost its closing fence
                problems.append(
                    f"{number}: {fence[1]}{fence[2].strip()} opens a block inside the code block opened at line"
                    f" {open_fence[1]}, whose closing fence is missing"
                )
    if open_fence is not None:
        problems.append(f"{open_fence[1]}: the code fence {open_fence[0]} opened here is never closed")
    return lines, problems


def without_code(text: str) -> str:
    """`text` with its inline code spans taken out (a span may run over lines within a paragraph)."""
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text, flags=re.S)


def paragraphs(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Runs of consecutive lines, as (first line's number, the lines joined)."""
    runs: list[list[tuple[int, str]]] = []
    for number, line in lines:
        if runs and line.strip() and runs[-1][-1][0] == number - 1 and runs[-1][-1][1].strip():
            runs[-1].append((number, line))
        elif line.strip():
            runs.append([(number, line)])
    return [(run[0][0], "\n".join(line for _, line in run)) for run in runs]


@functools.cache
def slugs(text: str) -> tuple[set[str], set[str]]:
    """The anchors GitHub and GitLab give the headings of `text`."""
    github, gitlab = [], []
    for _, line in prose(text)[0]:
        heading = HEADING.match(line)
        if heading:
            words = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading[2]).strip().lower()
            kept = re.sub(r"[^\w\- ]", "", words)
            for found, slug in (
                (github, kept.replace(" ", "-")),
                (gitlab, re.sub(r"-{2,}", "-", kept.replace(" ", "-"))),
            ):
                found.append(slug if slug not in found else f"{slug}-{found.count(slug)}")
    return set(github), set(gitlab)


def problems(path: Path, root: Path) -> list[str]:
    """What would not render as written in the Markdown file `path`, whose links must stay within `root`."""
    # Comments are not shown: a link in one points nowhere a reader can follow (the lines stay where they were).
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m[0].count("\n"), path.read_text(), flags=re.S)
    lines, unclosed = prose(text)
    found = [f"{path.relative_to(root)}:{p}" for p in unclosed]
    table_cells = None
    for number, line in lines:
        cells = len(re.findall(r"(?<!\\)\|", line.strip().strip("|"))) + 1 if line.lstrip().startswith("|") else None
        if cells and DELIMITER.match(line):
            table_cells = cells
        elif cells and table_cells and cells != table_cells:
            where = f"{path.relative_to(root)}:{number}"
            found.append(f"{where}: a table row of {cells} cells under a header of {table_cells} (escape | as \\|)")
        elif not cells:
            table_cells = None
    for number, paragraph in paragraphs(lines):
        where = f"{path.relative_to(root)}:{number}"
        bare = without_code(paragraph)
        if TAG.search(bare):
            found.append(f"{where}: raw HTML, which GitHub and GitLab hide or drop: {TAG.search(bare)[0]!r}")
        for target in LINK.findall(bare) + DEFINITION.findall(bare):
            found += [f"{where}: {p}" for p in link_problems(target, path, root)]
    return found


def link_problems(target: str, path: Path, root: Path) -> list[str]:
    if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
        return []
    file, _, anchor = target.partition("#")
    linked = (path.parent / file).resolve() if file else path
    if not linked.exists():
        return [f"{target} points at no file"]
    if not linked.is_relative_to(root.resolve()):
        return [f"{target} points outside {root.name}"]
    if anchor and linked.suffix == ".md":
        github, gitlab = slugs(linked.read_text())
        if anchor not in github or anchor not in gitlab:
            return [f"{target} names no heading of {linked.name} (GitHub's anchors: {sorted(github)[:40]})"]
    return []


def markdown(root: Path) -> list[Path]:
    """Every Markdown file under `root` a person reads, leaving out tools' folders (venvs, builds, caches)."""
    found = []
    for folder, folders, files in os.walk(root):
        folders[:] = [f for f in folders if not f.startswith(".") and f not in ("build", "node_modules", "out")]
        found += [Path(folder) / f for f in files if f.endswith(".md")]
    return sorted(found)


def test_the_checks_find_what_would_not_render(tmp_path):
    (tmp_path / "there.md").write_text("# A heading: with `code`\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](there.md#a-heading-with-code) [ok too](there.md#twice-1) [here](#page)"
        " ![gone](missing.png) [no heading](there.md#nowhere) [web](https://example.com) `[in code](nowhere.md)`\n\n"
        "| a | b |\n| --- | --- |\n| `x|y` | z |\n| fine | \\| |\n\nSee <id> here; `<id>` is code. <!-- a comment: ![hidden](nowhere.png) -->\n\n"
        "[up](../outside.md)\n\n```bash\n[not a link](nowhere.md)\n```\n\na stray fence:\n```\n\n```bash\nls\n```\n\n"
        "```text\nnever closed\n"
    )
    (tmp_path.parent / "outside.md").write_text("x")
    found = problems(page, tmp_path)
    assert found == [
        "page.md:21: ```bash opens a block inside the code block opened at line 19, whose closing fence is missing",
        "page.md:25: the code fence ``` opened here is never closed",
        "page.md:7: a table row of 3 cells under a header of 2 (escape | as \\|)",
        "page.md:3: missing.png points at no file",
        f"page.md:3: there.md#nowhere names no heading of there.md (GitHub's anchors: {['a-heading-with-code', 'twice', 'twice-1']})",
        "page.md:10: raw HTML, which GitHub and GitLab hide or drop: '<id>'",
        "page.md:12: ../outside.md points outside " + tmp_path.name,
    ], found


def test_the_templates_markdown_renders_as_written():
    files = [p for p in markdown(TEMPLATE_ROOT) if p != ENGINE_TEMPLATE / "README.md"]  # that one is Jinja: baked below
    assert TEMPLATE_ROOT / "README.md" in files and ENGINE_TEMPLATE / "docs" / "settings.md" in files
    # The engine's docs/ are copied into every engine unrendered, so their links must hold inside an engine.
    found = [
        p for f in files for p in problems(f, ENGINE_TEMPLATE if f.is_relative_to(ENGINE_TEMPLATE) else TEMPLATE_ROOT)
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("task", list(TASKS))
def test_a_baked_engines_markdown_renders_as_written(baked, task):
    root = Path(baked(task))
    files = markdown(root)
    assert root / "README.md" in files and root / "docs" / "protocol.md" in files
    found = [p for f in files for p in problems(f, root)]
    assert not found, "\n".join(found)
    size = len((root / "README.md").read_bytes())
    assert size <= ENGINE_README_BYTES, f"the baked README is {size:,} bytes: move reference to a page of docs/"


def test_the_template_readme_is_a_way_in_not_a_manual():
    size = len((TEMPLATE_ROOT / "README.md").read_bytes())
    assert size <= TEMPLATE_README_BYTES, f"README.md is {size:,} bytes: move reference to a page of docs/"
