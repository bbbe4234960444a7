"""A model whose load fails as the UNLOADABLE environment variable says: its own error, a missing file, or a missing
ONNX model (ONNX Runtime's own error for it)."""

import os
from pathlib import Path

from chariot_support import ChariotModel, TaskType, onnx_session


class UnloadableModel(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION

    def load(self, model_dir: Path) -> None:
        if os.environ.get("UNLOADABLE") == "missing-file":
            (model_dir / "weights.onnx").read_bytes()
        if os.environ.get("UNLOADABLE") == "missing-onnx":
            onnx_session(model_dir / "model.onnx", self.threads)
        raise RuntimeError("the weights are corrupt")

    def predict(self, images, tensors):
        return [[] for _ in images]
