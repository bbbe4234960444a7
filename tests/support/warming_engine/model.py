"""A model whose first predict on each copy takes FIRST_CALL_SECONDS (as a GPU model's first call starts CUDA and
picks its kernels), which logs, prints and writes to stderr in predict, as native code does too (a LiteRT interpreter
at load, C's write(2) at import and in predict), and answers with the process and the GPUs it sees. With WARMING_FAIL set, its
first predict raises instead."""

import logging
import os
import sys
import time

from native_writers import start_interpreter, write_native_lines

from chariot_support import ChariotModel, Detection, TaskType

FIRST_CALL_SECONDS = 1.5
log = logging.getLogger("my_model")
write_native_lines("import")  # as a model's native libraries may, as they are imported


class FirstCallSlowModel(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION

    def load(self, model_dir):
        self.calls = 0
        self.interpreter = start_interpreter()  # LiteRT writes its own line to fd 2

    def predict(self, images, tensors):
        self.calls += 1
        if self.calls == 1:
            if os.environ.get("WARMING_FAIL"):
                raise RuntimeError("CUDA error: out of memory")
            time.sleep(FIRST_CALL_SECONDS)
        names = ",".join(i.name for i in images)
        log.info("logged for %s", names)
        print(f"printed for {names}")
        sys.stderr.write(f"written to stderr for {names}\n")
        write_native_lines(names)
        label = f"{os.getpid()}/{os.environ.get('CUDA_VISIBLE_DEVICES', '-')}/{self.calls}"
        return [[Detection(label=label, score=0.9, xmin=1, xmax=5, ymin=2, ymax=6)] for _ in images]
