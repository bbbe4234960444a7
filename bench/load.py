"""The load generator, run as its own process so its CPU is not the servers': `concurrency` clients on one
asyncio loop send the same prepared request until `count` requests are done or `duration` seconds pass, and the
latencies are printed as JSON.

With `--warmup`, it warms the server up, prints "warm", and then measures once for each line read on stdin ("go", or
"go N" for N requests), printing each run's JSON on a line of its own, until stdin closes: its connections stay open
between runs, so that runs of it can take turns with another server's."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp
import grpc
from mlserver.grpc import dataplane_pb2 as pb

_INFER = "/inference.GRPCInferenceService/ModelInfer"


def grpc_request(body: dict, model: str) -> bytes:
    """The REST body as a serialised gRPC ModelInferRequest: BYTES inputs carry the same base64 text."""
    inputs = [
        pb.ModelInferRequest.InferInputTensor(
            name=i["name"],
            datatype="BYTES",
            shape=i["shape"],
            contents=pb.InferTensorContents(bytes_contents=[d.encode() for d in i["data"]]),
        )
        for i in body["inputs"]
    ]
    return pb.ModelInferRequest(model_name=model, inputs=inputs).SerializeToString()


async def _drive(send, concurrency: int, count: int, duration: float, warmup: int) -> None:
    """One measured run printed; with `warmup`, the server warmed up first and then one run per line on stdin."""
    if not warmup:
        _print(await _run(send, concurrency, count, duration))
        return
    for _ in range(0, warmup, concurrency):
        await asyncio.gather(*(send() for _ in range(concurrency)))
    # Tell the caller the server is warm; each line it sends once it has read the server's counters starts a run.
    print("warm", flush=True)
    while line := (await asyncio.to_thread(sys.stdin.readline)).split():
        _print(await _run(send, concurrency, int(line[1]) if len(line) > 1 else count, duration))


def _print(result: dict) -> None:
    print(json.dumps(result), flush=True)


async def _run(send, concurrency: int, count: int, duration: float) -> dict:
    cpu = time.process_time()
    latencies: list[float] = []
    errors: list[str] = []
    issued = 0
    deadline = time.perf_counter() + duration

    async def client() -> None:
        nonlocal issued
        while issued < count and time.perf_counter() < deadline:
            issued += 1
            start = time.perf_counter()
            try:
                await send()
            except Exception as exc:  # counted and reported: a failing server must show in the table
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    return {"elapsed": elapsed, "latencies": latencies, "errors": errors, "client_cpu": time.process_time() - cpu}


async def rest(
    url: str, body: bytes, concurrency: int, count: int, duration: float, warmup: int, head: int | None = None
) -> None:
    """REST load; with `head`, the body is in the binary tensor data extension, its first `head` bytes JSON."""
    headers = {"Content-Type": "application/json"}
    if head is not None:
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(head)}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:

        async def send() -> None:
            async with session.post(url, data=body, headers=headers) as response:
                answer = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status}: {answer[:200]!r}")

        await _drive(send, concurrency, count, duration, warmup)


async def grpc_load(address: str, message: bytes, concurrency: int, count: int, duration: float, warmup: int) -> None:
    options = [("grpc.max_send_message_length", 1 << 28), ("grpc.max_receive_message_length", 1 << 28)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        # Pre-serialised request, raw reply: the client spends no time in protobuf.
        call = channel.unary_unary(_INFER, request_serializer=None, response_deserializer=None)

        async def send() -> None:
            await call(message, timeout=120)

        await _drive(send, concurrency, count, duration, warmup)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--protocol", choices=("rest", "grpc"), required=True)
    parser.add_argument("--target", required=True, help="REST infer URL, or host:port for gRPC")
    parser.add_argument("--body", type=Path, required=True, help="the REST request body (JSON)")
    parser.add_argument(
        "--binary-head",
        type=int,
        help="the body is in the binary tensor data extension (REST), and its first this many bytes are its JSON",
    )
    parser.add_argument("--model", default="m-demo")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="requests before measuring; then print 'warm' and measure once per line on stdin ('go', or 'go N')",
    )
    args = parser.parse_args(argv)
    body = args.body.read_bytes()
    if args.protocol == "rest":
        asyncio.run(rest(args.target, body, args.concurrency, args.count, args.duration, args.warmup, args.binary_head))
    else:
        message = grpc_request(json.loads(body), args.model)
        asyncio.run(grpc_load(args.target, message, args.concurrency, args.count, args.duration, args.warmup))


if __name__ == "__main__":
    main()
