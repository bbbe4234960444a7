"""The dependency command of engines baked before they were uv projects, `python -m chariot_support.dev.deps` (and
its older name, `python -m chariot_support.deps`), says which uv command replaces what it was asked, true to what
the engine's folder holds, and exits 1, never with a traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from template_paths import SUPPORT_SRC


def deps(*args: str, cwd: Path, module: str = "chariot_support.dev.deps") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SUPPORT_SRC)}
    command = [sys.executable, "-m", module, *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def engine(tmp_path) -> Path:
    """An engine's folder as the template bakes it, as far as the command reads it."""
    (tmp_path / "uv.lock").write_text("version = 1\n")
    (tmp_path / "pyproject.toml").write_text('[tool.uv]\nexclude-dependencies = ["opencv-python"]\n')
    return tmp_path


@pytest.mark.parametrize(
    "args, says",
    [
        (["add", "rapidocr-onnxruntime==1.4.4", "--without", "opencv-python"], "`uv add rapidocr-onnxruntime==1.4.4`"),
        (["add", "facenet-pytorch==2.6.0", "--override", "numpy"], "under [tool.uv] override-dependencies"),
        (
            ["lock", "--release", "protobuf", "--release=torch"],
            "`uv lock --upgrade-package protobuf --upgrade-package torch`",
        ),
        (["lock", "--torch", "cpu"], "PyTorch's CPU or CUDA build is chosen in pyproject.toml"),
        (["check"], "`pytest tests/test_environment.py`"),
        (["--help"], "`uv add PKG==VERSION`"),
        ([], "`uv add PKG==VERSION`"),
        (["add", "--release"], "`uv add PKG==VERSION`"),
    ],
)
def test_the_old_command_names_the_uv_command_and_exits_1(args, says, engine):
    said = deps(*args, cwd=engine)
    assert said.returncode == 1 and "Traceback" not in said.stderr, said.stderr
    assert said.stderr.startswith("python -m chariot_support.dev.deps is gone: engines are uv projects"), said.stderr
    assert says in said.stderr and "no uv.lock" not in said.stderr, said.stderr


def test_what_it_says_of_the_engine_is_what_its_folder_holds(engine, tmp_path):
    said = deps("add", "rapidocr-onnxruntime==1.4.4", "--without", "opencv-python", cwd=engine).stderr
    assert "pyproject.toml's [tool.uv] exclude-dependencies already leaves out opencv-python." in said
    old = tmp_path / "old"  # an engine from before uv.lock: constraints.txt, nothing excluded
    old.mkdir()
    (old / "pyproject.toml").write_text("[tool.uv]\nexclude-dependencies = []\n")
    said = deps("add", "rapidocr-onnxruntime==1.4.4", "--without", "opencv-python", cwd=old).stderr
    assert "This folder has no uv.lock yet" in said and "`git rm constraints.txt && uv lock`" in said, said
    assert "listing it under [tool.uv] exclude-dependencies in pyproject.toml: opencv-python." in said, said


def test_the_older_module_name_says_where_it_went_and_the_same(engine):
    said = deps("add", "six==1.17.0", cwd=engine, module="chariot_support.deps")
    assert said.returncode == 1 and "Traceback" not in said.stderr, said.stderr
    assert said.stderr.startswith("chariot_support.deps is now chariot_support.dev.deps\n")
    assert "`uv add six==1.17.0`" in said.stderr
