"""Shared setup for the template's own tests.

The support package is plain Python that every baked engine carries unchanged, so it is imported straight
from the template folder (pytest.ini puts it on the path) and tested without baking. Engines the tests start
need it on their path too.
"""

import contextlib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from baking import TASKS, bake
from chariot_support.dev.testing import engine_package, run_demo_engine, run_engine
from chariot_support.model.tasks import TaskType
from template_paths import SUPPORT_SRC

os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SUPPORT_SRC), os.environ.get("PYTHONPATH")]))

# Property tests draw the same examples on every run (`ci`, the default), so that a run's result is the code's, not
# the draw's; a failure prints the blob that replays it (@reproduce_failure). HYPOTHESIS_PROFILE=explore draws fresh
# examples, ten times as many of each test's (fuzzing.examples scales them), to look for what the fixed ones miss.
# No deadline: engines answer on a shared machine, and how long an example takes is not what these tests check.
_PROFILE = {"deadline": None, "database": None, "print_blob": True, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("ci", derandomize=True, max_examples=100, **_PROFILE)
settings.register_profile("explore", derandomize=False, max_examples=1000, **_PROFILE)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """With `-m hostile` (scripts/test's second part), a test file that never names the marker is not imported: it
    holds no hostile test, since markers are written in the files (the hook below adds only `bake` and reads
    `torch`). Each of that part's workers collects in 2.5 s instead of 4.8."""
    if config.getoption("markexpr") != "hostile" or not collection_path.name.startswith("test_"):
        return None
    if collection_path.suffix == ".py" and "hostile" not in collection_path.read_text():
        return True
    return None


def pytest_collection_modifyitems(config, items):
    """A test that takes a baked engine (`baked`, `baked_engine`) is a `bake` test, however it is written. Tests
    marked `torch` run in a venv of their own (scripts/test-torch, `-m torch`): any other run deselects them."""
    for item in items:
        if {"baked", "baked_engine"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.bake)
    if "torch" not in (config.option.markexpr or ""):
        torch = [item for item in items if item.get_closest_marker("torch")]
        if torch:
            config.hook.pytest_deselected(items=torch)
            items[:] = [item for item in items if not item.get_closest_marker("torch")]
    # Files holding slow or bake tests run first, so that the workers share those out while the quick tests are
    # left to fill the end, rather than one worker starting a 20-second bake while the others have nothing left to
    # take. Files stay whole and each keeps its tests' order.
    heavy = {
        item.nodeid.split("::")[0]
        for item in items
        if item.get_closest_marker("slow") or item.get_closest_marker("bake")
    }
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in heavy)


@pytest.fixture(scope="session")
def baked(tmp_path_factory):
    """bake(task) -> the folder of an engine of that task type, baked once per test session."""
    engines = {}

    def bake_once(task):
        if task not in engines:
            engines[task] = str(bake(task, tmp_path_factory.mktemp(TASKS[task])))
        return engines[task]

    return bake_once


@pytest.fixture(scope="session")
def demo_engine():
    """demo_engine(task, env) -> the demo engine of `task` (a TaskType or its name) started with `env` (MLSERVER_* or
    CHARIOT_* variables), started when first wanted and shared by every test of the session that wants the same one.
    A test that stops, overloads or reconfigures its engine starts one of its own instead."""
    with contextlib.ExitStack() as stack:
        started = {}

        def shared(task, env: dict[str, str] | None = None):
            key = (TaskType(task), tuple(sorted((env or {}).items())))
            if key not in started:
                started[key] = stack.enter_context(run_demo_engine(key[0], env=env))
            running = started[key]
            assert running.alive(), f"the shared {key[0].value} engine {dict(key[1])} was stopped by a test"
            return running

        yield shared


@pytest.fixture(scope="session")
def baked_engine(baked):
    """baked_engine(task) -> the engine `baked(task)` made, serving its demo model as its own package, started when
    first wanted and shared for the session."""
    with contextlib.ExitStack() as stack:
        started = {}

        def shared(task: str):
            if task not in started:
                src = Path(baked(task)) / "src"
                started[task] = stack.enter_context(run_engine(engine_package(src), src=src))
            assert started[task].alive(), f"the shared baked {task} engine was stopped by a test"
            return started[task]

        yield shared


@pytest.fixture(scope="session")
def faulty_engine():
    """The engine of tests/support/faulty_engine (a model whose predict misbehaves as a request asks), as it starts,
    shared for the session by the tests that only send it requests."""
    with run_engine("faulty_engine", src=Path(__file__).parent / "support") as running:
        yield running
