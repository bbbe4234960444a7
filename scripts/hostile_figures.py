"""Attack an engine on loopback and report what it held: peak RSS, threads and health latency per attack.

    .venv/bin/python scripts/hostile_figures.py [--slow-clients | --grpc | --bodies]

Starts the faulty test engine with default settings (plus what each attack names), one engine per attack, and
stops each by its process id. Prints a Markdown table for the engine's docs/reliability.md. `--slow-clients` runs
only the attacks of slow clients on the connection table (about a minute); `--grpc` only the gRPC attacks, whose
table is printed after the others; `--bodies` only the attacks on request bodies and what the engine echoes."""

import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "{{cookiecutter.engine_name}}" / "src"), str(ROOT / "tests" / "support")]
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [sys.path[0], os.environ.get("PYTHONPATH")]))

from grpc_attacks import BothHealthProbe, RawCalls, call_all, call_apart, infer_message  # noqa: E402
from hostile import HERE, HealthProbe, RSSGuard, peak_rss_mib, png_request, rss_mib, threads, wait_until  # noqa: E402
from test_hostile_bodies import hold_bodies  # noqa: E402
from test_hostile_slow_clients import TRICKLED_BODY_HEAD, answers_by, connect_all  # noqa: E402
from test_hostile_workers import children, serving_again  # noqa: E402

from chariot_support.dev.testing import run_engine  # noqa: E402
from chariot_support.settings import EngineSettings  # noqa: E402

INFER = "/v2/models/m-faulty/infer"


def health_probe(engine, done: threading.Event, worst: list[float]) -> None:
    while not done.is_set():
        started = time.monotonic()
        try:
            requests.get(f"{engine.url}/v2/health/live", timeout=120)
        except requests.RequestException:
            pass
        worst[0] = max(worst[0], time.monotonic() - started)
        time.sleep(0.05)


def kill_workers(engine) -> str:
    """Kill every parallel worker 0.8 s into the attack; say how long until the engine served again."""
    time.sleep(0.8)
    old = children(engine.process.pid)
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    started = time.monotonic()
    wait_until(lambda: serving_again(engine, old), 60)
    return f"; workers replaced, ready in {time.monotonic() - started:.1f} s"


def attack(name: str, bodies, path: str = INFER, env: dict | None = None, during=None) -> str:
    with run_engine("faulty_engine", src=HERE, env=env or {}) as engine:
        done, worst = threading.Event(), [0.0]
        prober = threading.Thread(target=health_probe, args=(engine, done, worst))
        prober.start()
        with RSSGuard(engine.process, 6 * 1024) as guard, ThreadPoolExecutor(8) as pool:
            meanwhile = pool.submit(during, engine) if during else None
            statuses = sorted(
                pool.map(lambda b: requests.post(engine.url + path, data=b, timeout=300).status_code, bodies)
            )
            note = meanwhile.result() if meanwhile else ""
        done.set()
        prober.join()
        alive = ("killed at 6 GiB" if guard.tripped else "alive") + note
        peak = peak_rss_mib(engine.process.pid) if not guard.tripped else 6 * 1024
        count = threads(engine.process.pid) if not guard.tripped else 0
        counts = ", ".join(f"{statuses.count(s)}× {s}" for s in sorted(set(statuses)))
        return f"| {name} | {counts} | {peak:,.0f} MiB | {count} | {worst[0]:.2f} s | {alive} |"


def slow_clients(name: str, first_bytes: bytes, trickle: float | None = None, watch: float = 40.0) -> str:
    """CHARIOT_MAX_CONNECTIONS connections send `first_bytes`, then one more byte every `trickle` seconds, for up
    to `watch` seconds: what each was answered and when the last was closed, and health from new connections."""
    count = EngineSettings().max_connections
    with run_engine("faulty_engine", src=HERE) as engine:
        with RSSGuard(engine.process, 6 * 1024) as guard, HealthProbe(engine) as probe:
            started = time.monotonic()
            sockets = connect_all(engine, count, first_bytes)
            answers = answers_by(sockets, started + watch, trickle)
            for sock in sockets:
                sock.close()
        seen = [answer.split(b" ", 2)[1].decode() if answer else "no answer" for answer, _ in answers.values()]
        counts = ", ".join(f"{seen.count(s)}× {s}" for s in sorted(set(seen)))
        open_still = sum(closed is None for _, closed in answers.values())
        last = max((closed for _, closed in answers.values() if closed is not None), default=started) - started
        counts += f"; {open_still} still open at {watch:.0f} s" if open_still else f"; all closed by {last:.1f} s"
        alive = "killed at 6 GiB" if guard.tripped else "alive"
        peak = peak_rss_mib(engine.process.pid) if not guard.tripped else 6 * 1024
        after = threads(engine.process.pid) if not guard.tripped else 0
        health = f"{probe.worst:.2f} s" + (f", {len(probe.failures)} probes failed" if probe.failures else "")
        return f"| {name} | {counts} | {peak:,.0f} MiB | {after} | {health} | {alive} |"


def main() -> None:
    rows = slow_client_rows() if sys.argv[1:] == ["--slow-clients"] else request_rows() + slow_client_rows()
    print("| attack | answers | peak RSS | threads after | slowest /v2/health/live | engine |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


def request_rows() -> list[str]:
    return [
        attack("4 requests of 64 black 10000×10000 PNGs", [json.dumps(png_request(10_000, 64))] * 4),
        attack(
            "8 requests with a 29M-element INT64 tensor (58 MB)",
            [
                '{"inputs": [{"name": "x", "shape": [29000000], "datatype": "INT64", "data": ['
                + ",".join(["1"] * 29_000_000)
                + "]}]}"
            ]
            * 8,
        ),
        attack(
            "200 predicts that hang 5 s, CHARIOT_PREDICT_TIMEOUT=1",
            [json.dumps(png_request(32, 1, fault="hang", seconds=5))] * 200,
            env={"CHARIOT_PREDICT_TIMEOUT": "1", "FAULTY_THREAD_SAFE": "1"},
        ),
        attack(
            "one 58 MB V1 request of pixel lists",
            ['{"instances": [[' + ",".join(["[" + ",".join(["[0,0,0]"] * 2200) + "]"] * 2200) + "]]}"],
            path="/v1/models/m-faulty:predict",
        ),
        attack(
            "2 parallel workers killed under load (7 requests of 2 s predicts)",
            [json.dumps(png_request(32, 1, fault="sleep", seconds=2))] * 7,
            env={"MLSERVER_PARALLEL_WORKERS": "2", "FAULTY_THREAD_SAFE": "1"},
            during=kill_workers,
        ),
    ]


def slow_client_rows() -> list[str]:
    return [
        slow_clients("512 connections each send one byte (`G`) and nothing more", b"G"),
        slow_clients("512 connections send headers for a 1 MB body, then one byte every 3 s", TRICKLED_BODY_HEAD, 3),
    ]


# gRPC attacks: each row says what the same attack did before gRPC calls were bounded.
GRPC_BEFORE = {
    "5,000 ModelInfer calls at once": "2,100 CANCELLED, dropped unlogged",
    "10 ModelInfer calls of 60 MiB at once": "peak 3.5 GB, 3.4 GB held after",
    "40 ModelInfer calls of 60 MiB at once": "past 6 GiB, 2× `MemoryError` 500",
    "300 calls over raw HTTP/2 never read (window 0)": "2.2 GB, 2.19 GB held after (each with a 1 MiB id)",
    "6 black 9,999×9,999 PNGs at once over gRPC": "peak 2.06 GB against a 1,024 MiB decode budget",
}


def grpc_attack(name: str, send) -> str:
    """Run `send(engine)` (which returns a Counter of gRPC answers) against a fresh engine with health probes."""
    with run_engine("faulty_engine", src=HERE) as engine:
        start = rss_mib(engine.process.pid)
        with BothHealthProbe(engine) as probe, RSSGuard(engine.process, 6 * 1024) as guard:
            answers = send(engine)
        if guard.tripped:
            return f"| {name} | {GRPC_BEFORE[name]} | killed at 6 GiB | | | | |"
        wait_until(lambda: rss_mib(engine.process.pid) < start + 100, 10, 0.25)
        after, peak = rss_mib(engine.process.pid), peak_rss_mib(engine.process.pid)
        counts = ", ".join(f"{n:,}× {code}" for code, n in answers.most_common())
        health = f"{probe.worst:.2f} s ({probe.slowest})" if not probe.failures else f"{len(probe.failures)} failed"
        return f"| {name} | {GRPC_BEFORE[name]} | {counts} | {peak:,.0f} MiB | {after:,.0f} MiB | {health} |"


def unread_answers(engine) -> Counter:
    message = infer_message(request_id="r" * 256).SerializeToString()
    client = RawCalls(engine)
    try:
        streams = [client.call(message) for _ in range(300)]
        client.read(5.0)
    finally:
        client.close()
    names = {"8": "RESOURCE_EXHAUSTED", "14": "UNAVAILABLE"}
    return Counter(names.get(client.statuses[s][0], "held") if s in client.statuses else "held" for s in streams)


def codes(answers: Counter) -> Counter:
    """Answers counted by status alone."""
    counted = Counter()
    for (code, _), n in answers.items():
        counted[code] += n
    return counted


def grpc_main() -> None:
    rows = [
        grpc_attack(
            "5,000 ModelInfer calls at once",
            lambda e: codes(call_all(e, [infer_message(fault="sleep", seconds="0.05")] * 5000, channels=10)),
        ),
        grpc_attack("10 ModelInfer calls of 60 MiB at once", lambda e: codes(call_apart(e, 10, padding=60 << 20))),
        grpc_attack("40 ModelInfer calls of 60 MiB at once", lambda e: codes(call_apart(e, 40, padding=60 << 20))),
        grpc_attack("300 calls over raw HTTP/2 never read (window 0)", unread_answers),
        grpc_attack(
            "6 black 9,999×9,999 PNGs at once over gRPC",
            lambda e: codes(call_apart(e, 6, side=9_999)),
        ),
    ]
    print("| gRPC attack | before | answers | peak RSS | RSS after | slowest health (new connection) |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


# Attacks on request bodies and echoes: what each did before bodies were bounded while they are read.
BODIES_BEFORE = {
    "`POST /infer` JSONL body of 33,554,424 lines (64 MiB)": "a 400 after 4.4 s; RSS 1.3 → 4.4 GB; health 4.3 s",
    "30 connections each send a 64 MiB − 1 body and hold the last byte": "+64 MiB per connection: 2.07 GB at 30",
    "a V2 request whose `id` is 10 MiB": "a 31 MiB answer: the id in the body, `ce-id` and `ce-requestid`",
}


def body_attack(name: str, send) -> str:
    """Run `send(engine)` (which returns the statuses answered) against a fresh engine with health probes."""
    with run_engine("faulty_engine", src=HERE) as engine:
        with RSSGuard(engine.process, 6 * 1024) as guard, HealthProbe(engine) as probe:
            statuses = send(engine)
        peak = peak_rss_mib(engine.process.pid) if not guard.tripped else 6 * 1024
        wait_until(lambda: rss_mib(engine.process.pid) < peak / 2, 5)
        after = rss_mib(engine.process.pid) if not guard.tripped else 0
    counts = ", ".join(f"{n}× {s}" for s, n in sorted(Counter(statuses).items()))
    health = f"{probe.worst:.2f} s" + (f", {len(probe.failures)} probes failed" if probe.failures else "")
    return f"| {name} | {BODIES_BEFORE[name]} | {counts} | {peak:,.0f} MiB | {after:,.0f} MiB | {health} |"


def jsonl_lines(engine) -> list[str]:
    body = b"a\n" * 33_554_424
    reply = requests.post(engine.url + "/infer", data=body, headers={"Content-Type": "application/jsonl"}, timeout=120)
    return [str(reply.status_code)]


def huge_id(engine) -> list[str]:
    reply = requests.post(engine.url + INFER, json={**png_request(16, 1), "id": "x" * (10 << 20)}, timeout=120)
    return [f"{reply.status_code} ({len(reply.content):,} bytes)"]


def bodies_main() -> None:
    rows = [
        body_attack("`POST /infer` JSONL body of 33,554,424 lines (64 MiB)", jsonl_lines),
        body_attack(
            "30 connections each send a 64 MiB − 1 body and hold the last byte",
            lambda e: [a.split(b" ", 2)[1].decode() if a else "held" for a in hold_bodies(e, 30)],
        ),
        body_attack("a V2 request whose `id` is 10 MiB", huge_id),
    ]
    print("| attack | before | answers | peak RSS | RSS after | slowest health (new connection) |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    chosen = sys.argv[1:]
    if chosen == ["--bodies"]:
        bodies_main()
    elif chosen == ["--grpc"]:
        grpc_main()
    else:
        main()  # every table when nothing is chosen; the slow-client rows alone with --slow-clients
        if not chosen:
            print()
            grpc_main()
            print()
            bodies_main()
