"""Check the model id by the engine's own rule, then keep only what the chosen task type needs: its model file,
its tests and its worked example. A refused answer exits non-zero, and cookiecutter removes what it wrote."""

import importlib.util
import json
import shutil
import sys
from pathlib import Path

# fmt: off
MODEL_ID = json.loads(r'''{{ cookiecutter.model_id | tojson }}''')
# fmt: on

TASK = "{{ cookiecutter.__task_slug }}"
PACKAGE = "{{ cookiecutter.__package_name }}"
TASKS = Path("_tasks")
DESTINATIONS = {
    "model.py": Path("src") / PACKAGE / "model.py",
    "test_task.py": Path("tests") / "test_task.py",
    "example_model.py": Path("examples") / "model.py",
    "example_yolo.py": Path("examples") / "yolo_model.py",  # Object Detection only
}


def model_id_problem() -> str | None:
    """What the engine would say of the model id: the rule is src/chariot_support/model_id.py, just written."""
    spec = importlib.util.spec_from_file_location("chariot_model_id", Path("src/chariot_support/model_id.py"))
    rule = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rule)
    return rule.problem(MODEL_ID)


def install_task_files() -> None:
    chosen = TASKS / TASK
    if not chosen.is_dir():  # already laid out (a re-run over an existing engine)
        return
    for name, destination in DESTINATIONS.items():
        # Baking over an existing engine (cookiecutter -f -s) must not replace the user's model with the demo.
        if (chosen / name).exists() and not destination.exists():
            destination.parent.mkdir(exist_ok=True)
            shutil.move(str(chosen / name), destination)


def remove_other_tasks() -> None:
    shutil.rmtree(TASKS, ignore_errors=True)


if __name__ == "__main__":
    problem = model_id_problem()
    if problem:
        print(f"{problem}.", file=sys.stderr)
        sys.exit(1)
    install_task_files()
    remove_other_tasks()
