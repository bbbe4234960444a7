"""The settings worth trying for a model on a machine: what the model says of itself (thread_safe, copies, as the
engine states them in its settings log line) and the machine's cores and GPUs decide which."""

from __future__ import annotations

import json
from dataclasses import dataclass

# The variables a candidate sets; any of them in the tool's own environment is left out of the engines it starts,
# so that "the defaults" are the engine's defaults.
TUNED = (
    "CHARIOT_THREADS",
    "CHARIOT_MODEL_COPIES",
    "MLSERVER_PARALLEL_WORKERS",
    "CHARIOT_MAX_BATCH_SIZE",
    "CHARIOT_MAX_BATCH_WAIT_MS",
    "CHARIOT_PREDICT_INLINE",
)
BATCH_WAIT_MS = 5.0
KINDS = ("threads", "copies", "batch", "workers")  # what a candidate changes, for --only


@dataclass(frozen=True)
class Served:
    """How an engine serves, as it says in its settings log line."""

    workers: int  # 0: predict in the engine's own process
    threads: int
    copies: int
    thread_safe: bool
    max_batch_size: int
    max_batch_wait_ms: float | None = None

    @classmethod
    def from_log(cls, log: str) -> Served:
        """The last settings line of an engine's log (JSON lines); a LookupError when there is none."""
        for line in reversed(log.splitlines()):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            fields = record.get("settings") if isinstance(record, dict) else None
            if isinstance(fields, dict) and "thread_safe" in fields:
                names = ("workers", "threads", "copies", "thread_safe", "max_batch_size", "max_batch_wait_ms")
                return cls(**{name: fields.get(name) for name in names})
        raise LookupError("the engine's log holds no settings line")

    @property
    def calls_at_once(self) -> int:
        """Predicts that may run at once, over every process."""
        return max(1, self.workers) * (self.threads if self.thread_safe else self.copies)


@dataclass(frozen=True)
class Candidate:
    """One setting to try: the variables it sets (nothing set: the engine's defaults)."""

    threads: int | None = None
    copies: int | None = None
    workers: int | None = None
    batch: int | None = None
    batch_wait_ms: float | None = None

    @property
    def env(self) -> dict[str, str]:
        values = {
            "CHARIOT_THREADS": self.threads,
            "CHARIOT_MODEL_COPIES": self.copies,
            "MLSERVER_PARALLEL_WORKERS": self.workers,
            "CHARIOT_MAX_BATCH_SIZE": self.batch,
            "CHARIOT_MAX_BATCH_WAIT_MS": self.batch_wait_ms,
        }
        return {
            key: f"{value:g}" if isinstance(value, float) else str(value)
            for key, value in values.items()
            if value is not None
        }

    @property
    def label(self) -> str:
        short = {
            "CHARIOT_THREADS": "threads",
            "CHARIOT_MODEL_COPIES": "copies",
            "MLSERVER_PARALLEL_WORKERS": "workers",
            "CHARIOT_MAX_BATCH_SIZE": "batch",
            "CHARIOT_MAX_BATCH_WAIT_MS": "wait_ms",
        }
        return " ".join(f"{short[k]}={v}" for k, v in self.env.items()) or "defaults"

    @property
    def is_default(self) -> bool:
        return not self.env

    @property
    def kind(self) -> str:
        """What the candidate changes, one of KINDS: worker processes, batching, copies of the model, or threads
        alone ("defaults" for the defaults)."""
        if self.is_default:
            return "defaults"
        return "workers" if self.workers else "batch" if self.batch else "copies" if self.copies else "threads"


def candidates(
    served: Served, cpus: int, gpus: int = 0, *, engine_mb: float = 0, memory_mb: float = 0
) -> list[Candidate]:
    """What to try after the defaults (`served`: how the engine serves with them), most promising first:

    - a thread-safe model: four threads per core (a predict that waits outside the GIL: I/O, a device, native code
      that releases it);
    - a model that is not thread-safe: a copy per core, and four per core (copies waiting outside the GIL);
    - batching across requests (a call whose cost hardly grows with its images: GPUs above all);
    - worker processes, one per core with one thread each (a predict that holds the GIL: only processes run it on
      several cores at once), last: they cost the model's memory again in each, and the longest start.

    The defaults come first; settings that work out the same as one already listed are left out, and so are those
    whose copies of the engine (`engine_mb` each, as it started) would take more than half of `memory_mb`."""
    many = 4 * cpus
    tried: list[Candidate] = [Candidate()]
    if served.thread_safe:
        tried.append(Candidate(threads=many))
    else:
        tried += [Candidate(threads=max(cpus, served.threads), copies=cpus), Candidate(threads=many, copies=many)]
    batch = 16 if gpus else max(4, many)
    tried.append(Candidate(batch=batch, batch_wait_ms=BATCH_WAIT_MS))
    if cpus > 1 and not gpus:  # a GPU model is kept in one process (each worker would load it again)
        tried.append(Candidate(threads=1, workers=cpus, copies=None if served.thread_safe else 1))
    unique, seen = [], set()
    for each in tried:
        key = resolved(each, served, cpus)
        threads, copies, workers, _ = key
        too_big = memory_mb and max(1, workers) * copies * engine_mb > memory_mb / 2
        if key not in seen and not (too_big and not each.is_default):
            seen.add(key)
            unique.append(each)
    return unique


def resolved(candidate: Candidate, served: Served, cpus: int) -> tuple:
    """What a candidate works out to on this machine (threads, copies, workers, batch), for telling duplicates."""
    threads = candidate.threads or served.threads or cpus
    copies = 1 if served.thread_safe else candidate.copies or served.copies
    return threads, copies, candidate.workers or served.workers, candidate.batch or served.max_batch_size


def concurrency_levels(served: Served, cpus: int) -> list[int]:
    """Clients at once: one (the latency floor), one per core, and four per core (enough to keep many copies or a
    batch busy)."""
    return sorted({1, cpus, 4 * cpus})


def settings_env(candidate: Candidate, served: Served, *, comment: str = "") -> str:
    """The recommended settings as KEY=VALUE lines: every tuned variable, with the value the engine worked out where
    the candidate left it at its default, so that the file says the whole setting."""
    values = {
        "CHARIOT_THREADS": str(served.threads),
        "CHARIOT_MODEL_COPIES": str(served.copies),
        "MLSERVER_PARALLEL_WORKERS": str(served.workers),
        "CHARIOT_MAX_BATCH_SIZE": str(served.max_batch_size),
        **candidate.env,
    }
    if served.thread_safe and "CHARIOT_MODEL_COPIES" not in candidate.env:
        del values["CHARIOT_MODEL_COPIES"]  # a thread-safe model ignores it
    if int(values["CHARIOT_MAX_BATCH_SIZE"]) > 1:
        values.setdefault("CHARIOT_MAX_BATCH_WAIT_MS", f"{served.max_batch_wait_ms or BATCH_WAIT_MS:g}")
    lines = [f"# {line}" for line in comment.splitlines()] if comment else []
    return "\n".join([*lines, *(f"{key}={value}" for key, value in values.items())]) + "\n"
