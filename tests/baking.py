"""Baking engines for the template's tests: every task type, one of them under unusual names."""

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

from cookiecutter.main import cookiecutter

from chariot_support.model.tasks import TaskType
from template_paths import TEMPLATE_ROOT

# Each task type's name, and the folder of its files in the template (`_tasks/<slug>`).
TASKS = {task.value: task.value.lower().replace(" ", "_") for task in TaskType}
# One task bakes under unusual names and the other Python, so derived names and the python_version answer are
# exercised beyond the defaults.
ANSWERS = {"Image Segmentation": {"engine_name": "road-damage-2", "model_id": "0a1b2c-seg", "python_version": "3.12"}}


def bake(task: str, output_dir: Path) -> Path:
    answers = {"task_type": task, **ANSWERS.get(task, {})}
    return Path(cookiecutter(str(TEMPLATE_ROOT), no_input=True, extra_context=answers, output_dir=str(output_dir)))


def model_name(task: str) -> str:
    return f"m-{ANSWERS.get(task, {}).get('model_id', 'demo')}"


@functools.cache
def default_engine() -> Path:
    """The default engine (Object Detection, the demo model), baked once per test process into a temporary folder
    that is removed at exit: for tests of the files every engine carries."""
    out = Path(tempfile.mkdtemp(prefix="baked-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    return bake("Object Detection", out)
