"""The dependency command of engines baked before they were uv projects, `python -m chariot_support.dev.deps` (and
its older name, `python -m chariot_support.deps`), says which uv command replaces what it was asked and exits 1,
never with a traceback."""

import os
import subprocess
import sys

import pytest

from template_paths import SUPPORT_SRC


def deps(*args: str, module: str = "chariot_support.dev.deps") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SUPPORT_SRC)}
    return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, text=True, timeout=60)


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
def test_the_old_command_names_the_uv_command_and_exits_1(args, says):
    said = deps(*args)
    assert said.returncode == 1 and "Traceback" not in said.stderr, said.stderr
    assert said.stderr.startswith("python -m chariot_support.dev.deps is gone: the engine is a uv project"), said.stderr
    assert says in said.stderr, said.stderr


def test_the_older_module_name_says_where_it_went_and_the_same():
    said = deps("add", "six==1.17.0", module="chariot_support.deps")
    assert said.returncode == 1 and "Traceback" not in said.stderr, said.stderr
    assert said.stderr.startswith("chariot_support.deps is now chariot_support.dev.deps\n")
    assert "`uv add six==1.17.0`" in said.stderr
