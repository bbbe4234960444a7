"""The model instances predict runs on: one, shared by every call, for a thread-safe model; else independent
copies, each running one call at a time, so that a model that is not thread-safe still uses every core."""

from __future__ import annotations

import queue
import threading
import time

from chariot_support.model.base import ChariotModel


def copies_wanted(model_class: type[ChariotModel], threads: int, setting: str = "") -> int:
    """How many copies to load: one for a thread-safe model; else CHARIOT_MODEL_COPIES (`setting`) if set (a number,
    or `threads` for one per worker thread), else the model's own `copies`."""
    if model_class.thread_safe:
        return 1
    if setting:  # checked when the settings were read
        return threads if setting == "threads" else int(setting)
    copies = model_class.copies
    if copies == "threads":
        return threads
    if not isinstance(copies, int) or isinstance(copies, bool) or copies < 1:
        raise ValueError(
            f"{model_class.__name__}.copies must be a whole number of at least 1, or 'threads'; got {copies!r}"
        )
    return copies


def threads_per_call(cpus: int, calls: int) -> int:
    """The threads one predict may use (ONNX Runtime's intra-op pool, torch.set_num_threads) so that `calls`
    predicts running at once share `cpus` without oversubscribing them."""
    return max(1, cpus // max(1, calls))


class ModelCopies:
    """Hands a call a model instance and takes it back. With copies, a call waits for a free one; a copy whose call
    overran its timeout stays out until that call returns, and the engine is stuck when every copy is out so."""

    def __init__(self, instances: list[ChariotModel], shared: bool):
        self.shared = shared
        self.count = len(instances)
        self._free: queue.SimpleQueue[ChariotModel] = queue.SimpleQueue()
        for instance in instances:
            self._free.put(instance)
        self._instance = instances[0]
        self._lock = threading.Lock()
        self._overrunning = 0

    @property
    def stuck(self) -> bool:
        """Whether every copy is held by a call that overran its timeout (never for a shared instance)."""
        return not self.shared and self._overrunning >= self.count

    def acquire(self, deadline: float) -> ChariotModel | None:
        """A model instance for one call; None when no copy came free before `deadline` (time.monotonic())."""
        if self.shared:
            return self._instance
        try:
            return self._free.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None

    def release(self, instance: ChariotModel) -> None:
        if not self.shared:
            self._free.put(instance)

    def overran(self, delta: int) -> None:
        """Count a copy held past its timeout (+1), or given back by such a call (-1)."""
        with self._lock:
            self._overrunning += delta
