"""The files every baked engine carries (Dockerfile, constraints, deployment manifests), checked on a freshly baked
default engine, and that engine serving its demo model."""

import pytest

from baking import default_engine
from chariot_support.dev.testing import engine_package, run_engine


@pytest.fixture(scope="session")
def engine():
    root = default_engine()
    with run_engine(engine_package(root / "src"), src=root / "src") as running:
        yield running
