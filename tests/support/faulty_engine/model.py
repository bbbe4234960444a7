"""A model whose predict goes wrong in the way the `fault` request parameter asks."""

import os
import threading
import time

from chariot_support import ChariotModel, Detection, TaskType


class FaultyModel(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION
    # Both locking regimes must survive a hung predict; the tests start one engine of each.
    thread_safe = os.environ.get("FAULTY_THREAD_SAFE") == "1"

    def load(self, model_dir):
        time.sleep(float(os.environ.get("FAULTY_LOAD_SECONDS", "0")))  # a model that takes its time to load

    def predict(self, images, tensors):
        parameters = images[0].parameters
        fault = parameters.get("fault")
        if fault == "raise":
            raise RuntimeError("the GPU caught fire")
        if fault == "missing-field":
            return [[{"label": "cat", "score": 0.5, "xmin": 1, "xmax": 2, "ymin": 1}] for _ in images]
        if fault == "too-few-lists":
            return []
        if fault == "score-out-of-range":
            return [
                [Detection(label="cat", score=0.5, xmin=0, xmax=1, ymin=0, ymax=1)],
                [{"label": "cat", "score": 7, "xmin": 0, "xmax": 1, "ymin": 0, "ymax": 1}],
            ]
        if fault == "sleep":  # slow but well-behaved: answers after `seconds`
            time.sleep(float(parameters.get("seconds", 2)))
        if fault == "whoami":  # which copy of the model answered, and how many threads each predict may use
            time.sleep(float(parameters.get("seconds", 0)))
            return [[Detection(label=f"{id(self)}/{self.threads}", score=0.9, xmin=1, xmax=5, ymin=2, ymax=6)]]
        if fault == "span":  # which copy answered, and when its predict began and ended, by the engine's clock
            began = time.monotonic()
            time.sleep(float(parameters.get("seconds", 0)))
            label = f"{id(self)}/{self.threads}/{began!r}/{time.monotonic()!r}"
            return [[Detection(label=label, score=0.9, xmin=1, xmax=5, ymin=2, ymax=6)]]
        if fault == "thread":  # the thread predict runs on
            return [[Detection(label=threading.current_thread().name, score=0.9, xmin=1, xmax=5, ymin=2, ymax=6)]]
        if (
            fault == "native"
        ):  # lines written straight to fds 1 and 2, as C code and a real LiteRT interpreter write them
            from native_writers import start_interpreter, write_native_lines

            start_interpreter()
            write_native_lines(parameters.get("tag", ""))
        if fault == "segfault":  # native code that crashes the process
            import ctypes

            ctypes.string_at(0)
        if fault == "hang":  # a predict that, as far as any request can wait, never returns
            time.sleep(float(parameters.get("seconds", 3600)))
        return [[Detection(label="cat", score=0.9, xmin=1, xmax=5, ymin=2, ymax=6)] for _ in images]
