"""Bad answers are refused by the pre-gen hook with one plain sentence, and nothing is baked."""

import json
import subprocess
import sys

import pytest
from cookiecutter.exceptions import FailedHookException
from cookiecutter.main import cookiecutter

from chariot_support.model.tasks import TaskType
from template_paths import TEMPLATE_ROOT

pytestmark = pytest.mark.bake


def bake(tmp_path, *answers):
    return subprocess.run(
        [sys.executable, "-m", "cookiecutter", "--no-input", "-o", str(tmp_path), str(TEMPLATE_ROOT), *answers],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_line_says_only_the_hooks_sentence(tmp_path):
    result = bake(tmp_path, "engine_name=My Engine")
    assert result.returncode != 0
    (sentence,) = result.stderr.strip().splitlines()
    assert "engine_name 'My Engine' must be a lowercase slug" in sentence
    assert not any(tmp_path.iterdir()), "a refused answer must not leave a half-baked engine"


@pytest.mark.parametrize(
    "answer, message",
    [
        ("engine_name=chariot_engine", "engine_name 'chariot_engine' must be a lowercase slug"),
        ("engine_name=-engine", "must be a lowercase slug"),
        ("engine_name=engine--two", "must be a lowercase slug"),
        ("engine_name=" + "e" * 64, "longer than 63 characters"),
        (
            "engine_name=chariot-support",
            "engine_name 'chariot-support' would name the engine's package chariot_support",
        ),
        ("model_id=Demo", "model id 'Demo' cannot stand in the URL path /v2/models/m-<id>"),
        ("model_id=my/model", "cannot stand in the URL path"),
        ("model_id=a b", "cannot stand in the URL path"),
        ("model_id=demo-", "cannot stand in the URL path"),
        ("model_id=" + "a" * 64, "is 64 characters long; Chariot's ids are at most 63"),
        ("description= ", "description must be one non-empty line."),
        ("author_email=nobody", "author_email 'nobody' is not an e-mail address."),
    ],
)
def test_bad_answers_fail_in_the_hook_with_their_message(tmp_path, capfd, answer, message):
    """Baked in this process (test_the_command_line_says_only_the_hooks_sentence runs the command): the hooks still
    run as cookiecutter runs them, in a Python of their own, and what they print is read from this process's stderr."""
    key, value = answer.split("=", 1)
    with pytest.raises(FailedHookException):
        cookiecutter(str(TEMPLATE_ROOT), no_input=True, extra_context={key: value}, output_dir=str(tmp_path))
    (sentence,) = capfd.readouterr().err.strip().splitlines()
    assert message in sentence
    assert not any(tmp_path.iterdir()), "a refused answer must not leave a half-baked engine"


def test_task_type_must_be_one_of_chariots_names(tmp_path):
    result = bake(tmp_path, "task_type=Pose Estimation")
    assert result.returncode != 0
    assert not any(tmp_path.iterdir())


def test_good_unusual_answers_bake(tmp_path):
    result = bake(tmp_path, "engine_name=x9", "model_id=0", "description=Says \"hi\" \\ and 'bye'", "author=O'Neil")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "x9" / "src" / "x9" / "model.py").is_file()


def test_every_question_is_asked_as_a_sentence_and_package_name_is_derived():
    config = json.loads((TEMPLATE_ROOT / "cookiecutter.json").read_text())
    asked = [key for key in config if not key.startswith("_")]
    assert asked[:3] == ["engine_name", "task_type", "model_id"]
    assert {"description", "author", "python_version"} <= set(asked)
    assert "package_name" not in asked
    for key in asked:
        assert config["__prompts__"][key].endswith(("?", ")")), key
    # Chariot's names, exactly as the support package's TaskType has them; Object Detection is the default.
    assert sorted(config["task_type"]) == sorted(task.value for task in TaskType)
    assert config["task_type"][0] == TaskType.OBJECT_DETECTION.value
