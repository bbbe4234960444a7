"""An ONNX Runtime session as an engine's model wants one: on the GPU when onnxruntime-gpu sees one, else on the CPU,
with the threads the engine gives each predict (the model's `self.threads`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def onnx_session(path: Path, threads: int) -> Any:
    """An `onnxruntime.InferenceSession` of the model at `path`, whose calls use at most `threads` threads."""
    import onnxruntime  # installed by the engines that use it (`python -m chariot_support.dev.deps add`), not by all

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads  # this predict's share of the cores
    available = onnxruntime.get_available_providers()
    providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
    return onnxruntime.InferenceSession(str(path), options, providers=providers)
