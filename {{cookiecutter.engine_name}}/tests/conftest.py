"""Fixtures for this engine's tests: your model, loaded as the engine loads it, and the real engine serving it on
free loopback ports with the same MODEL_DIR (set MODEL_DIR when your model reads files: `MODEL_DIR=./my-model
pytest`; it defaults to /mnt/models, as in the image).

Tests marked `needs_weights` (test_model.py's and test_task.py's) are skipped, each saying why, in one case only:
MODEL_DIR is not set, /mnt/models does not exist, and your model's load fails for want of a file. Everything else
still runs. A MODEL_DIR that is set but lacks a file is a failure, not a skip: CI sets it once it has fetched the
model's files (docs/testing.md, "Weights in CI")."""

import functools
import importlib
import os
from pathlib import Path

import pytest

from chariot_support.dev.model_check import sample_pictures, start_failure
from chariot_support.dev.testing import EngineDidNotStart, engine_package, run_engine
from chariot_support.model.base import ChariotModel, missing_file

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
SAMPLES = ROOT / "samples"
DEFAULT_MODEL_DIR = Path("/mnt/models")  # where Chariot puts the model's files in the image


def the_model_dir() -> Path:
    return Path(os.environ.get("MODEL_DIR", DEFAULT_MODEL_DIR)).absolute()


@functools.cache
def loaded() -> tuple[ChariotModel | None, Exception | None]:
    """Your model loaded once from MODEL_DIR, or the exception its load raised."""
    instance = importlib.import_module(f"{engine_package(SRC)}.model").Model()
    try:
        instance.load(the_model_dir())
    except Exception as error:
        return None, error
    return instance, None


def missing_weights() -> str | None:
    """Why the tests that need the model's files cannot run here, or None when they can (or must fail instead)."""
    model_dir = the_model_dir()
    if "MODEL_DIR" in os.environ or model_dir.is_dir():
        return None
    _, error = loaded()
    if error is None or not missing_file(error):
        return None
    return (
        f"the model's files are not here: MODEL_DIR is not set and {model_dir} does not exist, and load raised"
        f" {type(error).__name__}: {error}. Run `MODEL_DIR=./my-model pytest`; in CI, fetch them first"
        " (docs/testing.md, Weights in CI)"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before the test's fixtures: the engine fixture would start an engine whose model cannot load.
    if item.get_closest_marker("needs_weights") and (reason := missing_weights()):
        pytest.skip(reason)


@pytest.fixture(scope="session")
def package() -> str:
    return engine_package(SRC)


@pytest.fixture(scope="session")
def model_class(package: str) -> type[ChariotModel]:
    return importlib.import_module(f"{package}.model").Model


@pytest.fixture(scope="session")
def model_dir() -> Path:
    return the_model_dir()


@pytest.fixture(scope="session")
def model() -> ChariotModel:
    """Your model, loaded once, for calling predict directly."""
    instance, error = loaded()
    if error is not None:
        raise error
    return instance


@pytest.fixture(scope="session")
def model_name(package: str) -> str:
    return f"m-{importlib.import_module(package).DEFAULT_MODEL_ID}"


@pytest.fixture(scope="session")
def pictures() -> list[Path]:
    return sample_pictures(SAMPLES)


@pytest.fixture(scope="session")
def engine(package: str, model_dir: Path):
    starting = run_engine(package, src=SRC, env={"MODEL_DIR": str(model_dir)})
    try:
        running = starting.__enter__()
    except EngineDidNotStart as error:
        pytest.fail(start_failure(model_dir, error.log), pytrace=False)
    try:
        yield running
    finally:
        starting.__exit__(None, None, None)
