"""The machine a run is measured on: its cores and GPUs, a process tree's CPU time and peak memory, and how busy the
machine was while a run was measured, apart from the run itself.

Every `interval` seconds a thread reads the CPU time the whole machine spent busy (`/proc/stat`) and the CPU time of
the processes being measured (the server and its workers, and the load generator: `/proc/<pid>/stat`); what the
machine spent beyond those is everyone else's, in CPUs (1.0 is one core kept busy). The 1-minute load average is read
with each sample. A run's figure is the median of its samples, so that a short burst of someone else's work does not
stand for the whole run.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
# The busy columns of /proc/stat's cpu line: user, nice, system, irq, softirq, steal (guest time is already counted
# in user and nice); idle and iowait are not busy.
_BUSY = (0, 1, 2, 5, 6, 7)


def machine_busy_ticks(stat: str | None = None) -> int:
    """The CPU time, in clock ticks, every CPU of the machine has spent busy since boot."""
    stat = stat if stat is not None else Path("/proc/stat").read_text()
    fields = stat.splitlines()[0].split()
    assert fields[0] == "cpu", f"unexpected first line of /proc/stat: {fields[:2]}"
    values = [int(v) for v in fields[1:]]
    return sum(values[i] for i in _BUSY if i < len(values))


def process_ticks(pids: Iterable[int]) -> dict[int, int]:
    """The CPU time (user and system, all threads), in clock ticks, of each of the processes still there."""
    ticks = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks[pid] = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks


def ticks_between(before: dict[int, int], after: dict[int, int]) -> int:
    """The measured processes' ticks between two readings: a process new in `after` counts from zero (it started in
    between); one gone from `after` drops out, its last ticks falling to others for that one interval."""
    return sum(ticks - before.get(pid, 0) for pid, ticks in after.items())


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def others_cpus(machine_ticks: int, measured_ticks: int, seconds: float) -> float:
    """CPUs the machine kept busy beyond the measured processes over `seconds`: both tick counts are differences
    over the same span. Never below 0: the two counts are read a moment apart, so on a quiet machine the measured
    processes' can pass the machine's by a tick."""
    return max(machine_ticks - measured_ticks, 0) / TICKS / seconds if seconds > 0 else 0.0


class LoadProbe:
    """Samples the machine's other load while a run is measured: `start()`, then `stop()` for the run's figures."""

    def __init__(self, pids: Callable[[], list[int]], interval: float = 0.2):
        self._pids, self._interval = pids, interval
        self._others: list[float] = []
        self._loads: list[float] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _snapshot(self) -> tuple[float, int, dict[int, int]]:
        return time.monotonic(), machine_busy_ticks(), process_ticks(self._pids())

    def start(self) -> None:
        self._first = self._last = self._snapshot()
        self._thread.start()

    def _sample(self) -> None:
        while not self._stopping.wait(self._interval):
            now = self._snapshot()
            then, self._last = self._last, now
            measured = ticks_between(then[2], now[2])
            self._others.append(others_cpus(now[1] - then[1], measured, now[0] - then[0]))
            self._loads.append(load_average())

    def stop(self, measured_seconds: float) -> dict:
        """The run's figures, given the CPU seconds the measured processes spent over it (the server's from /proc,
        the load generator's own count: it has exited by now). `others_cpus` is the median of the samples, and
        `others_cpus_run` the whole run's: the machine's busy time less `measured_seconds`, over the run's length;
        a run shorter than one interval has no samples and takes the whole run's figure as its median."""
        self._stopping.set()
        self._thread.join()
        now = time.monotonic()
        span = now - self._first[0]
        whole = (machine_busy_ticks() - self._first[1]) / TICKS
        run = max(whole - measured_seconds, 0.0) / span if span > 0 else 0.0
        return {
            "others_cpus": statistics.median(self._others) if self._others else run,
            "others_cpus_run": run,
            "load_1m": statistics.median(self._loads) if self._loads else load_average(),
            "load_samples": len(self._others),
        }


def process_tree(root: int) -> list[int]:
    """`root` and every process it started, and theirs (an engine's parallel workers), as long as they are there."""
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            pass
    return found


def cpu_seconds(pids: Iterable[int]) -> float:
    """The CPU time (user and system, all threads) the processes still there have spent, in seconds."""
    return sum(process_ticks(pids).values()) / TICKS


def reset_peak_rss(pids: Iterable[int]) -> None:
    """Start each process's peak resident memory (VmHWM) again from its present size."""
    for pid in pids:
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            pass


def peak_rss_mb(pids: Iterable[int]) -> float:
    """The processes' peak resident memory (VmHWM) added up, in MiB."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return total / 1024


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """The CPUs this process may run on: its affinity, less where a container's CPU quota (cgroup v2) allows fewer."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = cgroup.read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cpus


def _nvidia_smi(*query: str) -> list[list[str]]:
    """Rows of nvidia-smi's CSV answer to `query`; none when there is no nvidia-smi or it fails."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", *query, "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode:
        return []
    return [[cell.strip() for cell in line.split(",")] for line in out.stdout.splitlines() if line.strip()]


def gpus() -> list[str]:
    """Each GPU nvidia-smi sees, as "name, N MiB"; none without nvidia-smi."""
    return [f"{name}, {memory} MiB" for name, memory, *_ in _nvidia_smi("--query-gpu=name,memory.total")]


def gpu_memory_mb(pids: Iterable[int]) -> float | None:
    """GPU memory the processes hold now, in MiB, by nvidia-smi; None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    wanted = {str(p) for p in pids}
    rows = _nvidia_smi("--query-compute-apps=pid,used_memory")
    return float(sum(float(used) for pid, used, *_ in rows if pid in wanted and used.replace(".", "").isdigit()))


def describe() -> dict:
    """The machine in a few words, for a report: its CPU model, usable CPUs, memory and GPUs."""
    model = platform.processor() or platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), model)
    except OSError:
        pass
    try:
        memory = int(Path("/proc/meminfo").read_text().split()[1]) / 1024 / 1024
    except (OSError, ValueError, IndexError):
        memory = 0.0
    return {"cpu": model, "cpus": usable_cpus(), "cpu_count": os.cpu_count(), "memory_gib": memory, "gpus": gpus()}
