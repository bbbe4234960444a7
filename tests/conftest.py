"""Shared setup for the template's own tests.

The support package is plain Python that every baked engine carries unchanged, so it is imported straight
from the template folder (pytest.ini puts it on the path) and tested without baking. Engines the tests start
need it on their path too.
"""

import os

import pytest

from baking import TASKS, bake
from template_paths import SUPPORT_SRC

os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SUPPORT_SRC), os.environ.get("PYTHONPATH")]))


@pytest.fixture(scope="session")
def baked(tmp_path_factory):
    """bake(task) -> the folder of an engine of that task type, baked once per test session."""
    engines = {}

    def bake_once(task):
        if task not in engines:
            engines[task] = str(bake(task, tmp_path_factory.mktemp(TASKS[task])))
        return engines[task]

    return bake_once
