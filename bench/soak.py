"""Soak a baked engine: thousands of good and bad requests from concurrent clients on 127.0.0.1, then what it
served, the answers by status, and its memory at the start and the end.

    python bench/soak.py [--task "Object Detection"] [--requests 4000] [--clients 8] [--bad 0.5]
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests
from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parents[1]


def memory(pid: int) -> dict[str, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM")}  # MiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="Object Detection")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--bad", type=float, default=0.5, help="share of requests taken from the bad-request catalogue")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    engine_dir = Path(
        cookiecutter(
            str(ROOT),
            no_input=True,
            extra_context={"task_type": args.task},
            output_dir=tempfile.mkdtemp(prefix="soak-"),
        )
    )
    sys.path[:0] = [str(engine_dir / "src"), str(ROOT / "tests" / "support")]
    from bad_requests import CASES, GOOD, REST_TRANSPORTS  # the support tests' catalogue

    from chariot_support.dev.testing import engine_package, run_engine

    rng = random.Random(args.seed)
    plan = [
        (rng.choice(REST_TRANSPORTS), rng.choice(CASES) if rng.random() < args.bad else None)
        for _ in range(args.requests)
    ]
    plan = [(t, c) for t, c in plan if c is None or t.carries(c)]
    statuses: collections.Counter = collections.Counter()
    wrong: collections.Counter = collections.Counter()  # answers that differ from what the catalogue expects
    lock = threading.Lock()

    with run_engine(engine_package(engine_dir / "src"), src=engine_dir / "src") as engine:
        model = f"m-{__import__(engine_package(engine_dir / 'src') + '.__main__', fromlist=['x']).DEFAULT_MODEL_ID}"
        good = json.dumps(GOOD).encode()
        warm = requests.post(f"{engine.url}/v2/models/{model}/infer", data=good, timeout=60)
        assert warm.status_code == 200, warm.text
        start_memory = memory(engine.process.pid)
        queue = iter(plan)

        def client() -> None:
            session = requests.Session()
            while True:
                with lock:
                    item = next(queue, None)
                if item is None:
                    return
                transport, case = item
                try:
                    if case is None:
                        url = engine.url + transport.path.format(model=model)
                        status = session.post(url, data=good, timeout=120).status_code
                        expected = 200
                    else:
                        status = transport.send(engine, model, case, {}).status
                        expected = case.status
                except requests.RequestException as error:
                    status, expected = type(error).__name__, None
                with lock:
                    statuses[status] += 1
                    if status != expected:
                        wrong[status] += 1

        began = time.perf_counter()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - began
        end_memory = memory(engine.process.pid)
        healthy = requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code == 200 and engine.alive()

    served = sum(statuses.values())
    print(
        f"engine: {args.task}, {args.clients} clients, {len(plan)} requests ({args.bad:.0%} from the bad-request catalogue)"
    )
    print(f"served: {served} in {elapsed:.1f} s ({served / elapsed:.0f}/s)")
    print("by status: " + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items(), key=lambda kv: str(kv[0]))))
    print(f"unexpected answers: {sum(wrong.values())}" + (f" {dict(wrong)}" if wrong else ""))
    print(
        f"RSS: {start_memory['VmRSS']:.0f} MiB at start, {end_memory['VmRSS']:.0f} MiB at end "
        f"({end_memory['VmRSS'] - start_memory['VmRSS']:+.0f} MiB); peak {end_memory['VmHWM']:.0f} MiB"
    )
    print(f"healthy after: {healthy}")


if __name__ == "__main__":
    main()
