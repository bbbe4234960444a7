"""`python -m chariot_support.dev.deps`, run in a freshly baked engine as its author would in a fresh clone, before
the engine is installed (a bare Python with `PYTHONPATH=src`, and uv): locking changes nothing the template shipped,
an added dependency lands in pyproject.toml and constraints.txt with nothing else moving, a dependency uv cannot fit
in is refused with uv's reasons and the pin to release, leaving both files as they were, and a package that wants
opencv-python goes into the engine without it, installed by the Dockerfile's own commands."""

import base64
import difflib
import hashlib
import os
import re
import shlex
import subprocess
import venv
import zipfile
from pathlib import Path

import pytest
import tomllib

from baking import bake
from chariot_support.dev.deps import REINSTALL, find_uv, read_pins
from dockerfile import parse_dockerfile, uv_installs


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


def test_a_package_that_wants_opencv_python_goes_into_the_image_without_it(tmp_path, bare_python):
    """rapidocr-onnxruntime requires opencv-python; the headless OpenCV provides the same cv2. Added with
    `--without opencv-python`, it is locked without it, and the Dockerfile's install commands, then the README's,
    give an environment that passes the image's OpenCV check and imports it."""
    root = bake("Object Detection", tmp_path / "engine")
    before = {name: (root / name).read_bytes() for name in ("pyproject.toml", "constraints.txt")}

    refused = deps(bare_python, root, "add", "rapidocr-onnxruntime==1.4.4")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr.startswith(
        "rapidocr-onnxruntime requires opencv-python, which would be installed beside opencv-python-headless"
    )
    assert "Run the command again with `--without opencv-python`" in refused.stderr
    assert {name: (root / name).read_bytes() for name in before} == before

    added = deps(bare_python, root, "add", "rapidocr-onnxruntime==1.4.4", "--without", "opencv-python")
    assert added.returncode == 0, added.stdout + added.stderr
    assert (
        "pyproject.toml leaves out opencv-python" in added.stdout and "  + rapidocr-onnxruntime==1.4.4" in added.stdout
    )
    pins = read_pins(root / "constraints.txt")
    assert pins["rapidocr-onnxruntime"] == "rapidocr-onnxruntime==1.4.4" and "opencv-python" not in pins
    assert tomllib.loads((root / "pyproject.toml").read_text())["tool"]["uv"]["exclude-dependencies"] == [
        "opencv-python"
    ]

    # The image's install, command for command (test_container.py holds the Dockerfile to these), then the README's.
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(environment)
    python = str(environment / "bin" / "python")
    env = uv_on_path({"VIRTUAL_ENV": str(environment)})
    env["PATH"] = os.pathsep.join([str(environment / "bin"), env["PATH"]])
    env.pop("PYTHONPATH", None)

    def run(command: list[str], cwd: Path = root) -> subprocess.CompletedProcess:
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)

    def installed() -> set[str]:
        names = run([python, "-c", "import importlib.metadata as m; print(*(d.name for d in m.distributions()))"])
        return {name.lower() for name in names.stdout.split()}

    image_installs = uv_installs(parse_dockerfile((root / "Dockerfile").read_text()))
    assert image_installs, "the Dockerfile installs nothing with uv"
    readme = (root / "README.md").read_text()
    assert f"{REINSTALL}\n" in readme or f"`{REINSTALL}`" in readme, "the README does not give the install deps prints"
    for step, commands in (("the image's", image_installs), ("the README's", [shlex.split(REINSTALL)])):
        for command in commands:
            install = run(command)
            assert install.returncode == 0, f"{shlex.join(command)}:\n{install.stderr[-3000:]}"
        check = run([python, "-m", "chariot_support.dev.deps", "check"], cwd=tmp_path)
        assert check.returncode == 0, f"after {step} install: {check.stderr}"
        names = installed()
        assert {"rapidocr-onnxruntime", "opencv-python-headless"} <= names and "opencv-python" not in names, names
        assert ("pytest" in names) == (step == "the README's"), f"{step} install and the test extra: {names}"
        imported = run([python, "-c", "import cv2, rapidocr_onnxruntime"], cwd=tmp_path)
        assert imported.returncode == 0, f"after {step} install: {imported.stderr[-3000:]}"
