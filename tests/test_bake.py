"""Bake every task type as a user would, and hold each baked engine to its own tests."""

import json
import os
import re
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

from baking import ANSWERS, TASKS
from chariot_support.dev.testing import chariot_request, image_input, run_engine
from template_paths import TEMPLATE_ROOT, uv

LEFTOVER = re.compile(r"\{\{\s*cookiecutter|\{%")
# What a merge left half-done looks like: git's three markers, each at the start of a line.
CONFLICT = re.compile(r"^(<{7}|>{7})( |$)|^={7}$", re.MULTILINE)


def leftovers(text: str) -> list[str]:
    """Template syntax or merge-conflict markers that should not be in a finished file."""
    return sorted((m.start(), m.group()) for pattern in (LEFTOVER, CONFLICT) for m in pattern.finditer(text))


def test_leftovers_are_found():
    found = leftovers("a\n<<<<<<< HEAD\nb\n=======\nc\n>>>>>>> main\n")
    assert [text for _, text in found] == ["<<<<<<< ", "=======", ">>>>>>> "]
    assert [text for _, text in leftovers("{{ cookiecutter.x }} {% if %}")] == ["{{ cookiecutter", "{%"]
    assert leftovers("a heading\n========\n<<<<<<<< not a marker\n x ======= y\n") == []


def test_no_conflict_markers_in_the_template():
    """Every text file of the template repository, engine folder included, is free of merge-conflict markers."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=TEMPLATE_ROOT, capture_output=True, check=True).stdout
    found = {}
    for name in filter(None, tracked.decode().split("\0")):
        path = TEMPLATE_ROOT / name
        raw = path.read_bytes() if path.is_file() else b""
        if b"\0" not in raw and CONFLICT.search(raw.decode(errors="replace")):
            found[name] = CONFLICT.findall(raw.decode(errors="replace"))
    assert not found, f"merge-conflict markers left in {sorted(found)}"


def files(root):
    from pathlib import Path

    return [p for p in Path(root).rglob("*") if p.is_file() and "__pycache__" not in p.parts]


@pytest.mark.parametrize("task", TASKS)
def test_no_template_syntax_survives(baked, task):
    root = baked(task)
    for path in files(root):
        assert "{{" not in str(path) and "{%" not in str(path), path
        raw = path.read_bytes()
        if b"\0" in raw:  # an image: cookiecutter copies binary files without rendering them
            continue
        left = leftovers(raw.decode(errors="replace"))
        assert not left, f"{path} still holds template syntax or conflict markers: {left}"


@pytest.mark.parametrize("task", TASKS)
def test_only_the_chosen_task_is_kept(baked, task):
    from pathlib import Path

    root = Path(baked(task))
    package = root.name.replace("-", "_")
    assert not (root / "_tasks").exists()
    model = (root / "src" / package / "model.py").read_text()
    assert f"TaskType.{TASKS[task].upper()}" in model
    assert (root / "tests" / "test_task.py").is_file()
    support = TEMPLATE_ROOT / "{{cookiecutter.engine_name}}" / "src" / "chariot_support"
    shipped = {p.relative_to(support): p.read_bytes() for p in files(support)}
    baked_support = root / "src" / "chariot_support"
    assert {p.relative_to(baked_support): p.read_bytes() for p in files(baked_support)} == shipped
    init = (root / "src" / package / "__init__.py").read_text()
    assert f'DEFAULT_MODEL_ID = "{ANSWERS.get(task, {}).get("model_id", "demo")}"' in init


@pytest.mark.parametrize("task", TASKS)
def test_sample_images_arrive_byte_for_byte(baked, task):
    from pathlib import Path

    shipped = TEMPLATE_ROOT / "{{cookiecutter.engine_name}}" / "samples"
    baked_samples = Path(baked(task)) / "samples"
    assert sorted(p.name for p in baked_samples.iterdir()) == sorted(p.name for p in shipped.iterdir()) != []
    for path in shipped.iterdir():
        assert (baked_samples / path.name).read_bytes() == path.read_bytes(), path.name


# Object Detection's engine, the default bake, runs its own suite in test_tooling.py's CI steps, as its CI runs it.
@pytest.mark.parametrize("task", [task for task in TASKS if task != "Object Detection"])
def test_baked_engine_passes_its_own_tests(baked, task):
    root = baked(task)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert re.search(r"\d+ passed", summary) and "failed" not in summary and "skipped" not in summary, summary


@pytest.mark.parametrize("task", TASKS)
def test_the_lock_holds_right_after_baking_with_no_index_in_reach(baked, task, tmp_path):
    """uv.lock is rendered with the engine's name, and `uv lock --check` accepts it as baked, offline and with an
    empty cache: an air-gapped author bakes an engine whose lock is current. (One task bakes for Python 3.12.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env.update(UV_CACHE_DIR=str(tmp_path / "cache"), UV_OFFLINE="1", UV_NO_CONFIG="1")
    check = subprocess.run(
        [uv(), "lock", "--check"], cwd=baked(task), env=env, capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, (
        f"{check.stderr}\nAfter a change to the engine's pyproject.toml, ./scripts/lock-engine"
    )


def test_model_files_come_from_model_dir(baked, baked_engine, tmp_path):
    """load() reads MODEL_DIR: here the demo's colours.json raises the minimum area so the square is ignored (the
    shared baked engine, started without MODEL_DIR, finds it)."""
    from pathlib import Path

    root = Path(baked("Object Detection"))
    (tmp_path / "colours.json").write_text(json.dumps({"min_area": 10_000}))
    pixels = np.zeros((100, 120, 3), np.uint8)
    pixels[10:40, 20:70] = (0, 255, 0)
    body = json.dumps(chariot_request(image_input("image-0", pixels))).encode()

    def found(engine) -> list[dict]:
        request = urllib.request.Request(f"{engine.url}/infer", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())["outputs"][0]["data"][0]

    assert [r["label"] for r in found(baked_engine("Object Detection"))] == ["green"]
    with run_engine("chariot_engine", src=root / "src", env={"MODEL_DIR": str(tmp_path)}) as engine:
        assert found(engine) == []


def test_dev_requirements_pin_what_the_engine_depends_on(baked):
    from pathlib import Path

    import tomllib

    engine = tomllib.loads((Path(baked("Object Detection")) / "pyproject.toml").read_text())
    groups = engine["dependency-groups"]
    wanted = set(engine["project"]["dependencies"]) | set(groups["dev"]) | set(groups["eval"])
    lines = (TEMPLATE_ROOT / "requirements-dev.txt").read_text().splitlines()
    pinned = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    assert wanted <= pinned, f"requirements-dev.txt lacks {sorted(wanted - pinned)}"
