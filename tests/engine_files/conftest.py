"""The files every baked engine carries (Dockerfile, deployment manifests), checked on a freshly baked default engine,
and that engine serving its demo model."""

from pathlib import Path

import pytest

from baking import default_engine
from chariot_support.dev.testing import engine_package, run_engine

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    """Every test here checks a freshly baked engine: all are `bake` tests."""
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.bake)


@pytest.fixture(scope="session")
def engine():
    root = default_engine()
    with run_engine(engine_package(root / "src"), src=root / "src") as running:
        yield running
