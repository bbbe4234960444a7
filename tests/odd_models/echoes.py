"""An Image Text to Text model that answers every prompt with the picture's size, and has no explain."""

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from chariot_support import ChariotModel, Image, PromptAnswer, TaskType


class Model(ChariotModel):
    task_type = TaskType.IMAGE_TEXT_TO_TEXT
    thread_safe = True

    def load(self, model_dir: Path) -> None:
        pass

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[PromptAnswer]]:
        return [
            [PromptAnswer(prompt=p, answer=f"a picture {i.width} wide and {i.height} high") for p in i.prompts or [""]]
            for i in images
        ]
