"""`python -m chariot_support.deps add`, run in a freshly baked engine as its author would: the dependency lands in
pyproject.toml, constraints.txt pins it with everything else (the test extra's packages included), the pins it had
stay, and the engine still installs from them."""

import os
import subprocess
import sys
from pathlib import Path

import tomllib

from baking import bake
from chariot_support.deps import read_pins


def test_add_a_dependency_and_lock(tmp_path):
    root = bake("Object Detection", tmp_path)
    before = read_pins(root / "constraints.txt")
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    added = subprocess.run(
        [sys.executable, "-m", "chariot_support.deps", "add", "six==1.17.0"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert added.returncode == 0, added.stdout + added.stderr
    assert (
        "  + six==1.17.0" in added.stdout and "reinstall: pip install -c constraints.txt -e '.[test]'" in added.stdout
    )
    assert "six==1.17.0" in tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    after = read_pins(root / "constraints.txt")
    assert after["six"] == "six==1.17.0"
    for kept in ("mlserver", "numpy", "opencv-python-headless", "hypothesis", "sortedcontainers", "pytest"):
        assert kept in after, f"constraints.txt lost {kept}"
        assert kept not in before or after[kept] == before[kept], f"{kept} moved from {before[kept]} to {after[kept]}"
    assert "chariot-engine" not in after and "pip" not in after
    again = subprocess.run(
        [sys.executable, "-m", "chariot_support.deps", "add", "Six>=1"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 2 and "six is already a dependency in pyproject.toml" in again.stderr
    assert Path(root / "constraints.txt").read_text().startswith("# Every package the engine installs, pinned")
