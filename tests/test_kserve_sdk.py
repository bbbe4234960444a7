"""Demo engines driven by KServe's own Python SDK (kserve 0.21), REST and gRPC.

KServe's pins clash with MLServer's, so its checks (kserve_checks.py) run in the .venv-kserve interpreter that
scripts/test makes from requirements-kserve.txt, against an engine this process starts. The SDK reads every task's
results alike (one BYTES element of JSON): the two task types test_tritonclient.py takes show it, one with scores and
several results, one with prompts that travel JSON-encoded over gRPC."""

from pathlib import Path

import pytest

from chariot_support.model.tasks import TaskType
from client_checks import run_checks
from test_tritonclient import CLIENT_TASKS

HERE = Path(__file__).parent
ROOT = HERE.parent
KSERVE_PYTHON = ROOT / ".venv-kserve" / "bin" / "python"


@pytest.mark.slow
@pytest.mark.parametrize("task", [TaskType(task) for task in CLIENT_TASKS], ids=lambda t: t.name.lower())
def test_kserve_sdk_reads_health_results_and_errors(demo_engine, task):
    assert KSERVE_PYTHON.exists(), (
        f"{KSERVE_PYTHON} is missing: scripts/test makes it (python3 -m venv .venv-kserve &&"
        " .venv/bin/uv pip install --python .venv-kserve/bin/python -r requirements-kserve.txt)"
    )
    engine = demo_engine(task)
    run_checks("kserve_checks.py", engine, model="m-demo", task=task.value, python=KSERVE_PYTHON)
