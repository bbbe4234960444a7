"""Keep only what the chosen task type needs: its model file, its tests and its worked example."""

import shutil
from pathlib import Path

TASK = "{{ cookiecutter.__task_slug }}"
PACKAGE = "{{ cookiecutter.__package_name }}"
TASKS = Path("_tasks")
DESTINATIONS = {
    "model.py": Path("src") / PACKAGE / "model.py",
    "test_task.py": Path("tests") / "test_task.py",
    "example_model.py": Path("examples") / "model.py",
}


def install_task_files() -> None:
    chosen = TASKS / TASK
    if not chosen.is_dir():  # already laid out (a re-run over an existing engine)
        return
    for name, destination in DESTINATIONS.items():
        # Baking over an existing engine (cookiecutter -f -s) must not replace the user's model with the demo.
        if not destination.exists():
            destination.parent.mkdir(exist_ok=True)
            shutil.move(str(chosen / name), destination)


def remove_other_tasks() -> None:
    shutil.rmtree(TASKS, ignore_errors=True)


if __name__ == "__main__":
    install_task_files()
    remove_other_tasks()
