"""An ONNX Runtime session as an engine's model wants one: on the GPU when onnxruntime-gpu sees one, else on the CPU,
with the threads the engine gives each predict (the model's `self.threads`), which sleep between calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def onnx_session(path: Path, threads: int) -> Any:
    """An `onnxruntime.InferenceSession` of the model at `path`, whose calls use at most `threads` threads."""
    import onnxruntime  # installed by the engines that use it (`uv add 'onnxruntime==1.32.0'`), not by all

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads  # this predict's share of the cores
    # ONNX Runtime's threads spin, waiting for work, after each piece of a call: CPU the engine's other requests could
    # use. Measured on PaddleOCR's detector and recogniser, reading a page with 2 threads on 2 cores: 1.02 CPU-s and
    # 0.52 s a page spinning, 0.83 CPU-s and 0.47 s not.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    available = onnxruntime.get_available_providers()
    providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
    return onnxruntime.InferenceSession(str(path), options, providers=providers)
