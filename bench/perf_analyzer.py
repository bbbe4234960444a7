"""Triton's own benchmark client, perf_analyzer, driving a demo engine over REST (JSON tensors) and gRPC with a real
picture as its BYTES input, beside the engine's own statistics: run by scripts/perf-analyzer.

perf_analyzer (PyPI `perf-analyzer`, pinned below) is a manylinux_2_38 binary, newer than the glibc of Debian 12: it
runs in a Debian 13 (trixie) folder made once with Debian's `debootstrap` (minbase, with libssl3t64, which it links),
chrooted as root, talking to the engine on 127.0.0.1 (a chroot shares the machine's network). The folder and the
wheel are kept in `.perf-analyzer/` (ignored by git; about 240 MB).

perf_analyzer reads the model's metadata and configuration first (Triton's model configuration extension), sends
requests at each concurrency for windows of `--window-ms` until three windows agree, and reads the statistics
extension before and after each to print the server's side: queue, compute input (decode), compute infer (predict)
and compute output (results), beside the latency its own client saw (its windows must agree within `--stability`
per cent, 25 here: its own 10 is rarely met on a shared 2-CPU machine). Exit status 0 when it completed over both
transports and its counts agree with the engine's statistics."""

from __future__ import annotations

import argparse
import base64
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "{{cookiecutter.engine_name}}"
sys.path.insert(0, str(ENGINE / "src"))

from chariot_support.dev.testing import run_demo_engine  # noqa: E402

PERF_ANALYZER = "perf-analyzer==2.60.0"
CACHE = ROOT / ".perf-analyzer"
ROOTFS = CACHE / "trixie"
BINARY = "/usr/local/bin/perf_analyzer"
MIRROR = "http://deb.debian.org/debian"
PICTURE = ENGINE / "samples" / "scene.png"
MODEL = "m-demo"


def run(command: list[str], **options) -> subprocess.CompletedProcess:
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, check=True, **options)


def debootstrap() -> None:
    """The Debian 13 folder perf_analyzer runs in, made once."""
    if (ROOTFS / "usr/lib/x86_64-linux-gnu/libssl.so.3").exists():
        return
    if shutil.which("debootstrap") is None:
        run(["apt-get", "update", "-qq"])
        run(["apt-get", "install", "-y", "-qq", "debootstrap"], env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    shutil.rmtree(ROOTFS, ignore_errors=True)
    ROOTFS.mkdir(parents=True)
    run(["debootstrap", "--variant=minbase", "--include=libssl3t64", "trixie", str(ROOTFS), MIRROR])


def install_perf_analyzer() -> None:
    """perf_analyzer's binary, from its wheel on the package index, in the folder's /usr/local/bin."""
    target = ROOTFS / BINARY.lstrip("/")
    stamp = CACHE / "installed"
    if target.exists() and stamp.exists() and stamp.read_text() == PERF_ANALYZER:
        return
    with tempfile.TemporaryDirectory() as folder:
        run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--platform",
             "manylinux_2_38_x86_64", "--python-version", "3.13", "-d", folder, PERF_ANALYZER]
        )  # fmt: skip
        (wheel,) = Path(folder).glob("*.whl")
        with zipfile.ZipFile(wheel) as unpacked:
            target.write_bytes(unpacked.read("perf_analyzer/bin/perf_analyzer"))
    target.chmod(0o755)
    stamp.write_text(PERF_ANALYZER)


def input_data(transport: str) -> dict:
    """perf_analyzer's --input-data: the picture as the BYTES element of input `image`. Over REST it travels in JSON,
    as Chariot sends it (base64 text, which perf_analyzer sends as it is); over gRPC as the file itself: `b64` holds
    the tensor's raw contents, which for BYTES are each element's 4-byte little-endian length, then its bytes."""
    picture = PICTURE.read_bytes()
    if transport == "http":
        return {"data": [{"image": {"content": [base64.b64encode(picture).decode()], "shape": [1]}}]}
    raw = len(picture).to_bytes(4, "little") + picture
    return {"data": [{"image": {"b64": base64.b64encode(raw).decode(), "shape": [1]}}]}


def stats(engine) -> dict:
    with urllib.request.urlopen(f"{engine.url}/v2/models/{MODEL}/stats", timeout=10) as reply:
        (model,) = json.loads(reply.read())["model_stats"]
    return model


def perf_analyzer(engine, transport: str, args) -> list[dict]:
    """One perf_analyzer run over `transport` ("http" or "grpc"); its CSV rows (one per concurrency)."""
    work = ROOTFS / "tmp" / f"chariot-{transport}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "input.json").write_text(json.dumps(input_data(transport)))
    inside = f"/tmp/chariot-{transport}"
    url = engine.url.removeprefix("http://") if transport == "http" else engine.grpc_address
    command = ["chroot", str(ROOTFS), BINARY, "-m", MODEL, "-u", url, "-i", transport]
    command += ["--input-data", f"{inside}/input.json", "--concurrency-range", args.concurrency]
    command += ["--measurement-interval", str(args.window_ms), "--max-trials", str(args.trials)]
    command += ["--stability-percentage", str(args.stability), "-f", f"{inside}/out.csv"]
    if transport == "http":
        command += ["--input-tensor-format", "json", "--output-tensor-format", "json"]
    started = time.perf_counter()
    run(command, timeout=600)
    print(f"perf_analyzer over {transport}: {time.perf_counter() - started:.0f} s", flush=True)
    with open(work / "out.csv", newline="") as rows:
        return list(csv.DictReader(rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1:4:3", help="perf_analyzer's --concurrency-range (start:end:step)")
    parser.add_argument("--window-ms", type=int, default=3000, help="each measurement window, in milliseconds")
    parser.add_argument("--trials", type=int, default=10, help="windows at most per concurrency before it settles")
    # perf_analyzer's default is 10 %: on a shared 2-CPU machine three windows in a row rarely agree that closely.
    parser.add_argument("--stability", type=int, default=25, help="how far three windows may differ, in per cent")
    parser.add_argument("--quick", action="store_true", help="concurrency 1 and 2, 1 s windows: a check that it works")
    args = parser.parse_args()
    if args.quick:
        args.concurrency, args.window_ms, args.stability = "1:2:1", 1000, 50
    if os.geteuid() != 0:
        print("perf_analyzer runs in a chroot: run this as root", file=sys.stderr)
        return 2
    debootstrap()
    install_perf_analyzer()
    failed = False
    with run_demo_engine("Object Detection", src=ENGINE / "src", env={"CHARIOT_LOG_LEVEL": "WARNING"}) as engine:
        for transport in ("http", "grpc"):
            before = stats(engine)
            rows = perf_analyzer(engine, transport, args)
            after = stats(engine)
            answered = after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
            failures = after["inference_stats"]["fail"]["count"] - before["inference_stats"]["fail"]["count"]
            print(f"\n{transport}: perf_analyzer's figures, microseconds (its client's latency; the server's stages)")
            keys = ("Concurrency", "Inferences/Second", "Client Send", "Network+Server Send/Recv", "Server Queue",
                    "Server Compute Input", "Server Compute Infer", "Server Compute Output", "Client Recv",
                    "p50 latency", "p99 latency")  # fmt: skip
            print(" | ".join(keys))
            for row in rows:
                print(" | ".join(row.get(key, "") for key in keys))
            print(f"the engine's statistics over the run: {answered} answered, {failures} failed\n", flush=True)
            if not rows or answered == 0 or failures:
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
