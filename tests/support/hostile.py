"""Helpers for the hostile-traffic tests: black PNG files of any size, and what /proc says about an engine."""

import base64
import functools
import struct
import threading
import time
import zlib
from pathlib import Path

import requests

HERE = Path(__file__).parent


@functools.cache
def black_png(side: int) -> str:
    """Base64 of a black side x side PNG: a few hundred KB of file that decodes to side² x 3 bytes. Written here
    (rows of zeros deflated run-length) rather than by OpenCV, whose level 9 took 3.6-5 CPU-s for a 10,000-pixel
    side, where this takes under one."""
    row = bytes(1 + 3 * side)  # filter type 0, then the row's pixels
    deflate = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_RLE)
    pixels = b"".join([deflate.compress(row) for _ in range(side)] + [deflate.flush()])

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)  # 8-bit RGB, not interlaced
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode("ascii")


def png_request(side: int, count: int, **parameters) -> dict:
    inputs = [
        {"name": f"image-{i}", "shape": [1], "datatype": "BYTES", "data": [black_png(side)]} for i in range(count)
    ]
    for tensor in inputs:
        if parameters:
            tensor["parameters"] = parameters
    return {"inputs": inputs}


def status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line)


def peak_rss_mib(pid: int) -> float:
    """The most memory the process has held at once (VmHWM), in MiB."""
    return int(status(pid)["VmHWM"].split()[0]) / 1024


def reset_peak(pid: int) -> None:
    """Start the process's VmHWM again from its present RSS, so that a test on a shared engine reads its own peak."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def healthy_and_reset(engine):
    """The shared engine `engine`, checked still running and live before a test attacks it, its peak RSS reset."""
    assert engine.alive(), f"the shared engine was stopped by an earlier test; log:\n{engine.log()[-3000:]}"
    assert requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code == 200
    reset_peak(engine.process.pid)
    return engine


def rss_mib(pid: int) -> float:
    return int(status(pid)["VmRSS"].split()[0]) / 1024


def threads(pid: int) -> int:
    return int(status(pid)["Threads"])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s


class _Watch:
    """A daemon thread that calls `_check` every `interval` seconds while the block runs, until it returns True."""

    interval = 0.05

    def __init__(self):
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._done.wait(self.interval):
            if self._check():
                return

    def _check(self) -> bool:
        raise NotImplementedError

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()


class RSSGuard(_Watch):
    """Kill the engine (by its pid) if it holds more than `limit_mib`, so that a test of an engine without
    admission fails instead of taking the machine down; `tripped` says whether it had to."""

    def __init__(self, process, limit_mib: float):
        super().__init__()
        self.process = process
        self.limit_mib = limit_mib
        self.tripped = False

    def _check(self) -> bool:
        try:
            if rss_mib(self.process.pid) > self.limit_mib:
                self.tripped = True
                self.process.kill()
                return True
        except (FileNotFoundError, ProcessLookupError, KeyError):
            return True
        return False


class HealthProbe(_Watch):
    """Asks /v2/health/live from a new connection every 50 ms while the block runs; `worst` is the slowest answer,
    a failed or timed-out probe counting as its 10 s timeout, `failures` says what went wrong, and `probes` how many
    were asked."""

    def __init__(self, engine):
        super().__init__()
        self.engine = engine
        self.worst = 0.0
        self.failures: list[str] = []
        self.probes = 0

    def _check(self) -> bool:
        self.probes += 1
        started = time.monotonic()
        try:
            reply = requests.get(f"{self.engine.url}/v2/health/live", timeout=10)
            if reply.status_code != 200:
                self.failures.append(f"health answered {reply.status_code}")
            took = time.monotonic() - started
        except requests.RequestException as error:
            self.failures.append(f"{type(error).__name__}: {error}")
            took = 10.0
        self.worst = max(self.worst, took)
        return False


def wait_until(predicate, timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
