"""The demo engine of every task type driven by KServe's own Python SDK (kserve 0.21), REST and gRPC.

KServe's pins clash with MLServer's, so its checks (kserve_checks.py) run in the .venv-kserve interpreter that
scripts/test makes from requirements-kserve.txt, against an engine this process starts."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from chariot_support.model.tasks import TaskType

HERE = Path(__file__).parent
ROOT = HERE.parent
KSERVE_PYTHON = ROOT / ".venv-kserve" / "bin" / "python"


@pytest.mark.slow
@pytest.mark.parametrize("task", list(TaskType), ids=lambda t: t.name.lower())
def test_kserve_sdk_reads_health_results_and_errors(demo_engine, task):
    assert KSERVE_PYTHON.exists(), (
        f"{KSERVE_PYTHON} is missing: scripts/test makes it (python3 -m venv .venv-kserve &&"
        " .venv-kserve/bin/pip install -r requirements-kserve.txt)"
    )
    engine = demo_engine(task)
    environment = {
        **os.environ,
        "ENGINE_URL": engine.url,
        "ENGINE_GRPC_ADDRESS": engine.grpc_address,
        "ENGINE_MODEL": "m-demo",
        "ENGINE_TASK": task.value,
    }
    result = subprocess.run(
        [
            str(KSERVE_PYTHON),
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
            str(HERE / "kserve_checks.py"),
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-3000:]
    assert re.search(r"\d+ passed", summary) and not re.search(r"failed|skipped|error", summary), summary
