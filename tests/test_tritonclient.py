"""Engines of every task type, and one whose predict fails, driven by NVIDIA's tritonclient over HTTP and gRPC.

tritonclient's gRPC messages and MLServer's register the same protobuf names, so the client checks
(tritonclient_checks.py, tritonclient_faults.py) run in a pytest process of their own that never imports
MLServer, against an engine this process starts."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from baking import TASKS, model_name

HERE = Path(__file__).parent


def run_checks(checks: str, engine, *, model: str, task: str) -> str:
    environment = {
        **os.environ,
        "ENGINE_URL": engine.url,
        "ENGINE_GRPC_ADDRESS": engine.grpc_address,
        "ENGINE_MODEL": model,
        "ENGINE_TASK": task,
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--noconftest",
            "-c",
            os.devnull,
            "--rootdir",
            str(HERE),
            str(HERE / checks),
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-3000:]
    assert re.search(r"\d+ passed", summary) and not re.search(r"failed|skipped|xfail|error", summary), summary
    return summary


@pytest.mark.parametrize("task", TASKS)
def test_tritonclient_gets_rest_results_and_oip_answers_from_every_task_type(baked_engine, task):
    run_checks("tritonclient_checks.py", baked_engine(task), model=model_name(task), task=task)


def test_tritonclient_sees_a_failing_predict_as_internal(faulty_engine):
    run_checks("tritonclient_faults.py", faulty_engine, model="m-faulty", task="Object Detection")
