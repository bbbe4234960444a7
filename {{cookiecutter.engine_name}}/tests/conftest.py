"""Fixtures for this engine's tests: your model, loaded as the engine loads it, and the real engine serving it on
free loopback ports with the same MODEL_DIR (set MODEL_DIR when your model reads files: `MODEL_DIR=./my-model
pytest`; it defaults to /mnt/models, as in the image)."""

import importlib
import os
from pathlib import Path

import pytest

from chariot_support.dev.model_check import sample_pictures, start_failure
from chariot_support.dev.testing import EngineDidNotStart, engine_package, run_engine
from chariot_support.model.base import ChariotModel

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
SAMPLES = ROOT / "samples"


@pytest.fixture(scope="session")
def package() -> str:
    return engine_package(SRC)


@pytest.fixture(scope="session")
def model_class(package: str) -> type[ChariotModel]:
    return importlib.import_module(f"{package}.model").Model


@pytest.fixture(scope="session")
def model_dir() -> Path:
    return Path(os.environ.get("MODEL_DIR", "/mnt/models"))


@pytest.fixture(scope="session")
def model(model_class: type[ChariotModel], model_dir: Path) -> ChariotModel:
    """Your model, loaded once, for calling predict directly."""
    loaded = model_class()
    loaded.load(model_dir)
    return loaded


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
