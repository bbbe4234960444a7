"""The load: the pictures as Chariot sends them (one chariot-v2-kserve request of one image each), sent by a number of
clients at once over kept-alive loopback connections, and what came back: requests answered, latencies, errors."""

from __future__ import annotations

import base64
import http.client
import json
import math
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PICTURES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


class Refused(Exception):
    """What the tool cannot measure honestly, and why: the report says so instead of a recommendation (with the
    points measured before it, if any)."""

    def __init__(self, reason: str, points: list | None = None):
        super().__init__(reason)
        self.reason, self.points = reason, points or []


def picture_files(folder: Path) -> list[Path]:
    """The pictures in `folder` (not its sub-folders), by name; a Refused when there are none."""
    if not folder.is_dir():
        raise Refused(f"--images {folder}: no such folder")
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in PICTURES)
    if not found:
        raise Refused(f"--images {folder}: no pictures in it ({', '.join(PICTURES)})")
    return found


def request_body(picture: Path) -> bytes:
    """One chariot-v2-kserve request for the picture: its file in base64, as Chariot sends it."""
    data = base64.b64encode(picture.read_bytes()).decode("ascii")
    tensor = {"name": picture.name, "shape": [1], "datatype": "BYTES", "data": [data]}
    return json.dumps({"inputs": [tensor]}).encode()


@dataclass
class Outcome:
    """What one run of the load measured."""

    seconds: float
    latencies: list[float] = field(default_factory=list)  # of the requests answered 200, in seconds
    errors: list[str] = field(default_factory=list)

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds > 0 else 0.0

    def percentile_ms(self, q: float) -> float:
        """The latency below which `q` percent of the answered requests came, in milliseconds (nearest rank)."""
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1] * 1000


def send(port: int, path: str, body: bytes, timeout: float = 120.0) -> tuple[int, bytes]:
    """One request on a connection of its own: the status and the answer's body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def drive(port: int, path: str, bodies: list[bytes], clients: int, seconds: float, warmup: float = 0.0) -> Outcome:
    """`clients` threads, each on its own kept-alive connection, send the bodies in turn until `seconds` have passed
    (after `warmup` seconds whose answers are not counted); a request in flight at the end is waited for."""
    start = time.perf_counter()
    counting_from = start + warmup
    stop_at = counting_from + seconds
    outcome = Outcome(seconds=seconds)
    lock = threading.Lock()

    def client(offset: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        i = offset
        try:
            while (sent := time.perf_counter()) < stop_at:
                body = bodies[i % len(bodies)]
                i += 1
                try:
                    connection.request("POST", path, body, {"Content-Type": "application/json"})
                    response = connection.getresponse()
                    answer = response.read()
                except (OSError, http.client.HTTPException) as error:
                    connection.close()
                    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                    failure, ok = f"{type(error).__name__}: {error}", False
                else:
                    ok = response.status == 200
                    failure = f"HTTP {response.status}: {answer[:300].decode(errors='replace')}"
                if sent < counting_from:
                    continue
                with lock:
                    if ok:
                        outcome.latencies.append(time.perf_counter() - sent)
                    else:
                        outcome.errors.append(failure)
        finally:
            connection.close()

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    outcome.seconds = max(time.perf_counter(), stop_at) - counting_from
    return outcome


def summary_errors(errors: list[str]) -> str:
    """The commonest error and how many there were, for a table cell."""
    if not errors:
        return ""
    common = statistics.mode(errors)
    return f"{len(errors)} ({common[:120]})"
