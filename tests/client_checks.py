"""Client checks that must not share a process with MLServer (tritonclient's protobuf names clash with MLServer's;
KServe's SDK pins clash with its packages): run by pytest in a process of their own, against an engine this process
started, which they find in ENGINE_URL, ENGINE_GRPC_ADDRESS, ENGINE_MODEL and ENGINE_TASK."""

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def run_checks(
    checks: str, engine, *, model: str, task: str, python: Path | str = sys.executable, env: dict | None = None
) -> str:
    """Run the checks file `checks` (in tests/) with `python`, with `env` over the environment that names the engine;
    fails with its output unless every check passed."""
    environment = {
        **os.environ,
        "ENGINE_URL": engine.url,
        "ENGINE_GRPC_ADDRESS": engine.grpc_address,
        "ENGINE_MODEL": model,
        "ENGINE_TASK": task,
        **(env or {}),
    }
    result = subprocess.run(
        [
            str(python),
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
