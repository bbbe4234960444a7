"""Fixtures for the support package's tests: the real engine serving the demo model of each task type, on free
loopback ports, so that these tests hold whatever model an engine's author writes."""

import pytest

from chariot_support.tasks import TaskType
from chariot_support.testing import Scene, draw_scene, run_demo_engine

MODEL_NAME = "m-demo"


def task_id(task: TaskType) -> str:
    return task.name.lower()


@pytest.fixture(scope="session", params=list(TaskType), ids=task_id)
def task(request) -> TaskType:
    """Each task type in turn; a test that takes `engine` runs once per task type."""
    return request.param


@pytest.fixture(scope="session")
def engine(task: TaskType):
    with run_demo_engine(task) as running:
        yield running


@pytest.fixture(scope="session")
def model_name() -> str:
    return MODEL_NAME


@pytest.fixture(scope="session")
def scene() -> Scene:
    return draw_scene()
