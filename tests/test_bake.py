"""Bake every task type as a user would, and hold each baked engine to its own tests."""

import json
import os
import re
import subprocess
import sys
import urllib.request
import venv

import numpy as np
import pytest

from baking import ANSWERS, TASKS
from chariot_support.dev.deps import find_uv
from chariot_support.dev.testing import chariot_request, image_input, run_engine
from template_paths import TEMPLATE_ROOT

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


def test_uv_install_then_python_m_package_serves_the_demo(baked, tmp_path):
    """The README's path: `uv pip install -c constraints.txt .` in a fresh environment, then `python -m <package>`,
    which answers inference and serves its page."""
    root = baked("Object Detection")
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(environment)
    python = str(environment / "bin" / "python")
    install = subprocess.run(
        [find_uv(), "pip", "install", "--quiet", "-c", "constraints.txt", "."],
        cwd=root,
        env={**os.environ, "VIRTUAL_ENV": str(environment)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    pixels = np.zeros((100, 120, 3), np.uint8)
    pixels[10:40, 20:70] = (0, 255, 0)
    with run_engine("chariot_engine", python=python, env={"PYTHONPATH": ""}) as engine:
        body = json.dumps(chariot_request(image_input("image-0", pixels))).encode()
        request = urllib.request.Request(f"{engine.url}/v2/models/m-demo/infer/", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        # The page at GET / is read from the installed package: its files went into the wheel.
        with urllib.request.urlopen(f"{engine.url}/", timeout=30) as response:
            page = response.read().decode()
    assert "<script>'use strict';" in page and "grid-template-columns" in page
    (results,) = answer["outputs"][0]["data"]
    assert [(r["label"], r["xmin"], r["ymin"], r["xmax"], r["ymax"]) for r in results] == [("green", 20, 10, 70, 40)]


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

    engine = tomllib.loads((Path(baked("Object Detection")) / "pyproject.toml").read_text())["project"]
    extras = engine["optional-dependencies"]
    wanted = set(engine["dependencies"]) | set(extras["test"]) | set(extras["eval"])
    lines = (TEMPLATE_ROOT / "requirements-dev.txt").read_text().splitlines()
    pinned = {line.strip() for line in lines if line.strip() and not line.startswith(("#", "-c"))}
    assert wanted <= pinned, f"requirements-dev.txt lacks {sorted(wanted - pinned)}"
