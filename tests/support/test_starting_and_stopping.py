"""An engine as it starts and stops, over real sockets: while parallel workers load the model, readiness and inference
answer 503 with Retry-After (the engine's state, not the client's mistake); every process writes one JSON object
per line, uvicorn's own lines and the workers' included; one line states the effective settings; SIGTERM says once
that it waits for gRPC calls in flight."""

import json

import numpy as np
import pytest
import requests
from hostile import HERE, wait_until

from chariot_support.dev.testing import chariot_request, image_input, run_engine
from chariot_support.runtime.plan import ServingPlan
from chariot_support.server.server import settings_message
from chariot_support.settings import EngineSettings

PIXELS = np.zeros((32, 48, 3), np.uint8)
WORKERS = 2
GRPC_WAIT = "for gRPC calls in flight"


def json_lines(log: str) -> list[dict]:
    """Every line of the engine's log as a JSON object; a line that is not one fails the test, naming it."""
    lines = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            raise AssertionError(f"a log line that is not JSON: {line!r}") from None
        assert isinstance(entry, dict), line
        lines.append(entry)
    return lines


def settings_line(entries: list[dict]) -> dict:
    (line,) = [e for e in entries if e["message"].startswith("settings: ")]
    return line


@pytest.mark.slow
def test_while_workers_load_the_engine_answers_503_with_retry_after_and_every_process_logs_json():
    # The workers take 4 s to load the model; the checks below take well under a second once REST answers.
    env = {"MLSERVER_PARALLEL_WORKERS": str(WORKERS), "FAULTY_LOAD_SECONDS": "4", "CHARIOT_THREADS": "2"}
    with run_engine("faulty_engine", src=HERE, env=env, loading=True) as engine:
        health = requests.get(f"{engine.url}/v2/health/ready", timeout=5)
        root = requests.get(f"{engine.url}/ready", timeout=5)
        model = requests.get(f"{engine.url}/v2/models/m-faulty/ready", timeout=5)
        body = chariot_request(image_input("image", PIXELS))
        infer = requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=json.dumps(body), timeout=30)
        assert "loaded FaultyModel" not in engine.log(), "the model loaded before the checks: they saw nothing"
        for reply in (health, root, model, infer):
            assert reply.status_code == 503, (reply.request.url, reply.status_code, reply.text)
            assert reply.headers.get("retry-after"), f"{reply.request.url}: a 503 without Retry-After"
            assert "retry" in reply.json()["error"], reply.text
        assert health.json()["ready"] is False
        unknown = requests.get(f"{engine.url}/v2/models/m-faulty/versions/7/ready", timeout=5)
        assert unknown.status_code == 404, "a version the engine does not serve stays a 404"

        assert wait_until(lambda: requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code == 200, 60)
        assert requests.get(f"{engine.url}/v2/models/m-faulty/ready", timeout=5).status_code == 200
        served = requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=json.dumps(body), timeout=30)
        assert served.status_code == 200, served.text
        engine.wait_for_log("loaded FaultyModel")
    # Stopped, the engine leaves no log file behind in the temp folder; what it wrote is still there to read.
    assert not engine.log_path.exists(), engine.log_path
    entries = json_lines(engine.log())
    messages = [e["message"] for e in entries]
    loaded = [e for e in entries if e["message"].startswith("loaded FaultyModel")]
    assert len(loaded) == WORKERS, f"each worker says where it loaded the model from: {messages}"
    assert all(e["model"] == "m-faulty" for e in loaded)
    assert sum(m.startswith("Started server process") for m in messages) >= 1, "uvicorn's own lines are JSON too"
    assert settings_line(entries)["settings"]["workers"] == WORKERS
    # SIGTERM says once, in the main process and not in each worker, that it waits for gRPC calls; then exits 0.
    assert [m for m in messages if GRPC_WAIT in m] == ["waiting up to 30 s for gRPC calls in flight"]
    assert engine.process.returncode == 0


def test_settings_the_engine_cannot_start_with_are_one_json_line_and_exit_2():
    """Every setting the engine cannot start with (EngineSettings', the model id's, MLServer's: test_settings,
    test_model_id, test_log_format name them) is refused on one path; MLSERVER_CACHE_ENABLED, checked last, shows it."""
    env, words = {"MLSERVER_CACHE_ENABLED": "true"}, "MLSERVER_CACHE_ENABLED is not supported by this engine"
    import json
    import os
    import subprocess
    import sys

    started = subprocess.run(
        [sys.executable, "-m", "chariot_support", "Object Detection"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 2, started.stdout + started.stderr
    assert "Traceback" not in started.stdout + started.stderr
    (line,) = [json.loads(each) for each in started.stdout.splitlines() if each.strip()]
    assert line["level"] == "critical" and words in line["message"], line


def test_the_settings_line_counts_in_words_and_names_no_timeout_where_none_applies():
    engine = EngineSettings.from_env({})
    plan = ServingPlan(threads=1, copies=1, thread_safe=False, inline=False, batching=None)
    assert settings_message(1, engine, plan).startswith(
        "settings: 1 worker process, each with 1 thread and 1 copy; no batching; predict timeout 60 s;"
    )
    inline = ServingPlan(threads=4, copies=1, thread_safe=True, inline=True, batching=None)
    assert settings_message(0, engine, inline).startswith(
        "settings: one process predicting inline on the event loop with one thread-safe model; no batching;"
        " no predict timeout (an inline predict cannot be stopped); requests up to 64 MiB"
    )
