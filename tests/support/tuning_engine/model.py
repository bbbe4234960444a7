"""Three detectors whose best settings are known, each answering every picture with one box:

- Sleeper: not thread-safe, waits 20 ms outside the GIL per call (a network call, a device): more copies help.
- GilHolder: thread-safe, but spends 15 ms of pure-Python work holding the GIL per call: more threads do not help,
  worker processes do, one per core.
- OneDevice: 20 ms a call whatever the number of images, one call at a time on the whole machine (a lock file in
  MODEL_DIR stands for a GPU): only batching across requests helps.

And Fussy, which cannot be tuned: it refuses pictures narrower than 100 pixels (a 400) and fails on the rest.
"""

import fcntl
import time

from chariot_support import BadRequest, ChariotModel, Detection, TaskType

CALL_SECONDS = 0.02
GIL_SECONDS = 0.015


def boxes(images):
    return [[Detection(label="thing", score=0.9, xmin=0, ymin=0, xmax=1, ymax=1)] for _ in images]


class Sleeper(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION

    def predict(self, images, tensors):
        time.sleep(CALL_SECONDS)
        return boxes(images)


class GilHolder(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION
    thread_safe = True

    def predict(self, images, tensors):
        # This thread's own CPU time: two threads at once share the GIL, so each takes twice as long.
        end = time.thread_time() + GIL_SECONDS * len(images)
        while time.thread_time() < end:
            pass
        return boxes(images)


class OneDevice(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION
    thread_safe = True

    def load(self, model_dir):
        self.lock_path = model_dir / "device.lock"

    def predict(self, images, tensors):
        with open(self.lock_path, "a") as device:  # a file of its own: flock then excludes this process's threads too
            fcntl.flock(device, fcntl.LOCK_EX)
            time.sleep(CALL_SECONDS)
        return boxes(images)


class Fussy(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION

    def predict(self, images, tensors):
        for image in images:
            if image.width < 100:
                raise BadRequest(f"{image.name} is {image.width} pixels wide; this model takes 100 or more")
        raise RuntimeError("the model's weights are missing")


MODELS = {"sleeper": Sleeper, "gil": GilHolder, "batch": OneDevice, "fussy": Fussy}
