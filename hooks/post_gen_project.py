"""Check the model id by the engine's own rule, then keep only what the chosen task type needs: its model file,
its tests and its worked example, and record in .cookiecutter.json which template commit the engine was baked from.
A refused answer exits non-zero, and cookiecutter removes what it wrote."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

# fmt: off
MODEL_ID = json.loads(r'''{{ cookiecutter.model_id | tojson }}''')
# cruft names the commit it bakes (`_commit`); plain cookiecutter names the template's folder (`_repo_dir`).
CRUFT_COMMIT = json.loads(r'''{{ cookiecutter.get("_commit", "") | tojson }}''')
TEMPLATE_DIR = json.loads(r'''{{ cookiecutter.get("_repo_dir", "") | tojson }}''')
# fmt: on
ANSWERS = Path(".cookiecutter.json")

TASK = "{{ cookiecutter.__task_slug }}"
PACKAGE = "{{ cookiecutter.__package_name }}"
TASKS = Path("_tasks")
DESTINATIONS = {
    "model.py": Path("src") / PACKAGE / "model.py",
    "test_task.py": Path("tests") / "test_task.py",
    "example_model.py": Path("examples") / "model.py",
    "example_yolo.py": Path("examples") / "yolo_model.py",  # Object Detection only
    "example_torch.py": Path("examples") / "torch_model.py",  # Object Detection only
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


def template_commit() -> str | None:
    """The template commit being baked: the one cruft names, else the HEAD of the git checkout the template is baked
    from (with `-dirty` when its files differ from that commit); None for a template that is not a checkout."""
    if CRUFT_COMMIT:
        return CRUFT_COMMIT
    template = template_folder()
    if template is None:
        return None

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=template, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None  # no git here
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    # The template's own checkout, not a repository it happens to sit in (a copy inside someone's project).
    if not top or Path(top).resolve() != template:
        return None
    head = git("rev-parse", "HEAD")
    if not head:
        return None
    return head + ("-dirty" if git("status", "--porcelain") else "")


def template_folder() -> Path | None:
    """The template's folder. cookiecutter names it as it was given, and runs this hook in the new engine's folder:
    a relative path is taken from where cookiecutter was started (the shell's PWD), if the template is there."""
    if not TEMPLATE_DIR:
        return None
    folder = Path(os.environ.get("PWD", "/"), TEMPLATE_DIR)  # an absolute TEMPLATE_DIR stays as it is
    return folder.resolve() if (folder / "cookiecutter.json").is_file() else None


def record_template_commit() -> None:
    """Add `_template_commit` to the answers in .cookiecutter.json, unless it is there already (an engine baked over
    again keeps its own) or the template is not a git checkout; the answers' own lines are left as written."""
    commit = template_commit()
    text = ANSWERS.read_text() if ANSWERS.is_file() else ""
    if not commit or not text.rstrip().endswith("}") or "_template_commit" in json.loads(text):
        return
    ANSWERS.write_text(text.rstrip()[:-1].rstrip() + f',\n  "_template_commit": {json.dumps(commit)}\n}}\n')


if __name__ == "__main__":
    problem = model_id_problem()
    if problem:
        print(f"{problem}.", file=sys.stderr)
        sys.exit(1)
    install_task_files()
    remove_other_tasks()
    record_template_commit()
