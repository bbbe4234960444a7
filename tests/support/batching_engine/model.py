"""A thread-safe detector that answers each image with what identifies it, and records every predict call: the
identity of its images and the names of its tensors (in CALLS, and as JSON lines in $BATCHING_CALLS when set)."""

import json
import os
import threading
import time

from chariot_support import ChariotModel, Classification, Detection, PromptAnswer, TaskType

CALLS: list[dict] = []
_lock = threading.Lock()


def identity(image) -> str:
    """The first pixel's red value (the tests send images of one colour each) and the image's `tag` parameter."""
    return f"{int(image.pixels[0, 0, 0])}-{image.parameters.get('tag')}"


def record(images, tensors) -> None:
    call = {"images": [identity(i) for i in images], "tensors": sorted(tensors)}
    with _lock:
        CALLS.append(call)
        if path := os.environ.get("BATCHING_CALLS"):
            with open(path, "a") as calls:
                calls.write(json.dumps(call) + "\n")


class RecordingModel(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION
    thread_safe = True

    def predict(self, images, tensors):
        record(images, tensors)
        faults = {i.parameters.get("fault") for i in images}
        time.sleep(max(float(i.parameters.get("seconds", 0)) for i in images))
        if "raise" in faults:
            raise RuntimeError("the GPU caught fire")
        answers = [
            [
                Detection(label=f"image-{identity(i)}", score=0.9, xmin=0, ymin=0, xmax=1, ymax=1),
                Detection(label=f"call-of-{len(images)}", score=0.4, xmin=0, ymin=0, xmax=1, ymax=1),
            ]
            for i in images
        ]
        if "too-few-lists" in faults:
            return answers[:-1]
        return answers


class RecordingClassifier(ChariotModel):
    """Two labels per image: what identifies it (0.9), and the size of the call (0.4)."""

    task_type = TaskType.IMAGE_CLASSIFICATION
    thread_safe = True

    def predict(self, images, tensors):
        record(images, tensors)
        return [
            [
                Classification(label=f"call-of-{len(images)}", score=0.4),
                Classification(label=f"image-{identity(i)}", score=0.9),
            ]
            for i in images
        ]


class RecordingAnswerer(ChariotModel):
    """Answers each of an image's own prompts with what identifies the image."""

    task_type = TaskType.IMAGE_TEXT_TO_TEXT
    thread_safe = True

    def predict(self, images, tensors):
        record(images, tensors)
        return [[PromptAnswer(prompt=p, answer=f"{identity(i)} of {len(images)}") for p in i.prompts] for i in images]
