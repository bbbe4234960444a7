"""The checks every baked engine's test_model.py holds its author's model to: they pass on each demo model served,
and each refuses what Chariot could not use, with a sentence naming the picture."""

import shutil
from pathlib import Path

import pytest

from chariot_support.dev.model_check import (
    PROMPTS,
    ServedModel,
    check_explanations,
    check_results,
    same_answers,
    sample_pictures,
    start_failure,
)
from chariot_support.dev.testing import run_engine
from chariot_support.model.base import has_explain
from chariot_support.model.demo import DEMO_MODELS
from chariot_support.model.tasks import TaskType
from template_paths import ENGINE_TEMPLATE, TEMPLATE_ROOT

SAMPLES = ENGINE_TEMPLATE / "samples"
ODD_MODELS = TEMPLATE_ROOT / "tests" / "odd_models"


def test_every_demo_model_passes_the_checks(engine, model_name, task):
    served = ServedModel(engine.url, model_name, task, sample_pictures(SAMPLES))
    answers = served.infer()
    assert len(answers) == 2 and all(answers), "the demo finds something in each sample"
    assert all(same_answers(concurrent, answers) for concurrent in served.infer_concurrently(4))
    status, explained = served.explain()
    assert status == 200 and has_explain(DEMO_MODELS[task])
    check_explanations(explained, answers)
    if task is TaskType.IMAGE_TEXT_TO_TEXT:
        served.check_without_prompts()


@pytest.mark.parametrize(
    "task, results, message",
    [
        (TaskType.OBJECT_DETECTION, {"label": "cat"}, "not a list of results"),
        (TaskType.OBJECT_DETECTION, [{"label": "cat", "score": 0.5}], "field 'xmin'"),
        (TaskType.IMAGE_CLASSIFICATION, [{"label": "cat", "score": 1.5}], "field 'score'"),
        (
            TaskType.IMAGE_TEXT_TO_TEXT,
            [{"prompt": PROMPTS[1], "answer": "a"}, {"prompt": PROMPTS[0], "answer": "b"}],
            "answered",
        ),
    ],
)
def test_results_chariot_cannot_use_are_refused_naming_the_picture(task, results, message):
    with pytest.raises(AssertionError, match=message) as refused:
        check_results(task, results, "beach.jpg")
    assert "beach.jpg" in str(refused.value)


def test_a_picture_asked_nothing_gets_one_answer_with_the_empty_prompt():
    itself = [{"prompt": "", "answer": "a red square"}]
    assert check_results(TaskType.IMAGE_TEXT_TO_TEXT, itself, "x.png", prompts=()) == itself
    with pytest.raises(AssertionError, match=r"x.png: asked \[\], answered \[\]"):
        check_results(TaskType.IMAGE_TEXT_TO_TEXT, [], "x.png", prompts=())


def test_empty_results_are_valid():
    assert check_results(TaskType.IMAGE_SEGMENTATION, [], "empty.png") == []


def test_answers_are_the_same_but_for_rounding():
    a = [[{"label": "cat", "score": 0.5, "box": [1.0, 2]}]]
    assert same_answers(a, [[{"label": "cat", "score": 0.5 + 1e-9, "box": [1.0, 2]}]])
    assert not same_answers(a, [[{"label": "dog", "score": 0.5, "box": [1.0, 2]}]])
    assert not same_answers(a, [[{"label": "cat", "score": 0.6, "box": [1.0, 2]}]])
    assert not same_answers(a, [[{"label": "cat", "score": 0.5, "box": [1.0]}]])
    assert not same_answers([True], [1])


def test_an_explanation_per_picture_and_the_same_predictions():
    check_explanations({"predictions": [[]], "explanations": [{}]}, [[]])
    with pytest.raises(AssertionError, match="one explanation per picture"):
        check_explanations({"predictions": [[]], "explanations": []}, [[]])
    with pytest.raises(AssertionError, match="same predictions"):
        check_explanations({"predictions": [[{"label": "x"}]], "explanations": [{}]}, [[]])


def test_a_folder_without_pictures_says_what_to_put_there(tmp_path):
    (tmp_path / "notes.txt").write_text("not a picture")
    with pytest.raises(AssertionError, match="holds no pictures"):
        sample_pictures(tmp_path)
    assert [p.name for p in sample_pictures(SAMPLES)] == ["scene.png", "shapes.jpg"]


def test_a_start_failure_names_model_dir_only_when_it_is_missing(tmp_path):
    log = "line\n" * 100 + "FileNotFoundError: labels.txt"
    missing = start_failure(tmp_path / "nope", log)
    assert f"MODEL_DIR is {tmp_path / 'nope'}, which does not exist" in missing and missing.endswith("labels.txt")
    assert "MODEL_DIR" not in start_failure(Path(tmp_path), log)


def racy_engine(folder: Path) -> Path:
    """An engine package serving odd_models/one_at_a_time.py, a model whose concurrent calls on one instance corrupt
    each other's answers, with the false claim that it is thread-safe."""
    package = folder / "racy_engine"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(ODD_MODELS / "one_at_a_time.py", package / "model.py")
    (package / "claimed.py").write_text(
        "from .model import Model\n\n\nclass ClaimsThreadSafe(Model):\n    thread_safe = True\n"
    )
    (package / "__main__.py").write_text(
        "from chariot_support.server.server import serve\n\nfrom .claimed import ClaimsThreadSafe\n\n"
        "serve(ClaimsThreadSafe, default_model_id='racy')\n"
    )
    return folder


def test_the_concurrency_check_fails_a_model_that_falsely_says_it_is_thread_safe(tmp_path):
    # Served as it says (thread_safe = False), the same model passes the check: tests/test_any_model.py runs the
    # baked engine's own suite on it. Here it claims thread safety, and four worker threads share its instance.
    env = {"CHARIOT_THREADS": "4"}
    with run_engine("racy_engine", src=racy_engine(tmp_path), env=env) as engine:
        served = ServedModel(engine.url, "m-racy", TaskType.IMAGE_SEGMENTATION, sample_pictures(SAMPLES))
        answers = served.infer()
        assert [r["label"] for results in answers for r in results] == ["bright region 1", "bright region 2"]
        same = [same_answers(concurrent, answers) for concurrent in served.infer_concurrently()]
    assert not all(same), "concurrent calls on one instance corrupt this model's answers; the check missed it"


def test_the_prompt_check_fails_a_model_that_answers_nothing_when_asked_nothing(tmp_path):
    """A model written when prompts were required (it answers each of image.prompts, so nothing without them)."""
    package = tmp_path / "mute_engine"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(
        "from chariot_support import ChariotModel, PromptAnswer, TaskType\n\n\n"
        "class Model(ChariotModel):\n"
        "    task_type = TaskType.IMAGE_TEXT_TO_TEXT\n\n"
        "    def predict(self, images, tensors):\n"
        "        return [[PromptAnswer(prompt=p, answer='yes') for p in i.prompts] for i in images]\n"
    )
    (package / "__main__.py").write_text(
        "from chariot_support.server.server import serve\n\nfrom .model import Model\n\n"
        "serve(Model, default_model_id='mute')\n"
    )
    with run_engine("mute_engine", src=tmp_path) as engine:
        served = ServedModel(engine.url, "m-mute", TaskType.IMAGE_TEXT_TO_TEXT, sample_pictures(SAMPLES))
        served.infer()  # asked the check's prompts, it answers them
        with pytest.raises(AssertionError) as refused:
            served.check_without_prompts()
    message = str(refused.value)
    assert message.startswith("scene.png without prompts: the engine answered 500")
    assert "PromptAnswer(answer=...)" in message and "raise BadRequest if the model needs a prompt" in message
