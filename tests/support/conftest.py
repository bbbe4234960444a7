"""Fixtures for the support package's tests: the real engine serving the demo model of each task type, on free
loopback ports, so that these tests hold whatever model an engine's author writes."""

import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest

from chariot_support.dev.testing import Scene, draw_scene, run_engine
from chariot_support.model.tasks import TaskType
from template_paths import ENGINE_TEMPLATE, SUPPORT_SRC

MODEL_NAME = "m-demo"
SAMPLES = ENGINE_TEMPLATE / "samples"


def task_id(task: TaskType) -> str:
    return task.name.lower()


@pytest.fixture(scope="session", params=list(TaskType), ids=task_id)
def task(request) -> TaskType:
    """Each task type in turn; a test that takes `engine` runs once per task type."""
    return request.param


@pytest.fixture(scope="session")
def engine(task: TaskType, demo_engine):
    """The demo engine of each task type, as it starts (shared with every other test that wants it)."""
    return demo_engine(task)


@pytest.fixture(scope="session")
def model_name() -> str:
    return MODEL_NAME


@pytest.fixture(scope="session")
def scene() -> Scene:
    return draw_scene()


@pytest.fixture(scope="session")
def run_client():
    """Run the command-line client (`python -m chariot_support.client ARGS...`) from the engine folder, where
    samples/ is, as a user runs their engine's client."""

    def run(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        path = os.pathsep.join(filter(None, [str(SUPPORT_SRC), os.environ.get("PYTHONPATH")]))
        return subprocess.run(
            [sys.executable, "-m", "chariot_support.client", *map(str, args)],
            cwd=ENGINE_TEMPLATE,
            env={**os.environ, "PYTHONPATH": path},
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


@pytest.fixture
def released_metrics(monkeypatch):
    """MLServer's data plane and gRPC server register their metrics in prometheus' registry, which takes each name
    once a process: what a canary registers is taken out again after it, or when the test calls the function this
    gives it (before it builds a second canary)."""
    from prometheus_client import REGISTRY

    registered = []
    register = REGISTRY.register

    def recording(collector):
        register(collector)
        registered.append(collector)

    def release():
        while registered:
            REGISTRY.unregister(registered.pop())

    monkeypatch.setattr(REGISTRY, "register", recording)
    yield release
    release()


@pytest.fixture(scope="session")
def warming_engine():
    """The engine of tests/support/warming_engine (its model's first predict is slow; predict logs, prints and writes
    to stderr, and answers with its process and GPUs) with two parallel workers, two fake GPUs, batches of up to two,
    warm-up on and no Server-Timing header, as it starts: shared by the warm-up, model log, device and stage tests."""
    env = {
        "MLSERVER_PARALLEL_WORKERS": "2",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "CHARIOT_MAX_BATCH_SIZE": "2",
        "CHARIOT_SERVER_TIMING": "0",
    }
    with run_engine("warming_engine", src=Path(__file__).parent, env=env) as running:
        yield running
