"""Triton's statistics extension for the one model an engine serves: what its inference requests did since the engine
started, with Triton's fields and meanings, handed over after each answer in the process the transports live in, so
that requests served by any parallel worker, over REST or gRPC, are counted the same.

How the engine's stages (stages/timing.py) map onto Triton's fields, for successful requests (Triton counts the
stages of those only): `queue` is admission and queue (waiting for room, a thread or worker, a model copy, a batch),
`compute_input` is decode, `compute_infer` is predict, `compute_output` is results; `success` and `fail` count whole
requests, from their first byte to their answer written. `inference_count` counts images (each is one inference),
`execution_count` predict calls: with batching across requests, one call serves several requests, and is counted
once, with its batch's size, in `batch_stats`."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from chariot_support.stages.histograms import StageHistograms
from chariot_support.stages.timing import STAGES, RuntimeStages

ADMISSION, QUEUE, DECODE, PREDICT, RESULTS = map(STAGES.index, ("admission", "queue", "decode", "predict", "results"))
# Answered requests kept before they are counted, checked after each batch of the work after answers: memory stays
# bounded (a few MB at most) whether or not anyone reads the statistics.
FOLD_EVERY = 4096

# Durations Triton's statistics hold that the engine has no use for: no response cache (MLSERVER_CACHE_ENABLED is
# refused), so never a hit or a miss. Present at zero, as Triton gives them, for clients that read every field.
_NEVER = {"count": 0, "ns": 0}


def _duration(count: int, seconds: float) -> dict[str, int]:
    return {"count": count, "ns": round(seconds * 1e9)}


def _in_ms(count: int, milliseconds: float) -> dict[str, int]:
    return {"count": count, "ns": round(milliseconds * 1e6)}


class _Batch:
    """One batch size's predict calls: how many, and their compute stages' milliseconds."""

    __slots__ = ("count", "input", "infer", "output")

    def __init__(self):
        self.count = 0
        self.input = self.infer = self.output = 0.0


class InferenceStatistics:
    """The served model's statistics. A request the pipeline answered is handed over with `answered((stages, seconds,
    ended, runtime))` by the transport that served it, straight after its answer was written: a list's own append,
    not a Python call of ours, on every request. The rows are counted a few thousand at a time by numpy (`fold`),
    and whenever the statistics or the stage histograms are read; failures, rare, are counted one by one (`failed`,
    by the thread that does requests' work after their answers). `model_stats` reads them under that thread's lock
    (after_answer.Afterwards.snapshot)."""

    def __init__(
        self,
        model_name: str,
        version: str,
        resolve: Callable[[str], str],
        histograms: StageHistograms | None = None,
    ):
        self.model_name = model_name
        self.version = version
        self._resolve = resolve  # the served model's name for a name a client used (pipeline/data_plane.resolve)
        self._histograms = histograms  # the answered requests' stages are counted there too
        self.success = self.fail = 0
        self.success_s = self.fail_s = 0.0
        self.queue_ms = self.input_ms = self.infer_ms = self.output_ms = 0.0
        self.inferences = self.executions = 0
        self.batches: dict[int, _Batch] = {}
        self._last: float | None = None  # time.perf_counter() when the last inference ended
        # Answered requests not counted yet: (stages, seconds, ended, runtime), with the stages in stages/timing.STAGES'
        # order in milliseconds, the request's whole time in seconds, when it ended (time.perf_counter()) and what the
        # runtime measured of it (RuntimeStages; None from a runtime that does not measure).
        self._rows: list[tuple[tuple[float, ...], float, float, RuntimeStages | None]] = []
        self.answered = self._rows.append
        self._lock = threading.Lock()  # the thread after answers folds, and so do readers
        if histograms is not None:
            histograms.before_read = self.fold  # a scrape counts every request answered so far

    def fold_if_many(self) -> None:
        """Count the answered requests kept, once there are FOLD_EVERY of them (called after each batch of work after
        answers, so that what is kept stays bounded whether or not anyone reads the statistics)."""
        if len(self._rows) >= FOLD_EVERY:
            self.fold()

    def fold(self) -> None:
        """Count every answered request handed over so far."""
        with self._lock:
            if not self._rows:
                return
            rows = self._rows[:]
            del self._rows[: len(rows)]  # the same list (answered is its append), which may have grown meanwhile
            stages, seconds, ended, runtimes = zip(*rows, strict=True)
            ms = np.array(stages, dtype=np.float64)
            if self._histograms is not None:
                self._histograms.count(ms)
            sums = ms.sum(axis=0)
            self.success += len(rows)
            self.success_s += math.fsum(seconds)
            self._last = max(ended) if self._last is None else max(self._last, *ended)
            self.queue_ms += float(sums[ADMISSION] + sums[QUEUE])
            self.input_ms += float(sums[DECODE])
            self.infer_ms += float(sums[PREDICT])
            self.output_ms += float(sums[RESULTS])
            measured = [i for i, runtime in enumerate(runtimes) if runtime is not None]
            if not measured:
                return
            # images, the predict call's batch size, whether this request's call ran it (counted once, with its first)
            counts = np.array([runtimes[i][6:9] for i in measured], dtype=np.int64)
            images, batch, executed = counts[:, 0], counts[:, 1], counts[:, 2].astype(bool)
            self.inferences += int(images.sum())
            self.executions += int(executed.sum())
            ms = ms[measured]
            for size in np.unique(batch).tolist():
                of_size = batch == size
                ran = of_size & executed
                kept = self.batches.get(size)
                if kept is None:
                    kept = self.batches[size] = _Batch()
                # Every request of a batch prepared its own images and takes its own results; the call is the batch's.
                kept.input += float(ms[of_size, DECODE].sum())
                kept.output += float(ms[of_size, RESULTS].sum())
                kept.count += int(ran.sum())
                kept.infer += float(ms[ran, PREDICT].sum())

    def failed(self, name: str | None, seconds: float, ended: float) -> None:
        """One inference request to `name` (None: the served model, as the root /infer addresses it) that was not
        answered, ended at `ended` (time.perf_counter()) after `seconds`. Another model's (a name the engine does not
        serve) is not counted."""
        if name is not None and name != self.model_name and self._resolve(name) != self.model_name:
            return
        with self._lock:
            self._last = ended if self._last is None else max(self._last, ended)
            self.fail += 1
            self.fail_s += seconds

    def model_stats(self, name: str | None = None) -> dict[str, Any]:
        """The model's statistics as Triton's `$model_stat` object, named as the client named it."""
        self.fold()
        last = 0 if self._last is None else round((time.time() - (time.perf_counter() - self._last)) * 1000)
        success = self.success
        return {
            "name": name or self.model_name,
            "version": self.version,
            "last_inference": last,
            "inference_count": self.inferences,
            "execution_count": self.executions,
            "inference_stats": {
                "success": _duration(success, self.success_s),
                "fail": _duration(self.fail, self.fail_s),
                "queue": _in_ms(success, self.queue_ms),
                "compute_input": _in_ms(success, self.input_ms),
                "compute_infer": _in_ms(success, self.infer_ms),
                "compute_output": _in_ms(success, self.output_ms),
                "cache_hit": dict(_NEVER),
                "cache_miss": dict(_NEVER),
            },
            "response_stats": {},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": _in_ms(batch.count, batch.input),
                    "compute_infer": _in_ms(batch.count, batch.infer),
                    "compute_output": _in_ms(batch.count, batch.output),
                }
                for size, batch in sorted(self.batches.items())
                if batch.count
            ],
            "memory_usage": [],
        }
