"""Benchmark a baked engine against a bare MLServer runtime doing the same work, side by side.

Bakes the engine, starts it and the baseline on free loopback ports in turn, drives both with the identical load
generator (a separate process), and prints requests/s, p50, p99, server CPU per request, peak RSS and startup time
with the engine/baseline ratio; writes the table as CSV and a PNG chart to bench/results/.
Run it with scripts/bench (which installs what it needs); `--quick` for a short run.

With `--against REF` the baseline is the engine as it was at a git commit (baked from that commit's template), run
side by side in the same way: the ratios then say whether a change made the engine faster or slower, free of the
drift between two runs made at different times on a noisy machine.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PEER_SERVERS = BENCH / "peer_servers"  # demo_answer.py: the decode and answer the baseline and the floor share
SUPPORT_SRC = ROOT / "{{cookiecutter.engine_name}}" / "src"
sys.path[:0] = [str(BENCH), str(SUPPORT_SRC)]

from images import b64, image  # noqa: E402
from report import summarise, table, write_chart, write_csv  # noqa: E402

# The process tree's CPU and memory, and the machine's other load: the engine's tuning tool measures them the same way.
from chariot_support.dev.tune.machine import (  # noqa: E402
    LoadProbe,
    cpu_seconds,
    describe,
    peak_rss_mb,
    process_tree,
    reset_peak_rss,
)

PAGE = os.sysconf("SC_PAGE_SIZE")
TASKS = {"detection": "Object Detection", "segmentation": "Image Segmentation"}


@dataclass(frozen=True)
class Scenario:
    name: str
    task: str  # "detection" or "segmentation"
    protocol: str  # "rest" or "grpc"
    images: tuple[str, ...]  # image kind per input
    count: int  # requests per measured run
    single: bool = True  # one image per request: the in-process CPU target applies
    # The engine is sent each image file itself in the binary tensor data extension, and asks for its results so, as
    # tritonclient does by default; the baseline (bare MLServer, or an earlier engine), base64 in JSON as always.
    binary: bool = False


SCENARIOS = (
    # A 32x24 image costs next to nothing to decode and predict: what is left is each server's own overhead. Counts
    # are set so that each server's share lasts two seconds or more here (in SLICES turns): in a shorter one a
    # passing spike of other work weighs too much.
    Scenario("tiny REST", "detection", "rest", ("tiny",), 6000),
    Scenario("detect REST", "detection", "rest", ("vga",), 1200),
    Scenario("detect gRPC", "detection", "grpc", ("vga",), 1200),
    Scenario("detect REST 8 images", "detection", "rest", ("vga",) * 8, 160, single=False),
    Scenario("detect REST 4K", "detection", "rest", ("uhd",), 60),
    Scenario("detect REST 4K binary", "detection", "rest", ("uhd",), 60, binary=True),
    Scenario("segment REST", "segmentation", "rest", ("many",), 800),
)


def body_of(scenario: Scenario) -> dict:
    inputs = [
        {"name": f"image-{i}", "shape": [1], "datatype": "BYTES", "data": [b64(image(kind, seed=i))]}
        for i, kind in enumerate(scenario.images)
    ]
    return {"inputs": inputs}


def binary_body_of(scenario: Scenario) -> tuple[bytes, int]:
    """The scenario's request in the binary tensor data extension, and the length of its JSON: each input's file
    itself as one BYTES element (a 4-byte little-endian length, then the file) after the JSON, its output asked for as
    binary data too."""
    files = [image(kind, seed=i) for i, kind in enumerate(scenario.images)]
    inputs = [
        {"name": f"image-{i}", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 4 + len(f)}}
        for i, f in enumerate(files)
    ]
    head = json.dumps({"inputs": inputs, "parameters": {"binary_data_output": True}}).encode()
    return head + b"".join(len(f).to_bytes(4, "little") + f for f in files), len(head)


# --- the servers, started on free loopback ports and stopped by PID -------------------------------------------


def free_ports(count: int) -> list[int]:
    """Different free ports: each is held until all are chosen, so none comes up twice."""
    import socket
    from contextlib import ExitStack

    with ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


class Server:
    def __init__(
        self,
        kind: str,
        task: str,
        engine_src: Path,
        log_dir: Path,
        profile: Path | None = None,
        earlier_src: Path | None = None,
    ):
        """`kind` "engine" or "baseline"; with `earlier_src`, the baseline is the engine baked there."""
        self.kind, self.task = kind, task
        self.http, self.grpc, metrics = free_ports(3)
        env = {
            **os.environ,
            "MLSERVER_HOST": "127.0.0.1",
            "MLSERVER_HTTP_PORT": str(self.http),
            "MLSERVER_GRPC_PORT": str(self.grpc),
            "MLSERVER_METRICS_PORT": str(metrics),
        }
        if kind == "engine" or earlier_src is not None:
            env["PYTHONPATH"] = str((engine_src if kind == "engine" else earlier_src) / task)
            command = [sys.executable, "-m", "chariot_engine"]
            if profile:
                command = [sys.executable, str(BENCH / "profiled.py"), str(profile), "chariot_engine"]
        else:
            # bare/ first: MLServer as pip installs it, without the httptools the engine brings into this venv.
            env["PYTHONPATH"] = os.pathsep.join(
                [str(BENCH / "baseline" / "bare"), str(BENCH / "baseline"), str(PEER_SERVERS), str(engine_src / task)]
            )
            command = [str(Path(sys.executable).parent / "mlserver"), "start", str(BENCH / "baseline" / task)]
        self.log = open(log_dir / f"{kind}-{task}.log", "ab")
        self.started = time.perf_counter()
        self.process = subprocess.Popen(command, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.startup = self._wait_ready()

    @property
    def infer_url(self) -> str:
        return f"http://127.0.0.1:{self.http}/v2/models/m-demo/infer"

    @property
    def ready_url(self) -> str:
        return f"http://127.0.0.1:{self.http}/v2/models/m-demo/ready"

    def _wait_ready(self, timeout: float = 120) -> float:
        url = self.ready_url
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return time.perf_counter() - self.started
            except (urllib.error.URLError, OSError):
                pass
            if self.process.poll() is not None or time.perf_counter() - self.started > timeout:
                self.stop()
                raise RuntimeError(f"{self.kind} ({self.task}) did not become ready; see {self.log.name}")
            time.sleep(0.02)

    def pids(self) -> list[int]:
        """The server and any worker processes it started."""
        return process_tree(self.process.pid)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pids())

    def reset_peak_rss(self) -> None:
        reset_peak_rss(self.pids())

    def peak_rss_mb(self) -> float:
        return peak_rss_mb(self.pids())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(20)
        self.log.close()


# --- measured runs ----------------------------------------------------------------------------------------

# Each server's share of a scenario's requests is sent in this many slices, the servers taking turns (engine,
# baseline, baseline, engine, ...): this machine's speed moves from one second to the next, and a slow spell then
# falls on both. Six rounds of detect gRPC, the ratios' spread between rounds (standard deviation), whole runs
# against four slices each: throughput 0.071 against 0.046, CPU per request 0.052 against 0.027.
SLICES = 4


class Load:
    """A load generator (load.py, its own process) for one server and scenario: it warms the server up once, then
    measures a run of `count` requests each time it is asked, its connections kept open between runs."""

    def __init__(self, server: Server, scenario: Scenario, body_path: Path, duration: float, head: int | None = None):
        self.server, self.scenario, self.duration = server, scenario, duration
        target = server.infer_url if scenario.protocol == "rest" else f"127.0.0.1:{server.grpc}"
        command = [
            sys.executable,
            str(BENCH / "load.py"),
            "--protocol",
            scenario.protocol,
            "--target",
            target,
            "--body",
            str(body_path),
            "--count",
            "1",
            "--duration",
            str(duration),
            "--warmup",
            "16",
            *(["--binary-head", str(head)] if head is not None else []),
        ]
        self.client = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.client.stdout.readline().strip() != "warm":
            self.close()
            raise RuntimeError(f"the load generator failed to warm up {server.kind} for {scenario.name}")

    def run(self, count: int, machine_load: bool = False) -> dict:
        """One run: the load generator's result, with the server's CPU seconds and peak RSS over it. With
        `machine_load`, also how busy the machine was with anything but the server and the load generator
        (`chariot_support/dev/tune/machine.py`)."""
        server, client = self.server, self.client
        server.reset_peak_rss()
        cpu = server.cpu_seconds()
        probe = LoadProbe(lambda: [*server.pids(), client.pid]) if machine_load else None
        if probe:
            probe.start()
        client.stdin.write(f"go {count}\n")
        client.stdin.flush()
        line = client.stdout.readline()
        cpu = server.cpu_seconds() - cpu
        if not line:
            self.close()
            raise RuntimeError(f"the load generator for {server.kind} stopped during {self.scenario.name}")
        result = json.loads(line)
        if result["errors"]:
            raise RuntimeError(
                f"{server.kind} failed {len(result['errors'])} requests in {self.scenario.name}: {result['errors'][:3]}"
            )
        machine = probe.stop(cpu + result["client_cpu"]) if probe else {}
        return {**result, "server_cpu": cpu, "rss_mb": server.peak_rss_mb(), **machine}

    def close(self) -> None:
        if self.client.poll() is None:
            self.client.stdin.close()  # the load generator leaves when its stdin closes
            try:
                self.client.wait(30)
            except subprocess.TimeoutExpired:
                self.client.kill()
                self.client.wait()


def summary(kind: str, scenario: Scenario, runs: list[dict]) -> dict:
    """One server's measurement of a scenario from its runs (slices): throughput over their summed time, latency
    percentiles over all their requests, CPU per request over all of them, the highest peak RSS; the machine's
    load, when measured, over the time-weighted runs."""
    latencies = sorted(t for r in runs for t in r["latencies"])
    done, elapsed = len(latencies), sum(r["elapsed"] for r in runs)
    result = {
        "scenario": scenario.name,
        "server": kind,
        "requests": done,
        "rps": done / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(done - 1, int(round(0.99 * done)) - 1)] * 1000,
        "cpu_ms": sum(r["server_cpu"] for r in runs) * 1000 / done,
        "rss_mb": max(r["rss_mb"] for r in runs),
        "client_cpu_share": sum(r["client_cpu"] for r in runs) / elapsed,
    }
    for key in ("others_cpus", "others_cpus_run", "load_1m"):
        if all(key in r for r in runs):
            result[key] = sum(r[key] * r["elapsed"] for r in runs) / elapsed
    return result


def measure(
    server: Server,
    scenario: Scenario,
    body_path: Path,
    count: int,
    duration: float,
    head: int | None = None,
    machine_load: bool = False,
) -> dict:
    """One run of `count` requests on `server`; `head`, the length of the body's JSON when it is in the binary tensor
    data extension. With `machine_load`, the result also says how busy the machine was with anything but the server
    and the load generator while the run lasted."""
    load = Load(server, scenario, body_path, duration, head)
    try:
        return summary(server.kind, scenario, [load.run(count, machine_load)])
    finally:
        load.close()


def turns(kinds: tuple[str, ...], slices: int) -> list[str]:
    """The order in which servers take their slices: forwards, then backwards, and again (A B B A A B ...), so that
    a steady drift in the machine's speed falls on each alike."""
    order = [*kinds, *kinds[::-1]] * ((slices + 1) // 2)
    return order[: len(kinds) * slices]


def side_by_side(
    servers: Mapping[str, Server],
    scenario: Scenario,
    bodies: Mapping[str, tuple[Path, int | None]],
    count: int,
    duration: float,
    slices: int = SLICES,
) -> dict[str, dict]:
    """`count` requests of `scenario` on each server in `servers` (in their order), in `slices` turns each, all within
    about `duration` seconds a server: one measurement per server. `bodies` gives each server's body and, for the
    binary tensor data extension, the length of its JSON."""
    share = max(1, count // slices)
    loads: dict[str, Load] = {}
    try:
        for kind, server in servers.items():
            body, head = bodies[kind]
            loads[kind] = Load(server, scenario, body, duration / slices, head)  # `duration` caps all its slices
        runs: dict[str, list[dict]] = {kind: [] for kind in servers}
        for kind in turns(tuple(servers), slices):
            runs[kind].append(loads[kind].run(share))
    finally:
        for load in loads.values():
            load.close()
    return {kind: summary(kind, scenario, runs[kind]) for kind in servers}


def floor_of(scenario: Scenario, body: Path, share: float, env: Mapping[str, str]) -> float:
    """The in-process floor of `scenario` (floor.py: its decode and demo predict alone, no server), CPU ms per
    request."""
    measured = subprocess.run(
        [
            sys.executable,
            str(BENCH / "floor.py"),
            "--body",
            str(body),
            "--count",
            str(max(2, int(scenario.count * share) // 40)),
            *(["--files"] if scenario.binary else []),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(measured.stdout)["cpu_ms"]


def bake(out: Path, template: Path = ROOT) -> Path:
    """Bake one engine per task the scenarios use from `template`, as a user would; returns the folder holding their
    src dirs."""
    from cookiecutter.main import cookiecutter

    src = out / "src"
    for task, task_type in TASKS.items():
        baked = Path(
            cookiecutter(
                str(template),
                no_input=True,
                overwrite_if_exists=True,
                output_dir=str(out / task),
                extra_context={"task_type": task_type},
            )
        )
        link = src / task
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            link.unlink()
        link.symlink_to(baked / "src")
    return src


def template_at(ref: str, out: Path) -> tuple[str, Path]:
    """The template as committed at `ref`, unpacked under `out`: (its commit, its folder)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT, capture_output=True, text=True
    )
    if commit.returncode:
        raise SystemExit(f"--against {ref}: not a commit of this repository ({commit.stderr.strip()})")
    sha = commit.stdout.strip()
    folder = out / f"against-{sha[:10]}" / "template"
    if not folder.exists():  # unpacked beside it, then renamed: an interrupted run leaves no half template behind
        archive = subprocess.run(["git", "archive", "--format=tar", sha], cwd=ROOT, capture_output=True, check=True)
        partial = folder.with_name(f"{folder.name}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            # The filter (Python 3.11.4 on) refuses links and paths out of the folder; the archive is this repo's own.
            tar.extractall(partial, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        partial.rename(folder)
    return sha, folder


def machine() -> str:
    model = describe()["cpu"]
    return f"{os.cpu_count()} CPUs ({model}), Python {platform.python_version()}, Linux {platform.release()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one round of short runs (about a minute)")
    parser.add_argument("--rounds", type=int, help="rounds of every scenario on both servers (default 5)")
    parser.add_argument("--only", action="append", help="run only scenarios whose name contains this (repeatable)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile the engine's CPU under the load (yappi, all threads) and print where it goes; "
        "the numbers of such a run are not kept",
    )
    parser.add_argument(
        "--against",
        metavar="REF",
        help="the baseline is the engine at this git commit (branch, tag or hash) instead of bare MLServer; "
        "results go to bench/out/against-<commit> unless --results says otherwise",
    )
    parser.add_argument("--results", type=Path, help="where the CSV and chart go (default bench/results)")
    parser.add_argument(
        "--peers",
        nargs="?",
        const="all",
        metavar="NAMES",
        help="the engine beside bare MLServer and other serving frameworks (fastapi, litserve, kserve, bentoml, or a "
        "comma-separated few of them), each in a venv of its own under bench/out/peers; REST scenarios in JSON only "
        "(tiny and detect unless --only says otherwise); results in bench/results/peers.*",
    )
    args = parser.parse_args(argv)
    if args.peers and (args.against or args.profile):
        parser.error("--peers does not combine with --against or --profile")
    rounds = args.rounds or (1 if args.quick else 5)
    share, duration = (0.25, 6.0) if args.quick else (1.0, 20.0)
    scenarios = [s for s in SCENARIOS if not args.only or any(o.lower() in s.name.lower() for o in args.only)]

    out = BENCH / "out"
    out.mkdir(exist_ok=True)
    print(f"machine: {machine()}", flush=True)
    print("baking engines ...", flush=True)
    src = bake(out)
    if args.peers:
        import peers

        return peers.main(args, src, out)
    earlier, baseline_name = None, "bare MLServer"
    if args.against:
        sha, template = template_at(args.against, out)
        earlier = bake(template.parent, template)
        baseline_name = f"the engine at {args.against} ({sha[:10]})"
        args.results = args.results or out / f"against-{sha[:10]}"
    args.results = args.results or BENCH / "results"
    print(f"baseline: {baseline_name}", flush=True)
    bodies = {}
    binary_bodies = {}  # scenario -> (the engine's body in the binary tensor data extension, its JSON's length)
    floors: dict[str, list[float]] = {}  # scenario -> the floor taken in each round
    floor_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PEER_SERVERS), str(src / "detection")])}
    for scenario in scenarios:
        path = out / f"body-{scenario.name.replace(' ', '-')}.json"
        path.write_text(json.dumps(body_of(scenario)))
        bodies[scenario.name] = path
        if scenario.binary:
            content, head = binary_body_of(scenario)
            binary_bodies[scenario.name] = (path.with_suffix(".bin"), head)
            path.with_suffix(".bin").write_bytes(content)

    support_env = {**os.environ, "PYTHONPATH": str(src / "detection")}
    decode = subprocess.run(
        [sys.executable, str(BENCH / "decode.py"), *(["--quick"] if args.quick else [])],
        capture_output=True,
        text=True,
        check=True,
        env=support_env,
    ).stdout
    print(f"\nimage decode, one thread, ms per image:\n{decode}", flush=True)

    measurements = []
    started = time.perf_counter()
    for round_ in range(rounds):
        # Both servers stay up side by side and take turns, scenario by scenario, each scenario's requests in
        # slices (side_by_side), with the first turn alternating: drift in the machine's load then falls on both
        # alike.
        kinds = ("engine", "baseline") if round_ % 2 == 0 else ("baseline", "engine")
        for task in TASKS:
            task_scenarios = [s for s in scenarios if s.task == task]
            if not task_scenarios:
                continue
            servers = {}
            try:
                for kind in kinds:
                    profile = out / f"engine-{task}.pstat" if args.profile and kind == "engine" else None
                    servers[kind] = Server(kind, task, src, out, profile, earlier)
                    measurements.append(
                        {"scenario": f"startup ({task})", "server": kind, "startup_s": servers[kind].startup}
                    )
                for index, scenario in enumerate(task_scenarios):
                    order = kinds if index % 2 == 0 else kinds[::-1]
                    sent = {kind: (bodies[scenario.name], None) for kind in order}
                    if scenario.binary:
                        sent["engine"] = binary_bodies[scenario.name]
                    # The floor is taken in every round too, just before the servers' turns and just after (the
                    # servers idle meanwhile): the machine's drift falls on it as on them, and the engine is held
                    # to the median over the rounds of the floor taken beside it.
                    before = floor_of(scenario, bodies[scenario.name], share, floor_env)
                    results = side_by_side(
                        {kind: servers[kind] for kind in order},
                        scenario,
                        sent,
                        max(16, int(scenario.count * share)),
                        duration,
                        2 if args.quick else SLICES,
                    )
                    floor = (before + floor_of(scenario, bodies[scenario.name], share, floor_env)) / 2
                    floors.setdefault(scenario.name, []).append(floor)
                    print(
                        f"round {round_ + 1}/{rounds} floor    {scenario.name:22} CPU {floor:6.2f} ms/req", flush=True
                    )
                    for kind, result in results.items():
                        measurements.append(result)
                        print(
                            f"round {round_ + 1}/{rounds} {kind:8} {scenario.name:22} {result['rps']:7.1f} req/s "
                            f"p50 {result['p50_ms']:7.1f} ms p99 {result['p99_ms']:7.1f} ms "
                            f"CPU {result['cpu_ms']:6.2f} ms/req RSS {result['rss_mb']:6.0f} MB "
                            f"(client CPU {result['client_cpu_share']:.0%})",
                            flush=True,
                        )
            finally:
                for server in servers.values():
                    server.stop()
    print(f"measured in {time.perf_counter() - started:.0f} s", flush=True)

    if args.profile:
        import pstats

        for path in sorted(out.glob("engine-*.pstat")):
            print(f"\nwhere the engine's CPU went ({path.name}, yappi CPU clock, all threads):")
            pstats.Stats(str(path)).sort_stats("tottime").print_stats(30)
        return 0
    rows = summarise(measurements, floors, held=earlier is None)  # the targets are against bare MLServer
    text = table(rows)
    print(f"\n{text}\n")
    args.results.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.results / "bench.csv")
    (args.results / "bench.md").write_text(
        f"Machine: {machine()}; {rounds} round(s){' (--quick)' if args.quick else ''}; baseline: {baseline_name}."
        f"\n\n{text}\n"
    )
    (args.results / "decode.txt").write_text(decode)
    (args.results / "raw.json").write_text(json.dumps({"floors": floors, "measurements": measurements}, indent=1))
    title = f"engine / baseline ({baseline_name}), medians of {rounds} round(s)\n{machine()}"
    write_chart(rows, args.results / "bench.png", title)
    print(f"wrote {args.results}/bench.csv, bench.md, bench.png, decode.txt, raw.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
