"""The evaluation command in a baked engine: the CI workflow's commented step, once uncommented, evaluates the
engine's own package (found beside chariot_support) on a held-back set, and the evaluation page's picture is the
file committed in the template, copied unrendered."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from support.evaluation_scenes import coco, scenes
from template_paths import ENGINE_TEMPLATE


def evaluation_step(root: Path) -> dict:
    """The workflow's commented-out Evaluate step, uncommented as its comment says to."""
    text = (root / ".github" / "workflows" / "ci.yml").read_text()
    block = re.search(r"^(\s*)# - name: Evaluate\n(?:\1#.*\n)+", text, re.M)
    assert block, "ci.yml has no commented Evaluate step"
    indent = block[1]
    lines = [line.replace(f"{indent}# ", indent, 1) for line in block[0].splitlines()]
    (step,) = yaml.safe_load("\n".join(line.removeprefix(indent) for line in lines))
    return step


def evaluate(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root / "src")}  # what the editable install gives
    env.pop("MODEL_DIR", None)  # the demo reads no files
    env.pop("CHARIOT_MODEL_ID", None)
    command = [sys.executable, "-m", "chariot_support.evaluate", *args]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_ci_step_evaluates_the_baked_engine_on_a_held_back_set_asking_its_model_id(baked, tmp_path):
    """The engine baked under unusual names (package road_damage_2, model id 0a1b2c-seg): its own package is
    started, and the baked model id is the one asked."""
    root = Path(shutil.copytree(baked("Image Segmentation"), tmp_path / "engine"))
    step = evaluation_step(root)
    install, command = step["run"].strip().splitlines()
    assert install == "uv sync --group eval"
    assert command == "uv run python -m chariot_support.evaluate evaluation-data/instances.json --min mAP=0.5"
    coco(root / "evaluation-data", scenes(3, seed=2), masks="polygon")
    result = evaluate(root, *command.split()[5:])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "starting road_damage_2" in result.stderr  # the baked engine's own package, found beside chariot_support
    metrics = json.loads((root / "evaluation" / "metrics.json").read_text())
    assert metrics["model"] == "m-0a1b2c-seg"
    assert result.stdout.splitlines()[1].split() == ["mAP", "1.0000"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", "evaluation/report.md"], cwd=root)
    assert ignored.returncode == 0, "the evaluation's output would show as untracked files"


def test_a_broken_dataset_is_named_before_the_engine_starts(baked, tmp_path):
    root = Path(shutil.copytree(baked("Image Segmentation"), tmp_path / "engine"))
    broken = root / "broken.jsonl"
    broken.write_text("{}\n")
    refused = evaluate(root, str(broken))
    assert refused.returncode == 2, refused.stderr
    assert "Image Segmentation is evaluated on a COCO instances JSON file" in refused.stderr
    assert "starting" not in refused.stderr, "the engine was started for a dataset it could not be evaluated on"


def test_the_evaluation_page_shows_a_real_runs_picture_and_the_readme_the_command(baked):
    root = Path(baked("Image Segmentation"))
    page = (root / "docs" / "evaluation.md").read_text()
    assert "](evaluation-worst-image.png)" in page
    shipped = ENGINE_TEMPLATE / "docs" / "evaluation-worst-image.png"
    assert (root / "docs" / "evaluation-worst-image.png").read_bytes() == shipped.read_bytes()
    assert shipped.stat().st_size < 100_000
    command = "python -m chariot_support.evaluate evaluation-data/instances.json --min mAP=0.5"
    assert command in (root / "README.md").read_text() and command in page


def test_the_evaluation_group_is_pinned_and_only_installed_when_asked_for(baked):
    """The eval group's tools are pinned exactly, and neither `uv sync` (which installs the dev group) nor the image
    (test_container.py runs its install) takes them unless asked: eval is not a default group."""
    import tomllib

    project = tomllib.loads((Path(baked("Object Detection")) / "pyproject.toml").read_text())
    group = project["dependency-groups"]["eval"]
    assert any(r.startswith("valor-lite==") for r in group) and all("==" in r for r in group)
    assert "eval" not in project["tool"]["uv"].get("default-groups", ["dev"])
