"""`python -m chariot_support.dev.deps`, run in a freshly baked engine as its author would: locking changes nothing the
template shipped, an added dependency lands in pyproject.toml and constraints.txt with nothing else moving, and a
dependency pip cannot fit in is refused with pip's reasons, leaving both files as they were."""

import base64
import difflib
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import tomllib

from baking import bake
from chariot_support.dev.deps import read_pins


def deps(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(root / "src"), **(env or {})}
    command = [sys.executable, "-m", "chariot_support.dev.deps", *args]
    return subprocess.run(command, cwd=root, env=environment, capture_output=True, text=True, timeout=600)


def changed_lines(before: str, after: str) -> list[str]:
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def test_lock_changes_nothing_on_a_fresh_engine_and_add_changes_only_its_own_lines(tmp_path):
    root = bake("Object Detection", tmp_path)
    shipped_pyproject, shipped_constraints = (
        (root / "pyproject.toml").read_text(),
        (root / "constraints.txt").read_text(),
    )

    locked = deps(root, "lock")
    assert locked.returncode == 0, locked.stdout + locked.stderr
    assert "constraints.txt:\n  no changes" in locked.stdout
    assert (root / "constraints.txt").read_text() == shipped_constraints, (
        "the shipped constraints.txt is not what lock writes"
    )

    added = deps(root, "add", "six==1.17.0")
    assert added.returncode == 0, added.stdout + added.stderr
    assert (
        "  + six==1.17.0" in added.stdout and "reinstall: pip install -c constraints.txt -e '.[test]'" in added.stdout
    )
    assert changed_lines(shipped_constraints, (root / "constraints.txt").read_text()) == ["+six==1.17.0"]
    assert changed_lines(shipped_pyproject, (root / "pyproject.toml").read_text()) == ['+    "six==1.17.0",']
    dependencies = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    assert dependencies[-1] == "six==1.17.0"
    pins = read_pins(root / "constraints.txt")
    assert {"pytest", "hypothesis", "ruff", "mlserver"} <= pins.keys(), "the test extra's pins are part of the lock"
    assert "chariot-engine" not in pins and "pip" not in pins

    again = deps(root, "add", "Six>=1")
    assert again.returncode == 2 and "six is already a dependency in pyproject.toml" in again.stderr


def wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    """A pure-Python wheel that declares `requires`, for pip to resolve from a local folder."""
    stem = f"{name.replace('-', '_')}-{version}"
    metadata = "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name.replace('-', '_')}/__init__.py": b"",
        f"{stem}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{metadata}".encode(),
        f"{stem}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ]
    files[f"{stem}.dist-info/RECORD"] = "\n".join([*record, f"{stem}.dist-info/RECORD,,", ""]).encode()
    path = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
    return path


def test_a_dependency_pip_cannot_fit_in_is_refused_with_the_conflict_and_changes_nothing(tmp_path):
    # As mediapipe 0.10.14 does: it needs protobuf<5, where MLServer needs protobuf 5 or later and constraints.txt
    # pins protobuf 6.
    root = bake("Object Detection", tmp_path / "engine")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel(wheels, "old-protobuf-user", "1.0", ["protobuf<5"])
    before = {name: (root / name).read_bytes() for name in ("pyproject.toml", "constraints.txt")}
    protobuf = read_pins(root / "constraints.txt")["protobuf"]

    links = " ".join(filter(None, [os.environ.get("PIP_FIND_LINKS"), str(wheels)]))
    failed = deps(root, "add", "old-protobuf-user==1.0", env={"PIP_FIND_LINKS": links})
    assert failed.returncode == 1, failed.stdout + failed.stderr
    message = failed.stderr
    assert "The conflict is caused by:" in message, message
    assert "old-protobuf-user 1.0 depends on protobuf<5" in message
    assert f"The user requested (constraint) {protobuf}" in message
    assert "mlserver 1.7.1 depends on protobuf" in message
    assert f"constraints.txt pins {protobuf}" in message and "--release protobuf" in message
    assert message.rstrip().endswith("pyproject.toml and constraints.txt are as they were.")
    assert "is ignored" not in message, "pip's warnings about index locations drown the reason"
    assert {name: (root / name).read_bytes() for name in before} == before
