"""A model whose predict goes wrong in the way the `fault` request parameter asks."""

from chariot_support import ChariotModel, Detection, TaskType


class FaultyModel(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION

    def predict(self, images, tensors):
        fault = images[0].parameters.get("fault")
        if fault == "raise":
            raise RuntimeError("the GPU caught fire")
        if fault == "missing-field":
            return [[{"label": "cat", "score": 0.5, "xmin": 1, "xmax": 2, "ymin": 1}] for _ in images]
        if fault == "too-few-lists":
            return []
        if fault == "score-out-of-range":
            return [[Detection(label="cat", score=0.5, xmin=0, xmax=1, ymin=0, ymax=1)], [{"label": "cat", "score": 7, "xmin": 0, "xmax": 1, "ymin": 0, "ymax": 1}]]
        return [[Detection(label="cat", score=0.9, xmin=1, xmax=5, ymin=2, ymax=6)] for _ in images]
