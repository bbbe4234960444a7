"""What the same detect call costs over gRPC when nothing but the work is served: the engine and bare MLServer beside
two minimal servers of the demo's work (peer_servers/grpc_minimal.py: grpc.aio with the work on two threads, and
grpc's thread-pool server with the work in its two handler threads), taking turns under the same load generator.

    .venv-bench/bin/python bench/grpc_floor.py --rounds 3     # after ./scripts/bench has made .venv-bench

The minimal servers have no limits, checks, metrics or logs: what the engine costs beyond them is the price of
everything it does around the work, and what they cost beyond the in-process floor is gRPC's and the threads'.
Prints each run and the medians, as ratios to bare MLServer."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import run

BENCH = Path(__file__).resolve().parent


class Minimal(run.Server):
    """A minimal gRPC server of the demo's work (grpc_minimal.py), measured and stopped as the bench's servers are."""

    def __init__(self, mode: str, src: Path, log_dir: Path, threads: int = 2):
        self.kind = f"minimal {mode}"
        self.grpc = run.free_ports(1)[0]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH / "peer_servers"), str(src / "detection")])}
        self.log = open(log_dir / f"grpc-minimal-{mode}.log", "ab")
        self.process = subprocess.Popen(
            [sys.executable, str(BENCH / "peer_servers" / "grpc_minimal.py"), str(self.grpc), mode, str(threads)],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
        )
        if self.process.stdout.readline().strip() != "ready":
            self.stop()
            raise RuntimeError(f"{self.kind} did not start; see {self.log.name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, help="calls per run (default: the detect gRPC scenario's)")
    args = parser.parse_args(argv)
    scenario = next(s for s in run.SCENARIOS if s.name == "detect gRPC")
    out = BENCH / "out"
    out.mkdir(exist_ok=True)
    print(f"machine: {run.machine()}", flush=True)
    src = run.bake(out)
    body = out / "body-detect-gRPC.json"
    body.write_text(json.dumps(run.body_of(scenario)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(run.PEER_SERVERS), str(src / "detection")])}
    servers: list = []
    results: dict[str, list[dict]] = {}
    floors = []
    try:
        for start in (
            lambda: run.Server("engine", "detection", src, out),
            lambda: run.Server("baseline", "detection", src, out),
            lambda: Minimal("aio", src, out),
            lambda: Minimal("sync", src, out),
        ):
            servers.append(start())  # one at a time: those started are stopped below if a later one fails
        for round_ in range(args.rounds):
            floors.append(run.floor_of(scenario, body, 1.0, env))
            for server in servers if round_ % 2 == 0 else servers[::-1]:
                result = run.measure(server, scenario, body, args.count or scenario.count, 20)
                results.setdefault(server.kind, []).append(result)
                print(
                    f"round {round_ + 1}/{args.rounds} {server.kind:14} {result['rps']:7.1f} calls/s"
                    f" CPU {result['cpu_ms']:6.2f} ms/call",
                    flush=True,
                )
    finally:
        for server in servers:
            server.stop()
    rps = {kind: statistics.median(r["rps"] for r in runs) for kind, runs in results.items()}
    cpu = {kind: statistics.median(r["cpu_ms"] for r in runs) for kind, runs in results.items()}
    floor = statistics.median(floors)
    print(
        f"\nin-process floor (decode and find, one thread): {floor:.2f} ms/call [{min(floors):.2f}-{max(floors):.2f}]"
    )
    print(f"{'server':14} {'calls/s':>8} {'x bare':>7} {'CPU ms':>7} {'x bare':>7} {'x floor':>7}")
    for kind in results:
        name = "bare MLServer" if kind == "baseline" else kind
        print(
            f"{name:14} {rps[kind]:8.1f} {rps[kind] / rps['baseline']:7.2f} {cpu[kind]:7.2f}"
            f" {cpu[kind] / cpu['baseline']:7.2f} {cpu[kind] / floor:7.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
