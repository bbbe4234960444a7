"""Demo engines driven by KServe's own Python SDK (kserve 0.21), REST and gRPC.

KServe's pins clash with MLServer's, so its checks (kserve_checks.py) run in the .venv-kserve interpreter that
scripts/test makes from requirements-kserve.txt, against an engine this process starts. The SDK reads every task's
results alike (one BYTES element of JSON), so one task type shows it: Image Text to Text, the one whose image
parameters the SDK must carry (prompts, a list over REST and JSON-encoded over gRPC), and whose answers to two prompts
are the several results its numpy view cannot hold. Every task type's answers over REST and gRPC are held to each
other by tests/support/test_engine.py and test_grpc.py."""

from pathlib import Path

import pytest

from chariot_support.model.tasks import TaskType
from client_checks import run_checks

HERE = Path(__file__).parent
ROOT = HERE.parent
KSERVE_PYTHON = ROOT / ".venv-kserve" / "bin" / "python"


@pytest.mark.slow
def test_kserve_sdk_reads_health_results_and_errors(demo_engine):
    assert KSERVE_PYTHON.exists(), (
        f"{KSERVE_PYTHON} is missing: scripts/test makes it (.venv/bin/uv venv .venv-kserve &&"
        " .venv/bin/uv pip install --python .venv-kserve/bin/python -r requirements-kserve.txt)"
    )
    task = TaskType.IMAGE_TEXT_TO_TEXT
    run_checks("kserve_checks.py", demo_engine(task), model="m-demo", task=task.value, python=KSERVE_PYTHON)
