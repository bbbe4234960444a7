"""A stand-in for a GPU detector: one device runs one call at a time, and a call costs FIXED_COST_MS (the kernel
launches and the copies to and from the device) plus PER_IMAGE_MS per image, spent sleeping, as a thread that
waits for the GPU does. Thread-safe, as GPU frameworks are: calls queue for the device, not for a model copy."""

import os
import threading
import time

from chariot_support import ChariotModel, Detection, TaskType

FIXED = float(os.environ.get("FIXED_COST_MS", "20")) / 1000
PER_IMAGE = float(os.environ.get("PER_IMAGE_MS", "1")) / 1000
CALLS = os.environ.get("FIXED_COST_CALLS")  # a file to append each call's number of images to
_device = threading.Lock()


class FixedCostModel(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION
    thread_safe = True

    def predict(self, images, tensors):
        if os.environ.get("PROBE"):
            with open(os.environ["PROBE"], "a") as f:
                f.write(f"{len(images)}\n")
        with _device:
            if CALLS:
                with open(CALLS, "a") as calls:
                    calls.write(f"{len(images)}\n")
            time.sleep(FIXED + PER_IMAGE * len(images))
        return [[Detection(label="thing", score=0.9, xmin=0, ymin=0, xmax=1, ymax=1)] for _ in images]
