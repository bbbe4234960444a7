"""The model folder the README and docs/ run and test with (`MODEL_DIR=./my-model`) stays out of git and out of the image's
build context: weights reach the engine through Chariot's model upload, not its repository or its image."""

import re
import shutil
import subprocess

import pytest

from baking import default_engine

ROOT = default_engine()


def model_folders() -> set[str]:
    """The folders the README and docs/ point MODEL_DIR (or the image's /mnt/models) at."""
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    return set(
        re.findall(r"MODEL_DIR=(?:\$PWD/|\./)([\w.-]+)", text) + re.findall(r"\$PWD/([\w.-]+):/mnt/models", text)
    )


def test_the_readme_names_a_model_folder():
    assert model_folders() == {"my-model"}


@pytest.mark.parametrize("folder", sorted(model_folders()))
def test_git_ignores_the_model_folder(tmp_path, folder):
    engine = tmp_path / "engine"
    shutil.copytree(ROOT, engine)
    subprocess.run(["git", "init", "-q"], cwd=engine, check=True)
    (engine / folder).mkdir()
    (engine / folder / "model.onnx").write_bytes(b"weights")
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=engine, capture_output=True, text=True
    )
    assert status.returncode == 0 and status.stdout
    assert f"{folder}/" not in status.stdout, f"`git add -A` would commit {folder}/: {status.stdout}"


@pytest.mark.parametrize("folder", sorted(model_folders()))
def test_the_build_context_leaves_the_model_folder_out(folder):
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    assert folder in {p.strip("/") for p in patterns}, f".dockerignore lets {folder}/ into the build context"
    assert not [p for p in patterns if p.startswith("!")]
