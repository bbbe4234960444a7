"""An engine's model configuration and inference statistics as tritonclient reads them, over HTTP and gRPC: what the
configuration says of the engine (ENGINE_BATCHING, ENGINE_WORKERS and ENGINE_GPUS say how it was started), and that
good requests are counted in success with their queue and compute times, a bad one in fail, images against predict
calls, the same numbers over both transports whichever parallel worker served the requests. Run by
test_tritonclient.py and tests/support/test_stages.py in a process of their own (see tritonclient_support.py)."""

import json
import os
import queue

import pytest
import tritonclient.http as httpclient

from tritonclient_support import INVALID, MODEL, NOT_FOUND, TRANSPORTS, URL, Client, scene_png

BATCHING = int(os.environ.get("ENGINE_BATCHING", "1"))  # CHARIOT_MAX_BATCH_SIZE
WORKERS = int(os.environ.get("ENGINE_WORKERS", "0"))  # MLSERVER_PARALLEL_WORKERS
GPUS = os.environ.get("ENGINE_GPUS", "")  # CUDA_VISIBLE_DEVICES
GOOD = 20
# The extensions the engine serves, and only those (its repository API is off).
EXTENSIONS = ["parameters", "binary_tensor_data", "statistics", "model_configuration"]


@pytest.fixture(scope="module", params=TRANSPORTS)
def client(request) -> Client:
    return Client(request.param)


def as_json(client: Client) -> dict:
    return {"as_json": True} if client.transport == "grpc" else {}


def config_of(client: Client, name: str = MODEL) -> dict:
    config = client.client.get_model_config(name, **as_json(client))
    return config["config"] if client.transport == "grpc" else config


def stats_of(client: Client, name: str = MODEL) -> dict:
    """The model's statistics with every number an int (gRPC's JSON writes 64-bit ones as strings, and leaves zeros
    out)."""
    (stats,) = client.client.get_inference_statistics(name, **as_json(client))["model_stats"]
    durations = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
    inference = {
        key: {f: int(stats["inference_stats"].get(key, {}).get(f, 0)) for f in ("count", "ns")} for key in durations
    }
    batches = {
        int(b["batch_size"]): {
            key: {f: int(b.get(key, {}).get(f, 0)) for f in ("count", "ns")}
            for key in ("compute_input", "compute_infer", "compute_output")
        }
        for b in stats.get("batch_stats", [])
    }
    return {
        "name": stats["name"],
        "version": stats["version"],
        "last_inference": int(stats.get("last_inference", 0)),
        "inference_count": int(stats.get("inference_count", 0)),
        "execution_count": int(stats.get("execution_count", 0)),
        "inference_stats": inference,
        "batch_stats": batches,
    }


def all_at_once(client: Client, count: int) -> list:
    """`count` requests of one image sent together, as batches form from them (the demo answers at once: sent one
    after another, each would go alone), and their results."""
    inputs = [[client.image("image-0", scene_png(flip=bool(i % 2)))] for i in range(count)]
    if client.transport == "http":
        together = httpclient.InferenceServerClient(URL.removeprefix("http://"), concurrency=count, network_timeout=60)
        return [sent.get_result() for sent in [together.async_infer(MODEL, each) for each in inputs]]
    answered: queue.Queue = queue.Queue()
    for each in inputs:
        client.client.async_infer(MODEL, each, callback=lambda result, error: answered.put((result, error)))
    results = [answered.get(timeout=60) for _ in range(count)]
    assert not [error for _, error in results if error is not None], results
    return [result for result, _ in results]


def test_the_server_lists_the_extensions_it_serves(client):
    assert client.client.get_server_metadata(**as_json(client))["extensions"] == EXTENSIONS


def test_the_model_configuration_says_how_the_engine_serves(client):
    config = config_of(client, "m-named-by-chariot")
    assert config["name"] == "m-named-by-chariot" and config["backend"] == "mlserver"
    assert config["platform"].startswith("chariot-v2-kserve_")
    assert int(config.get("max_batch_size", 0)) == (BATCHING if BATCHING > 1 else 0)
    tensors = [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in (*config["input"], *config["output"])]
    assert tensors == [("image", "TYPE_STRING", [1])] * 2
    if BATCHING > 1:
        assert int(config["dynamic_batching"]["max_queue_delay_microseconds"]) == 5000  # CHARIOT_MAX_BATCH_WAIT_MS
    else:
        assert "dynamic_batching" not in config
    groups = config["instance_group"]
    assert [g["name"] for g in groups] == ([f"worker-{i}" for i in range(WORKERS)] if WORKERS else [MODEL])
    assert {g["kind"] for g in groups} == {"KIND_MODEL" if GPUS else "KIND_CPU"}
    assert all(int(g["count"]) >= 1 for g in groups)
    parameters = {key: value["string_value"] for key, value in config["parameters"].items()}
    if GPUS:  # each worker's share, as the engine split CUDA_VISIBLE_DEVICES
        shares = GPUS.split(",")
        assert parameters["gpus"] == "; ".join(f"worker-{i}: {shares[i % len(shares)]}" for i in range(WORKERS))


def test_an_unknown_model_or_version_is_not_found(client):
    for call in (client.client.get_model_config, client.client.get_inference_statistics):
        error = client.error(lambda call=call: call("no-such-model"))
        assert NOT_FOUND[client.transport] in str(error) and "this engine serves" in str(error), error
        error = client.error(lambda call=call: call(MODEL, model_version="7"))
        assert NOT_FOUND[client.transport] in str(error) and "no version '7'" in str(error), error


def test_requests_are_counted_in_the_statistics_the_same_over_both_transports(client):
    """Good requests in success, with queue and compute times; a bad one in fail; each image an inference, each
    predict call an execution (one call answers a batch: counted once, under its batch's size)."""
    other = Client("grpc" if client.transport == "http" else "http")
    before = stats_of(client)

    answers = [json.dumps(client.results(result, "image-0")) for result in all_at_once(client, GOOD)]
    bad = client.error(lambda: client.infer(MODEL, [client.image("image-0", b"hello, not a picture")]))
    assert INVALID[client.transport] in str(bad), bad
    after, seen_by_other = stats_of(client), stats_of(other)
    assert after == seen_by_other, "REST and gRPC read different statistics"
    assert after["name"] == MODEL and after["version"] == "1" and after["last_inference"] > 0
    delta = {
        key: {f: after["inference_stats"][key][f] - before["inference_stats"][key][f] for f in ("count", "ns")}
        for key in after["inference_stats"]
    }
    assert delta["success"]["count"] == GOOD and delta["fail"]["count"] == 1, delta
    for key in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output"):
        assert delta[key]["ns"] > 0, (key, delta)
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert delta[key]["count"] == GOOD, (key, delta)
    # A request's stages are within its whole time.
    stages = sum(delta[key]["ns"] for key in ("queue", "compute_input", "compute_infer", "compute_output"))
    assert stages < delta["success"]["ns"], delta
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == GOOD, (inferences, executions)
    executed = {
        size: batch["compute_infer"]["count"]
        - before["batch_stats"].get(size, {"compute_infer": {"count": 0}})["compute_infer"]["count"]
        for size, batch in after["batch_stats"].items()
    }
    executed = {size: count for size, count in executed.items() if count}
    assert sum(executed.values()) == executions, (executed, executions)
    assert sum(size * count for size, count in executed.items()) == inferences, executed
    if BATCHING > 1:  # whether batches formed is the machine's timing (test_batch_metrics.py makes them form)
        assert set(executed) <= set(range(1, BATCHING + 1)), executed
    else:
        assert executed == {1: GOOD}, executed
    if WORKERS:  # the model answers with its process id: every worker served, and each one's requests counted
        assert len({json.loads(a)[0]["label"].split("/")[0] for a in answers}) == WORKERS, answers
