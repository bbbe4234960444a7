"""`python -m chariot_support.dev.deps`, run in a freshly baked engine as its author would in a fresh clone, before
the engine is installed (a bare Python with `PYTHONPATH=src`, and uv): locking changes nothing the template shipped,
an added dependency lands in pyproject.toml and constraints.txt with nothing else moving, and a dependency uv cannot
fit in is refused with uv's reasons and the pins to release, leaving both files as they were."""

import base64
import difflib
import hashlib
import os
import re
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest
import tomllib

from baking import bake
from chariot_support.dev.deps import REINSTALL, find_uv, read_pins


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A Python with nothing installed, as a fresh clone has before its first install."""
    folder = tmp_path_factory.mktemp("bare") / "venv"
    venv.EnvBuilder(with_pip=False).create(folder)
    return str(folder / "bin" / "python")


def uv_on_path(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment with the uv the tests have on PATH (the engine's test extra installs it beside Python)."""
    env = {**os.environ, **(env or {})}
    env["PATH"] = os.pathsep.join([str(Path(find_uv()).parent), env.get("PATH", "")])
    return env


def deps(python: str, root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = uv_on_path({"PYTHONPATH": str(root / "src"), **(env or {})})
    command = [python, "-m", "chariot_support.dev.deps", *args]
    return subprocess.run(command, cwd=root, env=environment, capture_output=True, text=True, timeout=300)


def changed_lines(before: str, after: str) -> list[str]:
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def test_lock_changes_nothing_on_a_fresh_engine_and_add_changes_only_its_own_lines(tmp_path, bare_python):
    root = bake("Object Detection", tmp_path)
    shipped_pyproject, shipped_constraints = (
        (root / "pyproject.toml").read_text(),
        (root / "constraints.txt").read_text(),
    )

    locked = deps(bare_python, root, "lock")
    assert locked.returncode == 0, locked.stdout + locked.stderr
    assert "constraints.txt:\n  no changes" in locked.stdout
    assert (root / "constraints.txt").read_text() == shipped_constraints, (
        "the shipped constraints.txt is not what lock writes"
    )

    added = deps(bare_python, root, "add", "six==1.17.0")
    assert added.returncode == 0, added.stdout + added.stderr
    assert "  + six==1.17.0" in added.stdout and f"reinstall: {REINSTALL}" in added.stdout
    assert changed_lines(shipped_constraints, (root / "constraints.txt").read_text()) == ["+six==1.17.0"]
    assert changed_lines(shipped_pyproject, (root / "pyproject.toml").read_text()) == ['+    "six==1.17.0",']
    dependencies = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    assert dependencies[-1] == "six==1.17.0"
    pins = read_pins(root / "constraints.txt")
    assert {"pytest", "hypothesis", "ruff", "uv", "mlserver"} <= pins.keys(), "the test extra's pins are in the lock"
    assert "chariot-engine" not in pins and "pip" not in pins

    again = deps(bare_python, root, "add", "Six>=1")
    assert again.returncode == 2 and "six is already a dependency in pyproject.toml" in again.stderr


def test_without_uv_the_command_says_how_to_get_it(tmp_path, bare_python):
    root = bake("Object Detection", tmp_path)
    before = (root / "constraints.txt").read_bytes()
    env = {"PATH": os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "uv").exists())}
    result = subprocess.run(
        [bare_python, "-m", "chariot_support.dev.deps", "lock"],
        cwd=root,
        env={**os.environ, **env, "PYTHONPATH": str(root / "src")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "uv, which resolves the engine's dependencies, is not installed" in result.stderr
    assert "`pip install -c constraints.txt uv`" in result.stderr
    assert (root / "constraints.txt").read_bytes() == before


def wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    """A pure-Python wheel that declares `requires`, for uv to resolve from a local folder."""
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


def test_a_dependency_uv_cannot_fit_in_is_refused_with_the_reason_and_changes_nothing(tmp_path, bare_python):
    root = bake("Object Detection", tmp_path / "engine")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    # As mediapipe 0.10.14 does: it needs protobuf<5, where MLServer needs protobuf 5.27.2 or later.
    wheel(wheels, "old-protobuf-user", "1.0", ["protobuf<5"])
    # This one fits MLServer but not constraints.txt's protobuf pin (6.33.6), which --release lets move.
    wheel(wheels, "older-protobuf-user", "1.0", ["protobuf<6.33"])
    links = {"UV_FIND_LINKS": str(wheels)}
    before = {name: (root / name).read_bytes() for name in ("pyproject.toml", "constraints.txt")}
    protobuf = read_pins(root / "constraints.txt")["protobuf"]

    failed = deps(bare_python, root, "add", "old-protobuf-user==1.0", env=links)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    message = failed.stderr
    assert message.startswith("uv cannot resolve pyproject.toml's requirements together, whatever constraints.txt pins")
    assert (
        "old-protobuf-user depend on protobuf<5" in message and "mlserver==1.7.1 depends on protobuf>=5.27.2" in message
    )
    assert "--release" not in message, "releasing a pin cannot help here"
    assert message.rstrip().endswith("pyproject.toml and constraints.txt are as they were.")
    assert {name: (root / name).read_bytes() for name in before} == before

    held = deps(bare_python, root, "add", "older-protobuf-user==1.0", env=links)
    assert held.returncode == 1, held.stdout + held.stderr
    message = held.stderr
    assert message.startswith("uv cannot resolve pyproject.toml's requirements with the versions constraints.txt pins")
    assert "older-protobuf-user depend on protobuf<6.33" in message
    assert (
        f"constraints.txt pins {protobuf} and googleapis-common-protos==" in message
        and "`--release protobuf --release googleapis-common-protos`" in message
    )
    assert {name: (root / name).read_bytes() for name in before} == before

    # The pins it names are the ones to release: run again with them, the command succeeds and moves just those.
    suggested = re.search(r"run the command again with `([^`]+)`", message)[1]
    released = deps(bare_python, root, "add", "older-protobuf-user==1.0", *suggested.split(), env=links)
    assert released.returncode == 0, released.stdout + released.stderr
    moved = sorted(line.split()[1].split("==")[0] for line in released.stdout.splitlines() if line.startswith("  ~ "))
    assert moved == ["googleapis-common-protos", "protobuf"], released.stdout
    assert "+ older-protobuf-user==1.0" in released.stdout
