"""Baked engines, and one whose predict fails, driven by NVIDIA's tritonclient over HTTP and gRPC.

tritonclient's gRPC messages and MLServer's register the same protobuf names, so the client checks
(tritonclient_checks.py, tritonclient_faults.py) run in a pytest process of their own that never imports
MLServer, against an engine this process starts.

What the client reads does not depend on the task type: every task's results travel as one BYTES element of JSON,
its parameters as the same strings, and the platform in the metadata is one f-string of the task's name. Two task
types show it: Object Detection, whose scores a threshold can drop, and Image Text to Text, whose prompts travel
JSON-encoded over gRPC. Every task type's engine is held to the same answers
over REST and gRPC, platform prefix included, by tests/support/test_engine.py and test_grpc.py."""

import pytest

from baking import model_name
from client_checks import run_checks

CLIENT_TASKS = ["Object Detection", "Image Text to Text"]


@pytest.mark.parametrize("task", CLIENT_TASKS)
def test_tritonclient_gets_rest_results_and_oip_answers(baked_engine, task):
    run_checks("tritonclient_checks.py", baked_engine(task), model=model_name(task), task=task)


def test_tritonclient_reads_the_model_configuration_and_statistics(baked_engine):
    """Triton's model configuration and statistics extensions, as tritonclient reads them from a baked engine with
    its defaults (tests/support/test_stages.py reads them from one with batching and parallel workers)."""
    task = CLIENT_TASKS[0]
    run_checks("tritonclient_statistics.py", baked_engine(task), model=model_name(task), task=task)


def test_tritonclient_sees_a_failing_predict_as_internal(faulty_engine):
    run_checks("tritonclient_faults.py", faulty_engine, model="m-faulty", task="Object Detection")
