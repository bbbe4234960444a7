"""`./scripts/bench --peers`: the engine beside bare MLServer and the serving frameworks a user might pick instead,
each serving the same demo model its own documented way, each from a venv of its own with pinned versions.

The peers' servers are in `peer_servers/`, one file each, with the work they share (`demo_answer.py`: the V2 body's
base64 JPEGs decoded with OpenCV, the demo model, the answer in the engine's chariot-v2-kserve shape) and one lock
file each (`requirements-<peer>.txt`). Their venvs are made on first use under `bench/out/peers/`.

The servers run one at a time, in an order that rotates from round to round, under the same load generator as the
rest of the benchmark (`load.py`); before each run of a peer its answer to the scenario's body is checked against the
engine's, and each run records how busy the machine was with anything else (`chariot_support/dev/tune/machine.py`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import run
from report import peer_chart, peer_runs_csv, peer_tables, write_peer_csv

BENCH = Path(__file__).resolve().parent
SERVERS = BENCH / "peer_servers"
# What the engine is compared with by default: the scenarios every server pays the most of its own overhead in.
DEFAULT_SCENARIOS = ("tiny REST", "detect REST")


@dataclass(frozen=True)
class Peer:
    name: str
    label: str
    pin: str  # the peer's own exact pin, as its lock file must hold it
    ready: str  # the path that answers 200 once the model is loaded
    infer: str  # the path the V2 body is posted to
    command: tuple[str, ...]  # {bin}: the venv's bin folder; {servers}: peer_servers/; {port}, {grpc}: free ports
    env: dict[str, str] = field(default_factory=dict)

    @property
    def requirements(self) -> Path:
        return SERVERS / f"requirements-{self.name}.txt"


PEERS = {
    p.name: p
    for p in (
        Peer(
            "fastapi",
            "FastAPI + uvicorn",
            "fastapi==0.165.0",
            "/ready",
            "/v2/models/m-demo/infer",
            ("{bin}/uvicorn", "fastapi_app:app", "--app-dir", "{servers}", "--host", "127.0.0.1", "--port", "{port}"),
        ),
        Peer(
            "litserve",
            "LitServe",
            "litserve==0.2.19",
            "/health",
            "/predict",
            ("{bin}/python", "{servers}/litserve_app.py", "--host", "127.0.0.1", "--port", "{port}"),
        ),
        Peer(
            "kserve",
            "KServe ModelServer",
            "kserve==0.21.0",
            "/v2/models/m-demo/ready",
            "/v2/models/m-demo/infer",
            (
                "{bin}/python",
                "{servers}/kserve_app.py",
                "--model_name",
                "m-demo",
                "--http_port",
                "{port}",
                "--grpc_port",
                "{grpc}",
            ),
        ),
        Peer(
            "bentoml",
            "BentoML",
            "bentoml==1.4.40",
            "/readyz",
            "/infer",
            (
                "{bin}/bentoml",
                "serve",
                "bentoml_service:Demo",
                "--working-dir",
                "{servers}",
                "--host",
                "127.0.0.1",
                "--port",
                "{port}",
            ),
            # Its usage tracking would reach out to the internet; its docs say how to turn it off.
            {"BENTOML_DO_NOT_TRACK": "True"},
        ),
    )
}
LABELS = {"engine": "engine", "baseline": "bare MLServer", **{p.name: p.label for p in PEERS.values()}}


# --- the venvs --------------------------------------------------------------------------------------------------


def pins(requirements: Path) -> list[str]:
    """The requirement lines of a lock file, comments and blank lines left out."""
    lines = (line.split("#", 1)[0].strip() for line in requirements.read_text().splitlines())
    return [line for line in lines if line]


def venv(peer: Peer, out: Path) -> Path:
    """The peer's venv, made from its lock file on first use (again whenever its pins change); returns its bin
    folder. What the install took is kept beside it (`install.json`) and printed."""
    home = out / "peers" / peer.name
    folder, stamp, record = home / "venv", home / "venv" / "installed-from.txt", home / "install.json"
    lock = "\n".join(pins(peer.requirements)) + "\n"
    if stamp.exists() and stamp.read_text() == lock:
        return folder / "bin"
    shutil.rmtree(folder, ignore_errors=True)
    home.mkdir(parents=True, exist_ok=True)
    print(f"installing {peer.label} into {folder} ...", flush=True)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    subprocess.run(
        [
            str(folder / "bin/python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
            str(peer.requirements),
        ],
        check=True,
    )
    seconds = time.perf_counter() - started
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())
    stamp.write_text(lock)
    record.write_text(
        json.dumps({"seconds": round(seconds, 1), "mb": round(size / 1e6), "packages": len(pins(peer.requirements))})
    )
    print(
        f"installed {peer.label}: {seconds:.0f} s, {size / 1e6:.0f} MB, {len(pins(peer.requirements))} packages",
        flush=True,
    )
    return folder / "bin"


# --- a peer's server ------------------------------------------------------------------------------------------


class PeerServer(run.Server):
    """A peer serving the demo for `task` on a free loopback port, from its own venv; stopped by its PID."""

    def __init__(self, peer: Peer, task: str, engine_src: Path, log_dir: Path, bin_dir: Path):
        self.peer, self.kind, self.task = peer, peer.name, task
        self.http, self.grpc = run.free_ports(2)
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
            "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
            "PYTHONPATH": os.pathsep.join([str(SERVERS), str(engine_src / task)]),
            "PEER_TASK": task,
            "BENTOML_HOME": str(log_dir / "peers" / "bentoml-home"),
            **peer.env,
        }
        command = [c.format(bin=bin_dir, servers=SERVERS, port=self.http, grpc=self.grpc) for c in peer.command]
        self.log = open(log_dir / f"{peer.name}-{task}.log", "ab")
        self.started = time.perf_counter()
        # Run from a folder of its own under out/: LitServe writes a client.py where it runs, by default.
        cwd = log_dir / "peers" / peer.name
        cwd.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(command, env=env, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT)
        self.startup = self._wait_ready()

    @property
    def infer_url(self) -> str:
        return f"http://127.0.0.1:{self.http}{self.peer.infer}"

    @property
    def ready_url(self) -> str:
        return f"http://127.0.0.1:{self.http}{self.peer.ready}"

    def stop(self) -> None:
        """Stop the server, then any of its worker processes it left behind (by the PIDs it had)."""
        started = self.pids()[1:] if self.process.poll() is None else []
        super().stop()
        for pid in started:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if not _alive(pid):
                    break
                os.kill(pid, sig)
                time.sleep(1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# --- the answer check -------------------------------------------------------------------------------------------


def post(url: str, body: bytes, timeout: float = 60) -> dict:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def differences(expected, got, path: str = "", limit: int = 5) -> list[str]:
    """Where `got` differs from `expected` (parsed JSON), as paths with both values, at most `limit` of them;
    numbers match within a relative 1e-9, an int matches the equal float, and a field set to null matches one left
    out."""
    found: list[str] = []

    def walk(a, b, where: str) -> None:
        if len(found) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            # A null field is an absent one, as the V2 protocol's optional fields go (KServe writes them as null).
            a = {k: v for k, v in a.items() if v is not None}
            b = {k: v for k, v in b.items() if v is not None}
            for key in sorted(a.keys() | b.keys()):
                if key not in b:
                    found.append(f"{where}.{key}: missing")
                elif key not in a:
                    found.append(f"{where}.{key}: not in the engine's answer")
                else:
                    walk(a[key], b[key], f"{where}.{key}")
        elif isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                found.append(f"{where}: {len(b)} items where the engine has {len(a)}")
            for index, (x, y) in enumerate(zip(a, b, strict=False)):
                walk(x, y, f"{where}[{index}]")
        elif _number(a) and _number(b):
            if not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
                found.append(f"{where}: {b!r} where the engine has {a!r}")
        elif a != b or type(a) is not type(b):
            found.append(f"{where}: {b!r:.80} where the engine has {a!r:.80}")

    walk(expected, got, path)
    return found[:limit]


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_answer(name: str, scenario: str, expected: dict, got: dict) -> None:
    """A peer must answer with the engine's outputs (the rest of the answer, its id and model fields, may differ)."""
    if "outputs" not in got:
        raise RuntimeError(f"{name} answered {scenario} without outputs: {json.dumps(got)[:300]}")
    found = differences(expected["outputs"], got["outputs"], "outputs")
    if found:
        raise RuntimeError(f"{name} answered {scenario} unlike the engine: " + "; ".join(found))


# --- the run ----------------------------------------------------------------------------------------------------


def select(names: str) -> list[Peer]:
    if names == "all":
        return list(PEERS.values())
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in PEERS]
    if unknown:
        raise SystemExit(f"--peers: no such peer {', '.join(unknown)} (there are {', '.join(PEERS)})")
    return [PEERS[n] for n in chosen]


def scenarios_for(only: list[str] | None) -> list[run.Scenario]:
    """REST scenarios in JSON only: by default tiny and detect; with --only, whichever of them match."""
    eligible = [s for s in run.SCENARIOS if s.protocol == "rest" and not s.binary]
    if not only:
        return [s for s in eligible if s.name in DEFAULT_SCENARIOS]
    chosen = [s for s in eligible if any(o.lower() in s.name.lower() for o in only)]
    if not chosen:
        raise SystemExit(
            f"--peers runs the REST scenarios in JSON only ({', '.join(s.name for s in eligible)}); "
            f"--only {' '.join(only)} matches none of them"
        )
    return chosen


def engine_answers(scenarios: list[run.Scenario], src: Path, out: Path, bodies: dict[str, Path]) -> dict[str, dict]:
    """The engine's answer to each scenario's body, what every peer must answer too."""
    answers = {}
    for task in run.TASKS:
        mine = [s for s in scenarios if s.task == task]
        if not mine:
            continue
        server = run.Server("engine", task, src, out)
        try:
            for scenario in mine:
                answers[scenario.name] = post(server.infer_url, bodies[scenario.name].read_bytes())
        finally:
            server.stop()
    return answers


def main(args, src: Path, out: Path) -> int:
    peers = select(args.peers)
    scenarios = scenarios_for(args.only)
    rounds = args.rounds or (1 if args.quick else 5)
    share, duration = (0.25, 6.0) if args.quick else (1.0, 20.0)
    results = args.results or BENCH / "results"
    print(f"peers: {', '.join(p.label for p in peers)}; scenarios: {', '.join(s.name for s in scenarios)}", flush=True)
    bins = {p.name: venv(p, out) for p in peers}
    installs = {p.name: json.loads((out / "peers" / p.name / "install.json").read_text()) for p in peers}

    bodies = {}
    for scenario in scenarios:
        bodies[scenario.name] = out / f"body-{scenario.name.replace(' ', '-')}.json"
        bodies[scenario.name].write_text(json.dumps(run.body_of(scenario)))
    expected = engine_answers(scenarios, src, out, bodies)

    servers_in_turn = ["engine", "baseline", *(p.name for p in peers)]
    measurements: list[dict] = []
    started = time.perf_counter()
    for round_ in range(rounds):
        # One server at a time, the order rotating from round to round, so that drift in the machine's load falls on
        # all of them alike; the scenarios' order alternates too.
        shift = round_ % len(servers_in_turn)
        order = servers_in_turn[shift:] + servers_in_turn[:shift]
        for task in run.TASKS:
            mine = [s for s in scenarios if s.task == task]
            if round_ % 2:
                mine.reverse()
            for kind in order if mine else []:
                if kind in PEERS:
                    server = PeerServer(PEERS[kind], task, src, out, bins[kind])
                else:
                    server = run.Server(kind, task, src, out)
                try:
                    processes = len(server.pids())
                    measurements.append(
                        {
                            "round": round_ + 1,
                            "scenario": f"startup ({task})",
                            "server": kind,
                            "startup_s": server.startup,
                            "processes": processes,
                        }
                    )
                    for scenario in mine:
                        body = bodies[scenario.name]
                        if kind in PEERS:
                            check_answer(
                                LABELS[kind],
                                scenario.name,
                                expected[scenario.name],
                                post(server.infer_url, body.read_bytes()),
                            )
                        result = run.measure(
                            server, scenario, body, max(16, int(scenario.count * share)), duration, machine_load=True
                        )
                        result.update(round=round_ + 1, processes=len(server.pids()))
                        measurements.append(result)
                        print(
                            f"round {round_ + 1}/{rounds} {LABELS[kind]:18} {scenario.name:12} {result['rps']:7.1f} req/s "
                            f"p50 {result['p50_ms']:6.1f} ms p99 {result['p99_ms']:6.1f} ms "
                            f"CPU {result['cpu_ms']:6.2f} ms/req RSS {result['rss_mb']:5.0f} MB "
                            f"({result['processes']} proc) | others {result['others_cpus']:.2f} CPUs, "
                            f"load {result['load_1m']:.2f}",
                            flush=True,
                        )
                finally:
                    server.stop()
    print(f"measured in {time.perf_counter() - started:.0f} s", flush=True)

    ratios, absolute = peer_tables(measurements, LABELS)
    head = (
        f"Machine: {run.machine()}; {rounds} round(s){' (--quick)' if args.quick else ''}; "
        f"servers one at a time, in rotating order."
    )
    installed = "; ".join(
        f"{LABELS[name]} {i['seconds']:.0f} s, {i['mb']} MB, {i['packages']} packages" for name, i in installs.items()
    )
    text = (
        f"{head}\n\nEngine / each server, median [min-max] of the per-round ratios (throughput above 1: the engine "
        f"answers more; p50, p99, CPU per request, peak RSS below 1: the engine needs less):\n\n{ratios}\n\n"
        f"Each server's medians over rounds, with the machine's other load while it was measured (CPUs busy with "
        f"anything but it and the load generator, and the 1-minute load average, medians of the per-run medians):"
        f"\n\n{absolute}\n\nPeer venvs as installed here (time, size on disk): {installed}.\n"
    )
    print(f"\n{text}")
    results.mkdir(parents=True, exist_ok=True)
    (results / "peers.md").write_text(text)
    write_peer_csv(measurements, LABELS, results / "peers.csv")
    peer_runs_csv(measurements, LABELS, results / "peers-runs.csv")
    (results / "peers-raw.json").write_text(json.dumps({"installs": installs, "measurements": measurements}, indent=1))
    peer_chart(
        measurements,
        LABELS,
        results / "peers.png",
        f"engine / each server, medians of {rounds} round(s)\n{run.machine()}",
    )
    print(f"wrote {results}/peers.md, peers.csv, peers-runs.csv, peers.png, peers-raw.json")
    return 0
