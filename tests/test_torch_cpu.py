"""PyTorch's CPU-only build chosen as the engine's docs/dependencies.md says (its [tool.uv.sources] and
[[tool.uv.index]] tables, appended to pyproject.toml), against a stand-in for PyTorch's CPU index served on loopback:
the lock holds the CPU build and no CUDA package, and the engine, with a torch model, installs from it and passes its
own tests.

PyTorch's index cannot be reached here. The stand-in serves the one real CPU wheel on this disk (torch 2.13.0+cpu,
cp311, linux x86_64, from pip's find-links folder). uv.lock's required environments (linux x86_64 and aarch64 and
Apple silicon, Pythons 3.11 and 3.12) need a torch for each: with that wheel alone uv refuses to lock, naming one it
lacks. Beside it the stand-in then lists metadata-only wheels for the other five, named as PyTorch's index names its
own (+cpu builds for Linux, plain ones for macOS) and carrying the real wheel's metadata: uv locks each environment
from the index's metadata, and installs only the real wheel here. Run by scripts/test-torch (marked `torch`)."""

import base64
import hashlib
import io
import os
import re
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
import tomllib

from baking import bake
from chariot_support.dev.testing import free_port
from template_paths import uv

pytestmark = [pytest.mark.torch, pytest.mark.bake]

REAL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
# The other environments uv.lock covers, as PyTorch's CPU index names its wheels (uv's own tests record its names).
STAND_INS = [
    ("2.13.0+cpu", "cp312-cp312-manylinux_2_28_x86_64"),
    ("2.13.0+cpu", "cp311-cp311-manylinux_2_28_aarch64"),
    ("2.13.0+cpu", "cp312-cp312-manylinux_2_28_aarch64"),
    ("2.13.0", "cp311-none-macosx_11_0_arm64"),
    ("2.13.0", "cp312-none-macosx_11_0_arm64"),
]

MODEL = '''"""A torch-only model: a small convolutional network, on the CPU, scores each picture."""

from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np
import torch

from chariot_support import ChariotModel, Detection, Image, TaskType


class Model(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION
    thread_safe = True

    def load(self, model_dir: Path) -> None:
        torch.set_num_threads(self.threads)
        torch.manual_seed(0)
        self.network = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(8, 1),
            torch.nn.Sigmoid(),
        ).eval()

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Detection]]:
        batch = np.stack([cv2.resize(image.pixels, (64, 64)) for image in images])
        with torch.inference_mode():
            scores = self.network(torch.from_numpy(batch).permute(0, 3, 1, 2).float() / 255)[:, 0].tolist()
        return [
            [Detection(label="picture", score=score, xmin=0, ymin=0, xmax=image.width, ymax=image.height)]
            for image, score in zip(images, scores, strict=True)
        ]
'''


def real_wheel() -> Path:
    """The CPU wheel on this disk, in a folder pip's find-links setting names."""
    asked = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.find-links"], capture_output=True, text=True
    )
    folders = [*os.environ.get("PIP_FIND_LINKS", "").split(), *asked.stdout.split()]
    for folder in folders:
        if (Path(folder) / REAL).is_file():
            return Path(folder) / REAL
    pytest.fail(f"{REAL} is in none of pip's find-links folders ({folders}): the stand-in index serves it")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stand_in(folder: Path, version: str, tags: str, metadata: bytes) -> str:
    """A wheel that holds only its metadata (the real wheel's, with its version), for an environment not on disk."""
    name = f"torch-{version}-{tags}.whl"
    info = f"torch-{version}.dist-info"
    files = {
        f"{info}/METADATA": metadata.replace(b"Version: 2.13.0+cpu", f"Version: {version}".encode()),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: stand-in\nRoot-Is-Purelib: false\nTag: {tags}\n".encode(),
    }
    record = [
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
        for p, d in files.items()
    ]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,", ""]).encode()
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
    (folder / name).write_bytes(archive.getvalue())
    return name


def list_index(folder: Path, names: list[str]) -> None:
    """PEP 503's page for torch, with each wheel's hash and its metadata served beside it (PEP 658), so that uv
    locks from the metadata without downloading a wheel."""
    links = []
    for name in names:
        with zipfile.ZipFile(folder / name) as wheel:
            (info,) = {n.split("/")[0] for n in wheel.namelist() if n.split("/")[0].endswith(".dist-info")}
            metadata = wheel.read(f"{info}/METADATA")
        (folder / f"{name}.metadata").write_bytes(metadata)
        digest = sha256((folder / name).read_bytes())
        links.append(
            f'<a href="{name.replace("+", "%2B")}#sha256={digest}" data-dist-info-metadata="sha256={sha256(metadata)}"'
            f' data-core-metadata="sha256={sha256(metadata)}">{name}</a><br>'
        )
    (folder / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")


@pytest.fixture
def index(tmp_path):
    """The stand-in, served by `python -m http.server` on loopback, holding the real wheel alone: yields its URL
    and a function that adds the metadata-only wheels of the other environments."""
    wheel = real_wheel()
    folder = tmp_path / "index" / "simple" / "torch"
    folder.mkdir(parents=True)
    (folder / REAL).symlink_to(wheel)
    with zipfile.ZipFile(wheel) as real:
        metadata = real.read("torch-2.13.0+cpu.dist-info/METADATA")
    list_index(folder, [REAL])

    def add_stand_ins() -> None:
        list_index(folder, [REAL, *(stand_in(folder, version, tags, metadata) for version, tags in STAND_INS)])

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path / "index")],
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
                assert time.monotonic() < deadline and server.poll() is None, "the stand-in index did not start"
                time.sleep(0.1)
        yield url, add_stand_ins
    finally:
        server.terminate()
        server.wait(timeout=10)


def page_cpu_tables(root: Path) -> str:
    """The TOML docs/dependencies.md says to add at the end of pyproject.toml for PyTorch's CPU-only build."""
    blocks = re.findall(r"```toml\n(.*?)```", (root / "docs" / "dependencies.md").read_text(), re.S)
    (tables,) = [block for block in blocks if 'name = "pytorch-cpu"' in block]
    return tables


def test_the_cpu_build_is_locked_from_its_index_without_cuda_and_the_engine_serves_a_torch_model_on_it(tmp_path, index):
    url, add_stand_ins = index
    root = bake("Object Detection", tmp_path / "engine")
    tables = page_cpu_tables(root)
    assert 'url = "https://download.pytorch.org/whl/cpu"' in tables and "explicit = true" in tables
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n" + tables.replace("https://download.pytorch.org/whl/cpu", url))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV", "PYTHONPATH"))}

    def run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
        return subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)

    before = {name: (root / name).read_bytes() for name in ("pyproject.toml", "uv.lock")}
    refused = run(uv(), "add", "torch==2.13.0")
    assert refused.returncode != 0, refused.stderr
    assert "torch==2.13.0+cpu has no `platform_machine == " in refused.stderr, refused.stderr
    assert {name: (root / name).read_bytes() for name in before} == before, "a refused `uv add` changed a file"

    add_stand_ins()
    added = run(uv(), "add", "torch==2.13.0", "--refresh-package", "torch")  # uv keeps the index page it read
    assert added.returncode == 0, added.stderr
    locked = tomllib.loads((root / "uv.lock").read_text())["package"]
    torches = {p["version"]: p for p in locked if p["name"] == "torch"}
    assert set(torches) == {"2.13.0+cpu", "2.13.0"}, "the CPU build for Linux, the macOS build for Macs"
    assert all(p["source"] == {"registry": url} for p in torches.values())
    assert not [p["name"] for p in locked if p["name"].startswith(("nvidia-", "cuda-")) or p["name"] == "triton"]
    assert run(uv(), "lock", "--check").returncode == 0

    (root / "src" / "chariot_engine" / "model.py").write_text(MODEL)
    test_task = root / "tests" / "test_task.py"
    table = "EXPECTED = {" + ", ".join(f'"samples/{p.name}": {{"picture"}}' for p in (root / "samples").iterdir())
    source, replaced = re.subn(
        r"^EXPECTED = \{\n.*?^\}\n", table + "}\n", test_task.read_text(), count=1, flags=re.M | re.S
    )
    assert replaced == 1
    test_task.write_text(source)
    synced = run(uv(), "sync", "--locked")
    assert synced.returncode == 0, synced.stderr
    version = run(".venv/bin/python", "-c", "import torch; print(torch.__version__)")
    assert version.stdout.strip() == "2.13.0+cpu", version.stderr
    suite = run(uv(), "run", "--locked", "pytest", "-q", "-p", "no:cacheprovider")
    summary = suite.stdout.strip().splitlines()[-1] if suite.stdout.strip() else ""
    assert suite.returncode == 0, suite.stdout[-5000:] + suite.stderr[-2000:]
    assert " passed" in summary and "skipped" not in summary and "failed" not in summary, summary
