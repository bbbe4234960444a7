"""`python -m chariot_support.dev.deps`, run in a freshly baked engine as its author would in a fresh clone, before
the engine is installed (a bare Python with `PYTHONPATH=src`, and uv): locking changes nothing the template shipped,
an added dependency lands in pyproject.toml and constraints.txt with nothing else moving, a dependency uv cannot fit
in is refused with uv's reasons, every requirement of it the engine refuses, the pin to release and the newest
version that fits, leaving both files as they were; a package that wants opencv-python goes into the engine without
it, installed by the Dockerfile's own commands; the lock is for the image's Python; and torch's CPU-only build comes
from its own index (a stand-in served on loopback) in the lock, the image's install and the README's."""

import base64
import difflib
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
import venv
import zipfile
from pathlib import Path

import pytest
import tomllib
from cookiecutter.main import cookiecutter

from baking import bake
from chariot_support.dev.deps import REINSTALL, find_uv, read_pins
from chariot_support.dev.testing import free_port
from dockerfile import parse_dockerfile, uv_installs
from template_paths import TEMPLATE_ROOT


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
    """A pure-Python wheel that declares `requires`, for uv to resolve from a local folder or index."""
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
    # Every requirement of the package that the engine refuses, by whom, and whether it can move.
    assert (
        "Each requirement of old-protobuf-user==1.0 that the engine refuses:\n  protobuf<5: mlserver==1.7.1 requires"
        " protobuf>=5.27.2,<7.0.0 (MLServer's: it cannot move)" in message
    )
    assert "No version of old-protobuf-user other than 1.0 fits the engine" in message
    assert "--override protobuf" in message, "how to override the package's over-tight pin"
    assert message.rstrip().endswith("pyproject.toml and constraints.txt are as they were.")
    assert {name: (root / name).read_bytes() for name in before} == before

    # Overridden, the package's protobuf<5 gives way; MLServer's range stays.
    overridden = deps(bare_python, root, "add", "old-protobuf-user==1.0", "--override", "protobuf", env=links)
    assert overridden.returncode == 0, overridden.stdout + overridden.stderr
    assert "pyproject.toml overrides protobuf>=5.27.2,<7.0.0" in overridden.stdout, "MLServer's range is kept"
    assert (
        "  + old-protobuf-user==1.0" in overridden.stdout
        and read_pins(root / "constraints.txt")["protobuf"] == protobuf
    )
    for name, content in before.items():  # as before, for the next case
        (root / name).write_bytes(content)

    held = deps(bare_python, root, "add", "older-protobuf-user==1.0", env=links)
    assert held.returncode == 1, held.stdout + held.stderr
    message = held.stderr
    assert message.startswith("uv cannot resolve pyproject.toml's requirements with the versions constraints.txt pins")
    assert "older-protobuf-user depend on protobuf<6.33" in message
    assert (
        f"constraints.txt pins {protobuf} and googleapis-common-protos==" in message
        and "`--release protobuf --release googleapis-common-protos`" in message
    )
    assert "  protobuf<6.33: constraints.txt pins protobuf==6.33.6 (it can move: --release protobuf)" in message
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
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # uv installs no bytecode: compiled on the first import, not each

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


@pytest.fixture(scope="module")
def torchvision_added(tmp_path_factory, bare_python) -> tuple[Path, subprocess.CompletedProcess]:
    """An engine with `deps add torchvision==0.24.1` done (one resolution for the tests that start there), and what
    the command said; each test works on a copy."""
    root = bake("Object Detection", tmp_path_factory.mktemp("torchvision"))
    added = deps(bare_python, root, "add", "torchvision==0.24.1")
    assert added.returncode == 0, added.stdout + added.stderr
    return root, added


def engine_copy(root: Path, folder: Path) -> Path:
    return Path(shutil.copytree(root, folder / root.name))


def test_a_package_with_over_tight_pins_is_explained_in_full_with_the_newest_version_that_fits(
    tmp_path, bare_python, torchvision_added
):
    """facenet-pytorch 2.6.0 (from PyPI) pins numpy<2, Pillow<10.3, torch<2.3 and torchvision<0.18: each is named
    with what refuses it (the template's own pins cannot move; a pin of constraints.txt can; a dependency of the
    user's own can be changed), and 2.5.3, which fits, is offered; added, it is locked, with a word on its torch."""
    root = engine_copy(torchvision_added[0], tmp_path)
    before = {name: (root / name).read_bytes() for name in ("pyproject.toml", "constraints.txt")}
    torch = read_pins(root / "constraints.txt")["torch"]

    failed = deps(bare_python, root, "add", "facenet-pytorch==2.6.0")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    refused = failed.stderr.split("Each requirement of facenet-pytorch==2.6.0 that the engine refuses:\n", 1)[1]
    assert refused.splitlines()[:4] == [
        "  numpy<2.0.0,>=1.24.0: the template requires numpy>=2.4,<2.5 (the engine's own: it cannot move)",
        "  Pillow<10.3.0,>=10.2.0: the template requires pillow>=13.0,<13.1 (the engine's own: it cannot move)",
        f"  torch<2.3.0,>=2.2.0: constraints.txt pins {torch} (it can move: --release torch)",
        "  torchvision<0.18.0,>=0.17.0: pyproject.toml requires torchvision==0.24.1 (yours: change it there)",
    ], failed.stderr
    page = (root / "docs" / "dependencies.md").read_text()
    shown = [line for line in failed.stderr.splitlines() if line.startswith(("  numpy", "  Pillow", "The newest"))]
    assert len(shown) == 3 and all(line in page for line in shown), (
        "docs/dependencies.md's example is not what deps prints"
    )
    suggested = re.search(r"The newest facenet-pytorch that fits, with every pin as it is: (\S+)\. `([^`]+)`", refused)
    assert suggested and suggested[1] == "2.5.3", refused
    assert "--override numpy --override pillow" in refused and "test your model" in refused
    assert failed.stderr.rstrip().endswith("pyproject.toml and constraints.txt are as they were.")
    assert {name: (root / name).read_bytes() for name in before} == before

    added = deps(bare_python, root, *shlex.split(suggested[2])[4:])
    assert added.returncode == 0, added.stdout + added.stderr
    assert "  + facenet-pytorch==2.5.3" in added.stdout


def test_the_lock_is_for_the_images_python_not_the_one_that_runs_it(tmp_path, bare_python):
    """An engine whose image runs Python 3.12, locked from this Python (not 3.12): the resolution follows the image,
    markers and all."""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    image = "3.12" if running != "3.12" else "3.11"
    answers = {"task_type": "Object Detection", "python_version": image}
    root = Path(cookiecutter(str(TEMPLATE_ROOT), no_input=True, extra_context=answers, output_dir=str(tmp_path)))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel(
        wheels,
        "marker-probe",
        "1.0",
        [
            f'on-image-python; python_version == "{image}"',
            f'on-this-python; python_version == "{running}"',
            'on-linux; sys_platform == "linux" and platform_machine == "x86_64"',
            'on-mac; sys_platform == "darwin"',
        ],
    )
    for name in ("on-image-python", "on-this-python", "on-linux", "on-mac"):
        wheel(wheels, name, "1.0", [])

    added = deps(bare_python, root, "add", "marker-probe==1.0", env={"UV_FIND_LINKS": str(wheels)})
    assert added.returncode == 0, added.stdout + added.stderr
    assert f"resolving for linux x86_64 (manylinux_2_36), Python {image}: the image's" in added.stdout
    pins = read_pins(root / "constraints.txt")
    assert {"marker-probe", "on-image-python", "on-linux"} <= pins.keys(), pins.keys()
    assert not {"on-this-python", "on-mac"} & pins.keys()


@pytest.fixture
def torch_cpu_index(tmp_path):
    """A stand-in for PyTorch's CPU wheel index, served on loopback by `python -m http.server` in PEP 503's simple
    layout: torch 2.9.1+cpu and torchvision 0.24.1+cpu, versions PyPI does not have. Yields its URL."""
    root = tmp_path / "index"
    for name, version, requires in (
        ("torch", "2.9.1+cpu", ["filelock"]),
        ("torchvision", "0.24.1+cpu", ["torch==2.9.1"]),
    ):
        (root / "simple" / name).mkdir(parents=True)
        built = wheel(root / "simple" / name, name, version, requires)
        (root / "simple" / name / "index.html").write_text(f'<a href="{built.name}">{built.name}</a>\n')
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/simple"
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"{url}/torch/", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the local index did not start"
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_torch_says_it_is_the_cuda_build_and_the_cpu_build_comes_from_its_own_index_everywhere(
    tmp_path, bare_python, torch_cpu_index, torchvision_added
):
    url = torch_cpu_index
    root, added = engine_copy(torchvision_added[0], tmp_path), torchvision_added[1]
    cuda = [n for n in read_pins(root / "constraints.txt") if n.startswith(("nvidia-", "cuda-")) or n == "triton"]
    assert "triton" in cuda and len(cuda) > 10, "PyPI's Linux torch is the CUDA build"
    assert (
        f"torch: {read_pins(root / 'constraints.txt')['torch']} is PyPI's Linux build, the CUDA one: it brings"
        f" {len(cuda) - 1} CUDA packages (nvidia-*, cuda-*) and triton, several GB in the image" in added.stdout
    )
    assert "`PYTHONPATH=src python -m chariot_support.dev.deps lock --torch cpu`" in added.stdout

    cpu = deps(bare_python, root, "lock", "--torch", "cpu", env={"CHARIOT_TORCH_INDEX": url})
    assert cpu.returncode == 0, cpu.stdout + cpu.stderr
    pins = read_pins(root / "constraints.txt")
    assert pins["torch"] == "torch==2.9.1+cpu" and pins["torchvision"] == "torchvision==0.24.1+cpu"
    assert not [n for n in pins if n.startswith(("nvidia-", "cuda-")) or n == "triton"], "CUDA packages stayed"
    assert f"torch: torch==2.9.1+cpu, PyTorch's CPU-only build from {url}" in cpu.stdout
    assert "added torch==2.9.1 to pyproject.toml" in cpu.stdout, "uv routes only what pyproject.toml lists itself"
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert project["tool"]["uv"]["index"] == [{"name": "pytorch-cpu", "url": url, "explicit": True}]
    assert project["tool"]["uv"]["sources"]["torch"] == {"index": "pytorch-cpu"}

    # The image's installs and the README's take the CPU build from that index: 2.9.1+cpu is only there.
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(environment)
    env = uv_on_path({"VIRTUAL_ENV": str(environment)})
    env.pop("PYTHONPATH", None)
    installs = [*uv_installs(parse_dockerfile((root / "Dockerfile").read_text())), shlex.split(REINSTALL)]
    for command in installs:
        run = subprocess.run([*command, "--dry-run"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, f"{shlex.join(command)}:\n{run.stderr[-3000:]}"
        assert " + torch==2.9.1+cpu" in run.stderr and "nvidia" not in run.stderr, shlex.join(command)

    back = deps(bare_python, root, "lock", "--torch", "cuda")
    assert back.returncode == 0, back.stdout + back.stderr
    pins = read_pins(root / "constraints.txt")
    assert pins["torch"] == "torch==2.9.1" and "triton" in pins, "--torch cuda goes back to PyPI's build"
    assert "sources" not in tomllib.loads((root / "pyproject.toml").read_text())["tool"]["uv"]
    assert "torch: torch==2.9.1, PyPI's build: on Linux the CUDA one" in back.stdout
