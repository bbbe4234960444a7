"""What batching across requests buys a GPU-like model: the engine serving a model whose call costs a fixed part
plus a little per image (bench/fixed_cost/), driven by 16 concurrent REST clients (bench/load.py, one image per
request), with batching off and then on (CHARIOT_MAX_BATCH_SIZE, CHARIOT_MAX_BATCH_WAIT_MS). Prints requests/s,
p50, p99 and images per predict call of each, the on/off throughput ratio, and the p99 bound batching aims for:
the wait plus two predicts of a full batch.

    python bench/batching.py            # about 30 s; --help for the model's costs and the settings
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SUPPORT_SRC = ROOT / "{{cookiecutter.engine_name}}" / "src"
sys.path[:0] = [str(BENCH), str(SUPPORT_SRC)]

from images import b64, image  # noqa: E402

from chariot_support.dev.testing import run_engine  # noqa: E402


def measure(env: dict[str, str], body: Path, clients: int, count: int, duration: float) -> dict:
    path = os.pathsep.join(filter(None, [str(BENCH), str(SUPPORT_SRC), os.environ.get("PYTHONPATH")]))
    calls = body.with_name("calls.txt")
    with run_engine("fixed_cost", env={**env, "PYTHONPATH": path, "FIXED_COST_CALLS": str(calls)}) as engine:
        command = [
            sys.executable,
            str(BENCH / "load.py"),
            "--protocol",
            "rest",
            "--target",
            f"{engine.url}/v2/models/m-fixed-cost/infer",
            "--body",
            str(body),
            "--concurrency",
            str(clients),
            "--count",
            str(count),
            "--duration",
            str(duration),
            "--warmup",
            str(2 * clients),
        ]
        client = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if client.stdout.readline().strip() != "warm":
            client.kill()
            raise RuntimeError("the load generator failed to warm up the engine")
        calls.write_text("")  # the measured calls only
        out, _ = client.communicate("go\n", timeout=duration + 120)
        sizes = [int(line) for line in calls.read_text().split()]
    result = json.loads(out)
    if result["errors"] or client.returncode:
        raise RuntimeError(f"{len(result['errors'])} requests failed: {result['errors'][:3]}")
    latencies = sorted(result["latencies"])
    done = len(latencies)
    return {
        "requests": done,
        "rps": done / result["elapsed"],
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(done - 1, int(round(0.99 * done)) - 1)] * 1000,
        "images_per_call": statistics.mean(sizes),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--wait-ms", type=float, default=10)
    parser.add_argument("--fixed-ms", type=float, default=20, help="the model's cost per call")
    parser.add_argument("--per-image-ms", type=float, default=1, help="the model's cost per image")
    parser.add_argument("--count", type=int, default=2000, help="requests per measured run")
    parser.add_argument("--duration", type=float, default=15, help="seconds a measured run may take at most")
    args = parser.parse_args(argv)
    model = {"FIXED_COST_MS": str(args.fixed_ms), "PER_IMAGE_MS": str(args.per_image_ms)}
    batching = {"CHARIOT_MAX_BATCH_SIZE": str(args.max_batch), "CHARIOT_MAX_BATCH_WAIT_MS": str(args.wait_ms)}
    body = {"inputs": [{"name": "image-0", "shape": [1], "datatype": "BYTES", "data": [b64(image("tiny"))]}]}
    with tempfile.TemporaryDirectory() as tmp:
        body_path = Path(tmp) / "body.json"
        body_path.write_text(json.dumps(body))
        results = {
            "off": measure(model, body_path, args.clients, args.count, args.duration),
            "on": measure({**model, **batching}, body_path, args.clients, args.count, args.duration),
        }
    full_batch = args.fixed_ms + args.per_image_ms * args.max_batch
    bound = args.wait_ms + 2 * full_batch
    print(
        f"fixed-cost model ({args.fixed_ms:g} ms a call + {args.per_image_ms:g} ms an image, one call at a time),"
        f" {args.clients} clients, one {len(image('tiny'))}-byte JPEG per request; batching on ="
        f" CHARIOT_MAX_BATCH_SIZE={args.max_batch} CHARIOT_MAX_BATCH_WAIT_MS={args.wait_ms:g}"
    )
    print(f"{'batching':<9} {'requests':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'images/predict':>15}")
    for mode, r in results.items():
        print(
            f"{mode:<9} {r['requests']:>8} {r['rps']:>8.1f} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f}"
            f" {r['images_per_call']:>15.1f}"
        )
    ratio = results["on"]["rps"] / results["off"]["rps"]
    print(f"throughput on/off: {ratio:.2f}x (target >= 3)")
    print(
        f"p99 on: {results['on']['p99_ms']:.1f} ms; wait + 2 x predict of a full batch = {args.wait_ms:g} + 2 x"
        f" {full_batch:g} = {bound:g} ms (target: p99 within it)"
    )
    return {**results, "ratio": ratio, "p99_bound_ms": bound}


if __name__ == "__main__":
    main()
