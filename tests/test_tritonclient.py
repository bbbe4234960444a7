"""Engines of every task type, and one whose predict fails, driven by NVIDIA's tritonclient over HTTP and gRPC.

tritonclient's gRPC messages and MLServer's register the same protobuf names, so the client checks
(tritonclient_checks.py, tritonclient_faults.py) run in a pytest process of their own that never imports
MLServer, against an engine this process starts."""

import pytest

from baking import TASKS, model_name
from client_checks import run_checks


@pytest.mark.parametrize("task", TASKS)
def test_tritonclient_gets_rest_results_and_oip_answers_from_every_task_type(baked_engine, task):
    run_checks("tritonclient_checks.py", baked_engine(task), model=model_name(task), task=task)


def test_tritonclient_sees_a_failing_predict_as_internal(faulty_engine):
    run_checks("tritonclient_faults.py", faulty_engine, model="m-faulty", task="Object Detection")
