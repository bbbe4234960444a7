"""Triton's statistics extension for the one model an engine serves: what its inference requests did since the engine
started, with Triton's fields and meanings, counted after each answer (after_answer.py) in the process the transports
live in, so that requests served by any parallel worker, over REST or gRPC, are counted the same.

How the engine's stages (stages/timing.py) map onto Triton's fields, for successful requests (Triton counts the
stages of those only): `queue` is admission and queue (waiting for room, a thread or worker, a model copy, a batch),
`compute_input` is decode, `compute_infer` is predict, `compute_output` is results; `success` and `fail` count whole
requests, from their first byte to their answer written. `inference_count` counts images (each is one inference),
`execution_count` predict calls: with batching across requests, one call serves several requests, and is counted
once, with its batch's size, in `batch_stats`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from chariot_support.stages.timing import RuntimeStages

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
    """The served model's statistics. `record` is called by the thread that does requests' work after their answers;
    `model_stats` reads them under that thread's lock (after_answer.Afterwards.snapshot)."""

    def __init__(
        self,
        model_name: str,
        version: str,
        resolve: Callable[[str], str],
        answered: Callable[[tuple[float, ...]], object] | None = None,
    ):
        self.model_name = model_name
        self.version = version
        self._resolve = resolve  # the served model's name for a name a client used (pipeline/data_plane.resolve)
        self._answered = answered  # handed each answered request's stages too (the stage histograms)
        self.success = self.fail = 0
        self.success_s = self.fail_s = 0.0
        self.queue_ms = self.input_ms = self.infer_ms = self.output_ms = 0.0
        self.inferences = self.executions = 0
        self.batches: dict[int, _Batch] = {}
        self._last: float | None = None  # time.perf_counter() when the last inference ended

    def record(
        self,
        name: str | None,
        ok: bool,
        seconds: float,
        ended: float,
        stages: tuple[float, ...] | None,
        runtime: RuntimeStages | None,
    ) -> None:
        """One inference request to `name` (None: the served model, as the root /infer addresses it), ended at
        `ended` (time.perf_counter()) after `seconds`: answered (`ok`), with its `stages` (stages/timing.STAGES,
        milliseconds) and what the runtime measured of it, or failed. Another model's (a name the engine does not
        serve) is not counted."""
        if name is not None and name != self.model_name and self._resolve(name) != self.model_name:
            return
        self._last = ended
        if not ok:
            self.fail += 1
            self.fail_s += seconds
            return
        self.success += 1
        self.success_s += seconds
        if stages is None:
            return
        if self._answered is not None:
            self._answered(stages)
        _, admission, _, queue, decode, predict, results, _ = stages
        self.queue_ms += admission + queue
        self.input_ms += decode
        self.infer_ms += predict
        self.output_ms += results
        if runtime is None:
            return
        self.inferences += runtime.images
        batch = self.batches.get(runtime.batch)
        if batch is None:
            batch = self.batches[runtime.batch] = _Batch()
        # Every request of a batch prepared its own images and takes its own results; the call is the batch's one.
        batch.input += decode
        batch.output += results
        if runtime.executed:
            self.executions += 1
            batch.count += 1
            batch.infer += predict

    def model_stats(self, name: str | None = None) -> dict[str, Any]:
        """The model's statistics as Triton's `$model_stat` object, named as the client named it."""
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
