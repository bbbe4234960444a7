"""How busy the machine was while a run was measured, apart from the run itself.

Every `interval` seconds a thread reads the CPU time the whole machine spent busy (`/proc/stat`) and the CPU time of
the processes being measured (the server and its workers, and the load generator: `/proc/<pid>/stat`); what the
machine spent beyond those is everyone else's, in CPUs (1.0 is one core kept busy). The 1-minute load average is read
with each sample. A run's figure is the median of its samples, so that a short burst of someone else's work does not
stand for the whole run.
"""

from __future__ import annotations

import os
import statistics
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
