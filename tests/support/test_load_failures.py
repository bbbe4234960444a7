"""A model that cannot load stops the engine with a non-zero exit and its own error first, and MODEL_DIR is named
when it is missing; an engine whose model loads says where its files came from."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from chariot_support.dev.testing import free_ports, run_demo_engine

HERE = Path(__file__).parent


def start_unloadable(**env: str) -> tuple[int, str]:
    """Run the engine of a model whose load fails until it exits by itself; its exit code and log."""
    http, grpc, metrics = free_ports(3)
    environment = {
        **os.environ,
        "MLSERVER_HOST": "127.0.0.1",
        "MLSERVER_HTTP_PORT": str(http),
        "MLSERVER_GRPC_PORT": str(grpc),
        "MLSERVER_METRICS_PORT": str(metrics),
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        **env,
    }
    process = subprocess.run(
        [sys.executable, "-m", "unloadable_engine"], env=environment, capture_output=True, text=True, timeout=60
    )
    return process.returncode, process.stdout + process.stderr


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_model_that_cannot_load_stops_the_engine_with_its_own_error(workers):
    code, log = start_unloadable(MLSERVER_PARALLEL_WORKERS=workers)
    assert code == 1, log[-3000:]
    assert "UnloadableModel.load failed: RuntimeError: the weights are corrupt" in log
    assert "the engine stops: UnloadableModel.load failed" in log
    assert "AttributeError" not in log, "tearing down what never started raised a second error"
    if workers == "0":
        first_error = log.index('"level": "error"')
        assert log.index("the weights are corrupt") < log.index("Some of the models failed") and (
            "the weights are corrupt" in log[first_error : first_error + 400]
        ), "the model's own error comes first"
        assert 'raise RuntimeError(\\"the weights are corrupt\\")' in log, "with its traceback"


def test_a_missing_model_file_names_the_folder_and_the_variable(tmp_path):
    code, log = start_unloadable(UNLOADABLE="missing-file", MODEL_DIR=str(tmp_path / "nowhere"))
    assert code == 1, log[-3000:]
    assert "FileNotFoundError" in log, log[-3000:]
    assert f"MODEL_DIR is {tmp_path / 'nowhere'}, which does not exist" in log
    assert f"The model looks for its files in MODEL_DIR ({tmp_path / 'nowhere'}, which does not exist)" in log
    assert "set MODEL_DIR to the folder that holds them" in log


def test_onnx_runtimes_own_missing_file_error_names_the_folder_too(tmp_path):
    """ONNX Runtime says a file is missing with its NoSuchFile, not FileNotFoundError: the engine tells it apart by
    name (onnxruntime need not be installed) and says the same as above, which the engine logs on the same path."""
    from unloadable_engine.model import UnloadableModel

    from chariot_support import onnx_session
    from chariot_support.runtime.runtime import load_failure

    nowhere = tmp_path / "nowhere"
    with pytest.raises(Exception) as raised:
        onnx_session(nowhere / "model.onnx", 1)
    message = load_failure(UnloadableModel, nowhere, raised.value)
    assert message.startswith("UnloadableModel.load failed: NoSuchFile: "), message
    assert f"The model looks for its files in MODEL_DIR ({nowhere}, which does not exist)" in message
    assert message.endswith("set MODEL_DIR to the folder that holds them")


def test_the_engine_says_where_the_model_files_came_from():
    with tempfile.TemporaryDirectory() as folder:
        with run_demo_engine("Object Detection", env={"MODEL_DIR": folder}) as engine:
            log = engine.log()
        assert f"from {folder}" in log and "does not exist" not in log
    with run_demo_engine("Object Detection", env={"MODEL_DIR": "/no/such/folder"}) as engine:
        log = engine.log()
    assert "MODEL_DIR is /no/such/folder, which does not exist" in log
    assert "without files (/no/such/folder does not exist)" in log
