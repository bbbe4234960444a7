"""Fixtures for this engine's tests: a scene of coloured shapes drawn in the test, and the real engine serving
on free loopback ports."""

import importlib
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest

from chariot_support.testing import Scene, draw_scene, engine_package, run_engine

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
SAMPLES = ROOT / "samples"


@pytest.fixture(scope="session")
def scene() -> Scene:
    return draw_scene()


@pytest.fixture(scope="session")
def package() -> str:
    return engine_package(SRC)


@pytest.fixture(scope="session")
def model_name(package: str) -> str:
    return f"m-{importlib.import_module(f'{package}.__main__').DEFAULT_MODEL_ID}"


@pytest.fixture(scope="session")
def engine(package: str):
    with run_engine(package, src=SRC) as running:
        yield running


@pytest.fixture(scope="session")
def run_client(package: str):
    """Run `python -m <package>.client ARGS...` as a user would, from the engine's folder."""

    def run(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
        return subprocess.run(
            [sys.executable, "-m", f"{package}.client", *map(str, args)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


@dataclass(frozen=True)
class Drawn:
    """What the client printed for samples/scene.png, the picture, and the client's drawing of it (both BGR)."""

    lines: list[str]
    before: np.ndarray
    after: np.ndarray


@pytest.fixture
def client_on_scene(engine, run_client, tmp_path):
    """Run the client on samples/scene.png against the engine with `--draw`, plus any other arguments."""

    def run(*args: str) -> Drawn:
        out = tmp_path / "found.png"
        result = run_client("samples/scene.png", "--url", engine.url, "--draw", out, *args)
        assert result.returncode == 0, result.stderr
        return Drawn(result.stdout.splitlines(), cv2.imread(str(SAMPLES / "scene.png")), cv2.imread(str(out)))

    return run


def angle_between(a: float, b: float, period: float = math.pi / 2) -> float:
    """Distance between two box angles, in radians, ignoring the quarter turns that describe the same box."""
    d = (a - b) % period
    return min(d, period - d)
