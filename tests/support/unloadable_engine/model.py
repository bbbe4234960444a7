"""A model whose load fails as the UNLOADABLE environment variable says: its own error, or a missing file."""

import os
from pathlib import Path

from chariot_support import ChariotModel, TaskType


class UnloadableModel(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION

    def load(self, model_dir: Path) -> None:
        if os.environ.get("UNLOADABLE") == "missing-file":
            (model_dir / "weights.onnx").read_bytes()
        raise RuntimeError("the weights are corrupt")

    def predict(self, images, tensors):
        return [[] for _ in images]
