"""What one tiny V2 request costs the engine itself, without the load generator's noise.

    .venv/bin/python bench/app_cost.py            # the REST app called in-process (no HTTP parsing), CPU per request
    .venv/bin/python bench/app_cost.py --http     # a demo engine over HTTP, one keep-alive client: server CPU
    .venv/bin/python bench/app_cost.py --http --h11   # the same with uvicorn's pure-Python parser instead of httptools

Sequential requests of a 32x24 image to the Object Detection demo model; prints microseconds of CPU per request.
Servers listen on 127.0.0.1 and are stopped by process id."""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SRC = ROOT / "{{cookiecutter.engine_name}}" / "src"
sys.path[:0] = [str(BENCH), str(SRC)]

from images import b64, image  # noqa: E402

BODY = json.dumps({"inputs": [{"name": "image-0", "shape": [1], "datatype": "BYTES", "data": [b64(image("tiny"))]}]})


async def in_process(count: int) -> float:
    from chariot_support.model.demo import DEMO_MODELS
    from chariot_support.model.tasks import TaskType
    from chariot_support.server.server import build_server
    from chariot_support.settings import EngineSettings

    server = build_server(DEMO_MODELS[TaskType.OBJECT_DETECTION], "demo", EngineSettings.from_env())
    served = server.model
    await server._model_registry.load(served)
    app = server._rest_server._app
    body = BODY.encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v2/models/m-demo/infer",
        "raw_path": b"/v2/models/m-demo/infer",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"x"), (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8080),
    }

    async def one() -> None:
        sent = []

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            sent.append(message)

        await app({**scope, "state": {}}, receive, send)
        assert sent[0]["status"] == 200, sent

    for _ in range(200):
        await one()
    started = time.process_time()
    for _ in range(count):
        await one()
    return (time.process_time() - started) / count


def over_http(count: int, h11: bool) -> float:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from hostile import cpu_seconds

    from chariot_support.dev.testing import run_demo_engine

    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as hide:
        if h11:  # a module named httptools that cannot be imported: uvicorn falls back to h11
            Path(hide, "httptools.py").write_text("raise ImportError('hidden for the comparison')\n")
            env["PYTHONPATH"] = os.pathsep.join([hide, env["PYTHONPATH"]])
        with run_demo_engine("Object Detection", env=env) as engine:
            connection = http.client.HTTPConnection("127.0.0.1", engine.http_port)

            def one() -> None:
                connection.request("POST", "/v2/models/m-demo/infer", BODY, {"content-type": "application/json"})
                response = connection.getresponse()
                response.read()
                assert response.status == 200

            for _ in range(300):
                one()
            started = cpu_seconds(engine.process.pid)
            for _ in range(count):
                one()
            return (cpu_seconds(engine.process.pid) - started) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="over HTTP to a running demo engine")
    parser.add_argument("--h11", action="store_true", help="with --http: uvicorn's pure-Python parser")
    parser.add_argument("--count", type=int, default=3000)
    args = parser.parse_args()
    os.environ.setdefault("CHARIOT_LOG_LEVEL", "WARNING")
    if args.http:
        seconds = over_http(args.count, args.h11)
        where = f"over HTTP ({'h11' if args.h11 else 'httptools'}), server"
    else:
        seconds = asyncio.run(in_process(args.count))
        where = "in-process app"
    print(f"{where} CPU per request: {seconds * 1e6:.0f} us over {args.count} requests")


if __name__ == "__main__":
    main()
