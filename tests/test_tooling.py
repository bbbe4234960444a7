"""Baked engines are green on day one: ruff passes, and the CI workflow and pre-commit hooks run the commands the
README gives, with the versions the engine pins."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import tomllib
import yaml
from cookiecutter.main import cookiecutter

from template_paths import TEMPLATE_ROOT, uv

TASKS = [
    "Image Classification",
    "Object Detection",
    "Oriented Object Detection",
    "Image Segmentation",
    "Image Text to Text",
]
# A package name sorting before and one after chariot_support, so import order cannot depend on the name.
NAMES = {"Image Segmentation": "zebra-crossing", "Image Text to Text": "alpha-vqa"}


@pytest.fixture(scope="module")
def engines(tmp_path_factory) -> dict[str, Path]:
    baked = {}
    for task in TASKS:
        answers = {"task_type": task, **({"engine_name": NAMES[task]} if task in NAMES else {})}
        out = tmp_path_factory.mktemp("tooling")
        baked[task] = Path(cookiecutter(str(TEMPLATE_ROOT), no_input=True, extra_context=answers, output_dir=str(out)))
    return baked


def ruff(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=root, capture_output=True, text=True, timeout=120)


def pyproject(root: Path) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text())


def workflow_steps(root: Path) -> list[dict]:
    workflow = yaml.safe_load((root / ".github" / "workflows" / "ci.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` key as true
    assert {"push", "pull_request"} <= set(triggers), f"CI should run on pushes and pull requests, runs on {triggers}"
    (job,) = workflow["jobs"].values()
    return job["steps"]


def run_steps(root: Path) -> list[str]:
    return [step["run"] for step in workflow_steps(root) if "run" in step]


def job_env(root: Path) -> dict[str, str]:
    workflow = yaml.safe_load((root / ".github" / "workflows" / "ci.yml").read_text())
    (job,) = workflow["jobs"].values()
    return {k: str(v) for k, v in job.get("env", {}).items()}


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_the_template_repository_passes_ruff_as_it_is(command):
    """Tool configuration holds no Jinja, so ruff reads the whole repository in place, the engine folder (with the
    engine's own settings) included."""
    result = ruff(TEMPLATE_ROOT, *command, "--no-cache")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


@pytest.mark.bake
@pytest.mark.parametrize("task", TASKS)
def test_ruff_check_passes(engines, task):
    result = ruff(engines[task], "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.bake
@pytest.mark.parametrize("task", TASKS)
def test_ruff_format_check_passes(engines, task):
    result = ruff(engines[task], "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.bake
def test_ci_python_is_the_image_python(engines):
    for root in engines.values():
        (setup,) = [s for s in workflow_steps(root) if s.get("uses", "").startswith("actions/setup-python@")]
        image_python = re.search(r"^FROM python:(\d+\.\d+)-", (root / "Dockerfile").read_text(), re.M)[1]
        assert str(setup["with"]["python-version"]) == image_python


@pytest.mark.bake
def test_ci_runs_the_readme_commands(engines):
    root = engines["Object Detection"]
    readme = (root / "README.md").read_text()
    testing = (root / "docs" / "testing.md").read_text()  # "Lint and CI" and "Weights in CI"
    steps = {step["name"]: step["run"] for step in workflow_steps(root) if "run" in step}
    fetch = steps.pop("Fetch the model's files")  # test_the_weights_step_... runs it
    assert "gh release download" in fetch and "\ngh variable set MODEL_RELEASE " in testing
    steps = list(steps.values())
    kinds = [shlex.split(step)[0] for step in steps]
    assert kinds == ["pip", "uv", "uv", "uv", "docker"], steps
    assert job_env(root) == {"UV_LOCKED": "1"}, "CI's uv commands fail, rather than lock again, on a stale uv.lock"
    for step in steps[:-1]:
        assert f"`{step}`" in testing or f"\n{step}\n" in testing, (
            f"CI runs `{step}`, which docs/testing.md does not give"
        )
    build = shlex.split(steps[-1])
    assert build[:3] == ["docker", "build", "-t"] and build[-1] == "."
    assert build[3].split(":")[0].rsplit("/", 1)[-1] == root.name
    assert re.search(r"^docker build -t \S+ \.$", readme, re.M), "the README does not say how to build the image"


@pytest.mark.bake
def test_the_weights_step_fetches_the_release_into_model_dir_and_says_when_none_is_named(engines, tmp_path):
    """The CI step before pytest, run as GitHub runs it (bash, GITHUB_ENV), with GitHub's CLI standing in as a script
    that writes what `gh release download TAG --dir DIR` would: without MODEL_RELEASE it only says so; with it, the
    files land in my-model/ and MODEL_DIR names that folder for the steps after it."""
    root = Path(shutil.copytree(engines["Object Detection"], tmp_path / "engine"))
    (step,) = [s for s in workflow_steps(root) if s.get("name") == "Fetch the model's files"]
    assert set(step["env"]) == {"GH_TOKEN", "MODEL_RELEASE"} and "vars.MODEL_RELEASE" in step["env"]["MODEL_RELEASE"]
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "gh").write_text(
        '#!/bin/sh\n[ "$1 $2 $3 $4" = "release download model-v1 --dir" ] || exit 3\n'
        'mkdir -p "$5" && echo weights > "$5/model.onnx"\n'
    )
    (tools / "gh").chmod(0o755)
    github_env = tmp_path / "github_env"
    github_env.touch()
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}", "GITHUB_ENV": str(github_env)}
    env.pop("MODEL_RELEASE", None)

    def run(**extra: str) -> subprocess.CompletedProcess:
        command = ["bash", "-e", "-c", step["run"]]
        return subprocess.run(command, cwd=root, env={**env, **extra}, capture_output=True, text=True, timeout=60)

    unset = run()
    assert unset.returncode == 0, unset.stderr
    assert "::notice title=No model files::MODEL_RELEASE is not set" in unset.stdout
    assert github_env.read_text() == "" and not (root / "my-model").exists()
    fetched = run(MODEL_RELEASE="model-v1")
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    assert (root / "my-model" / "model.onnx").read_text() == "weights\n"
    assert github_env.read_text() == f"MODEL_DIR={root}/my-model\n"
    failing = run(MODEL_RELEASE="no-such-tag")
    assert failing.returncode != 0, "a release that cannot be fetched fails the step"


@pytest.mark.bake
def test_the_engine_installs_the_uv_the_template_tests_with(engines):
    """The README, the page on CI, the CI workflow and the Dockerfile install one uv, the version requirements-dev.txt
    pins."""
    pin = re.search(r"^uv==\S+$", (TEMPLATE_ROOT / "requirements-dev.txt").read_text(), re.M)[0]
    root = engines["Object Detection"]
    for name in ("README.md", "docs/testing.md", ".github/workflows/ci.yml", "Dockerfile"):
        named = set(re.findall(r"\buv==[0-9][^\s'\"`]*", (root / name).read_text()))
        assert named == {pin}, f"{name} installs {sorted(named)}, the template tests with {pin}"


@pytest.mark.bake
def test_dependabot_updates_the_lock_and_the_workflows_actions(engines):
    config = yaml.safe_load((engines["Object Detection"] / ".github" / "dependabot.yml").read_text())
    updates = {update["package-ecosystem"]: update for update in config["updates"]}
    assert config["version"] == 2 and set(updates) == {"uv", "github-actions"}
    assert updates["uv"]["directory"] == "/" and updates["uv"]["versioning-strategy"] == "lockfile-only"


@pytest.mark.bake
def test_pre_commit_runs_the_pinned_ruff(engines):
    root = engines["Object Detection"]
    config = yaml.safe_load((root / ".pre-commit-config.yaml").read_text())
    (repo,) = config["repos"]
    assert repo["repo"] == "https://github.com/astral-sh/ruff-pre-commit"
    pinned = [r for r in pyproject(root)["dependency-groups"]["dev"] if r.startswith("ruff==")]
    assert pinned == [f"ruff=={repo['rev'].removeprefix('v')}"], "pre-commit and pyproject.toml pin different ruffs"
    assert [hook["id"] for hook in repo["hooks"]] == ["ruff-check", "ruff-format"]


@pytest.fixture
def world_readable_dir():
    """A folder outside pytest's private temp folder: the engine's tests run it as another UID, which must read the
    packages installed there."""
    path = Path(tempfile.mkdtemp(prefix="ci-steps-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.bake
def test_ci_steps_pass_on_a_fresh_bake(engines, world_readable_dir):
    """Every step of the CI workflow but the image build (no Docker engine here), run as CI runs them, with the job's
    environment: uv installs the engine from its lock into .venv, and its lint and tests pass there."""
    root = Path(shutil.copytree(engines["Object Detection"], world_readable_dir / "engine"))
    environment = world_readable_dir / "python"
    # A Python with pip, as CI's setup-python step leaves it (uv seeds pip from its cache; ensurepip would compile it).
    seed = [uv(), "venv", "--quiet", "--seed", "--python", sys.executable, str(environment)]
    subprocess.run(seed, check=True, capture_output=True, timeout=300)
    # As on CI's runner: no PYTHONDONTWRITEBYTECODE either, so the test step's imports are compiled once, not again
    # in the engine it starts; and no setting of uv's but the job's.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV") and not k.startswith("UV_")
    }
    env.update(job_env(root), PATH=f"{environment / 'bin'}{os.pathsep}{env['PATH']}")
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    steps = run_steps(root)
    assert steps[-1].startswith("docker build")
    for step in steps[:-1]:
        result = subprocess.run(step, shell=True, cwd=root, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"`{step}` failed:\n{result.stdout[-4000:]}{result.stderr[-3000:]}"
    assert re.search(r"\d+ passed", result.stdout) and "skipped" not in result.stdout.splitlines()[-1]
    assert (root / ".venv").is_dir() and not list(environment.glob("lib/python*/site-packages/mlserver"))


def test_the_template_scripts_name_only_files_the_template_has():
    """Every file of the template's engine folder or of the template that a script in scripts/ or .ci/run reads by
    its path exists: a script that still reads a file the template has dropped fails only where it runs (CI's last
    steps), long after the change."""
    missing = []
    for script in [*(TEMPLATE_ROOT / "scripts").iterdir(), TEMPLATE_ROOT / ".ci" / "run"]:
        if not script.is_file() or script.suffix == ".pyc":
            continue
        text = script.read_text()
        for path in re.findall(r"\{\{cookiecutter\.engine_name\}\}/[\w./-]*\w", text):
            if not (TEMPLATE_ROOT / path).exists():
                missing.append(f"{script.name}: {path}")
        for path in re.findall(r"(?<![\w./-])((?:scripts|bench|requirements)[\w./-]*\.(?:txt|py))\b", text):
            if not (TEMPLATE_ROOT / path).exists():
                missing.append(f"{script.name}: {path}")
    assert not missing, missing
