"""One share of the GPUs per parallel worker: with several GPUs visible to the engine and MLSERVER_PARALLEL_WORKERS,
each worker process starts with CUDA_VISIBLE_DEVICES naming only its own, so that a model taking `cuda` lands on a
different GPU in each worker instead of GPU 0 in all of them.

The GPUs the engine sees: CUDA_VISIBLE_DEVICES when set, else NVIDIA_VISIBLE_DEVICES (what the NVIDIA container
runtime gave the container: `all`, `none`, `void`, indices or UUIDs), else what `nvidia-smi -L` lists. Workers take
contiguous shares, the first ones one more GPU each when the count does not divide; with fewer GPUs than workers, the
workers share them in turn. The share is set in the worker's environment as it is started, before anything in it
(the model's imports included) can start CUDA.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("chariot_support")

_UUID = re.compile(r"^(GPU|MIG)-", re.IGNORECASE)
_LISTED = re.compile(r"^GPU (\d+):", re.MULTILINE)


def nvidia_smi_gpus() -> list[str]:
    """The GPUs `nvidia-smi -L` lists, by index; none where it is missing or fails."""
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return _LISTED.findall(listed.stdout) if listed.returncode == 0 else []


def visible_gpus(environ: Mapping[str, str], listed: Callable[[], list[str]] = nvidia_smi_gpus) -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (indices as this process counts them, or
    UUIDs)."""
    cuda = environ.get("CUDA_VISIBLE_DEVICES")
    if cuda is not None:
        return [d.strip() for d in cuda.split(",") if d.strip()]
    nvidia = environ.get("NVIDIA_VISIBLE_DEVICES")
    if nvidia is not None:
        value = nvidia.strip().lower()
        if value in ("", "none", "void"):
            return []
        if value == "all":
            return listed()
        given = [d.strip() for d in nvidia.split(",") if d.strip()]
        # Host indices: the container counts its GPUs from 0. UUIDs name the same GPU everywhere.
        return [d if _UUID.match(d) else str(i) for i, d in enumerate(given)]
    return listed()


def split(gpus: list[str], workers: int) -> list[list[str]]:
    """Each worker's GPUs: contiguous shares, the first `len(gpus) % workers` workers one more each; with fewer GPUs
    than workers, worker i takes GPU i mod the count. No shares without GPUs or workers."""
    if not gpus or workers < 1:
        return []
    if len(gpus) < workers:
        return [[gpus[i % len(gpus)]] for i in range(workers)]
    size, extra = divmod(len(gpus), workers)
    shares, start = [], 0
    for i in range(workers):
        end = start + size + (1 if i < extra else 0)
        shares.append(gpus[start:end])
        start = end
    return shares


def describe(gpus: list[str], shares: list[list[str]]) -> str:
    """The split in words, for the settings line; '' when there is none."""
    if not shares:
        return ""
    count = f"{len(gpus)} GPU{'' if len(gpus) == 1 else 's'} over {len(shares)} worker{'' if len(shares) == 1 else 's'}"
    each = ", ".join(f"worker {i} gets {','.join(share)}" for i, share in enumerate(shares))
    if len(gpus) < len(shares):
        note = " (fewer GPUs than workers: workers share a GPU)"
    elif len(gpus) % len(shares):
        note = " (the count does not divide: the first workers get one more)"
    else:
        note = ""
    return f"{count}: {each}{note}"


@dataclass
class WorkerDevices:
    """Hands each parallel worker its share as it starts (CUDA_VISIBLE_DEVICES in its environment): workers in order
    at start-up, and a replacement the share of the worker it replaces."""

    gpus: list[str]
    shares: list[list[str]]
    _held: dict[int, tuple[int, Any]] = field(default_factory=dict)  # pid -> (share, process)

    @classmethod
    def detect(cls, workers: int, environ: Mapping[str, str] | None = None) -> WorkerDevices:
        gpus = visible_gpus(os.environ if environ is None else environ) if workers > 0 else []
        return cls(gpus, split(gpus, workers))

    @property
    def description(self) -> str:
        return describe(self.gpus, self.shares)

    def by_worker(self) -> dict[str, list[str]]:
        return {str(i): share for i, share in enumerate(self.shares)}

    def start(self, spawn: Callable[[], Any]) -> Any:
        """Start a worker with `spawn` (which returns its multiprocessing.Process) inside its share's environment."""
        warn_cuda_in_parent()
        if not self.shares:
            return spawn()
        taken = {share for share, process in self._held.values() if process.exitcode is None}
        index = min(i for i in range(len(self.shares)) if i not in taken) if len(taken) < len(self.shares) else 0
        before = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(self.shares[index])
        try:
            process = spawn()
        finally:
            if before is None:
                del os.environ["CUDA_VISIBLE_DEVICES"]
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = before
        self._held = {pid: held for pid, held in self._held.items() if held[1].exitcode is None}
        self._held[process.pid] = (index, process)
        return process


_warned = False


def cuda_in_parent() -> bool:
    """Whether torch, imported in this process, has started CUDA here."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        return bool(cuda is not None and cuda.is_initialized())
    except Exception:
        return False


def warn_cuda_in_parent() -> None:
    """Say so, once, when the engine's main process started CUDA before it starts a parallel worker."""
    global _warned
    if _warned or not cuda_in_parent():
        return
    _warned = True
    logger.error(
        "CUDA was started in the engine's main process before its parallel workers: the model runs in the workers,"
        " so the main process holds a CUDA context (GPU memory on every device it touched) for nothing, and a process"
        " forked from it cannot use CUDA (fork and CUDA do not mix). Keep CUDA out of model.py's import-time code"
        " (no torch.cuda calls or .to('cuda') at module level): start it in load()"
    )
