"""What batching across requests does is visible: the start-up line states the batching (and the other effective
settings), and the metrics port counts the images of each batched predict and how long each request waited."""

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import requests
from hostile import HERE

from chariot_support.dev.testing import chariot_request, image_input, run_engine

CLIENTS = 16


def histogram(metrics: str, name: str) -> tuple[float, float, dict[str, float]]:
    """The count, sum and cumulative buckets of the unlabelled histogram `name` in Prometheus' text format."""
    values = dict(re.findall(rf"^{name}_(count|sum) (\S+)$", metrics, re.M))
    assert values, f"{name} is not among the metrics:\n{metrics[:3000]}"
    buckets = dict(re.findall(rf'^{name}_bucket{{le="([^"]+)"}} (\S+)$', metrics, re.M))
    return float(values["count"]), float(values["sum"]), {le: float(n) for le, n in buckets.items()}


def test_batch_sizes_and_waits_reach_the_metrics_and_the_settings_line_states_the_batching():
    env = {"CHARIOT_MAX_BATCH_SIZE": "8", "CHARIOT_MAX_BATCH_WAIT_MS": "200", "CHARIOT_THREADS": "2"}
    start = threading.Barrier(CLIENTS)

    def send(engine, n: int) -> int:
        body = chariot_request(image_input("image", np.full((8, 8, 3), n, np.uint8)), tag=str(n))
        start.wait()
        reply = requests.post(f"{engine.url}/v2/models/m-batching/infer", data=json.dumps(body), timeout=60)
        return reply.status_code

    with run_engine("batching_engine", src=HERE, env=env) as engine:
        with ThreadPoolExecutor(CLIENTS) as pool:
            assert list(pool.map(lambda n: send(engine, n), range(CLIENTS))) == [200] * CLIENTS
        metrics = requests.get(f"http://127.0.0.1:{engine.metrics_port}/metrics", timeout=10).text
        (stats,) = requests.get(f"{engine.url}/v2/models/m-batching/stats", timeout=10).json()["model_stats"]
        log = engine.log()

    calls, images, sizes = histogram(metrics, "chariot_batch_size")
    assert images == CLIENTS, "each image was counted in exactly one predict"
    assert 2 <= calls < CLIENTS, f"{CLIENTS} requests of one image in batches of at most 8 took {calls:g} predicts"
    assert sizes["8.0"] == calls, "no batch holds more than CHARIOT_MAX_BATCH_SIZE images"
    # Triton's statistics count the same: each image an inference, each batch's predict one execution, by its size.
    assert (stats["inference_count"], stats["execution_count"]) == (CLIENTS, calls), stats
    batches = {b["batch_size"]: b["compute_infer"]["count"] for b in stats["batch_stats"]}
    assert sum(batches.values()) == calls and sum(size * n for size, n in batches.items()) == CLIENTS, batches
    assert max(batches) > 1 and all(b["compute_infer"]["ns"] > 0 for b in stats["batch_stats"]), stats
    waits, waited, _ = histogram(metrics, "chariot_batch_wait_seconds")
    assert waits == CLIENTS, "every request's wait for its batch is counted"
    assert 0 < waited < CLIENTS * 60

    (line,) = [json.loads(x) for x in log.splitlines() if x.startswith("{") and '"settings: ' in x]
    settings = line["settings"]
    assert (settings["max_batch_size"], settings["max_batch_wait_ms"]) == (8, 200)
    assert (settings["workers"], settings["threads"], settings["copies"], settings["thread_safe"]) == (0, 2, 1, True)
    assert settings["max_request_mb"] == 64 and settings["predict_timeout_s"] == 60
    assert "batches of up to 8 images within 200 ms" in line["message"], line["message"]
    assert "one process with 2 threads" in line["message"], line["message"]
