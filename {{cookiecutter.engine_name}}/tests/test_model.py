"""Your model, served as Chariot serves it. Whatever it finds, the engine must answer every picture in samples/ with
what your model finds in it, in its task type's format, over REST and gRPC, give the same answers to concurrent
requests when it says it is thread-safe, and explain when it has an explain. This file belongs to the engine
(template updates keep it current); what your model should find goes in test_task.py."""

import pytest

from chariot_support.dev.grpc_client import grpc_infer
from chariot_support.dev.model_check import (
    PROMPTS,
    ServedModel,
    check_explanations,
    check_results,
    picture_input,
    same_answers,
)
from chariot_support.dev.testing import answer, read_picture
from chariot_support.model.base import has_explain
from chariot_support.model.tasks import TaskType, to_dicts

# Skipped, saying why, when the model cannot load for want of its files and MODEL_DIR is not set (conftest.py).
pytestmark = pytest.mark.needs_weights


@pytest.fixture(scope="session")
def served(engine, model_name, model_class, pictures) -> ServedModel:
    return ServedModel(engine.url, model_name, model_class.task_type, pictures)


@pytest.fixture(scope="session")
def answers(served) -> list[list[dict]]:
    return served.infer()


def test_each_sample_picture_is_answered_with_what_the_model_finds_in_it(served, model, model_class, pictures):
    """Sent alone, each picture is answered with your model's own results for it, as the engine sends them: in the
    task's format, for its default action (and the prompts asked, in order, for Image Text to Text)."""
    task = model_class.task_type
    prompts = PROMPTS if task is TaskType.IMAGE_TEXT_TO_TEXT else ()
    for picture in pictures:
        (answered,) = served.infer([picture])
        found = to_dicts(answer(model, read_picture(picture, action=task.actions[0], prompts=prompts)))
        assert same_answers(answered, found), f"{picture.name}: the engine answered {answered}, the model finds {found}"
    # Image Text to Text: each picture sent without prompts too, as Chariot may send it (one answer about the picture,
    # or your model's own 400 saying it needs a prompt).
    served.check_without_prompts()


def test_grpc_gets_valid_results(engine, model_name, model_class, pictures):
    body = {"inputs": [picture_input(f"image-{i}", p, model_class.task_type) for i, p in enumerate(pictures)]}
    results = grpc_infer(engine.grpc_address, body, model_name)
    for i, picture in enumerate(pictures):
        check_results(model_class.task_type, results[f"image-{i}"], f"{picture.name} over gRPC")


def test_concurrent_requests_get_the_same_answers(served, answers, model_class):
    for concurrent in served.infer_concurrently():
        assert same_answers(concurrent, answers), "concurrent requests got other answers than one request alone" + (
            ": a model that is not thread-safe must say `thread_safe = False`" if model_class.thread_safe else ""
        )


def test_explain_answers_when_the_model_explains(served, answers, model_class):
    status, answer = served.explain()
    if has_explain(model_class):
        assert status == 200, answer
        check_explanations(answer, answers)
    else:
        assert status == 501, answer
