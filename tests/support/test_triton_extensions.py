"""Triton's model configuration says what is true of how the engine serves (triton/config.py), and its statistics
count what Triton's fields mean (triton/statistics.py); tritonclient reads both from real engines
(tritonclient_statistics.py), and the gRPC messages as its own."""

from mlserver.settings import ModelParameters, ModelSettings
from mlserver.types import MetadataTensor

from chariot_support.settings import EngineSettings
from chariot_support.stages.histograms import StageHistograms
from chariot_support.stages.timing import RuntimeStages
from chariot_support.triton import messages
from chariot_support.triton.config import model_config
from chariot_support.triton.statistics import InferenceStatistics

MODEL = ModelSettings(
    name="m-demo",
    implementation="chariot_support.runtime.runtime.ChariotRuntime",
    platform="chariot-v2-kserve_object_detection",
    inputs=[MetadataTensor(name="image", datatype="BYTES", shape=[1])],
    outputs=[MetadataTensor(name="image", datatype="BYTES", shape=[1])],
    parameters=ModelParameters(version="1", extra={"task_type": "Object Detection", "model_class": "m:Model"}),
)


def test_the_configuration_follows_batching_workers_copies_and_gpus():
    alone = model_config(MODEL, EngineSettings(), copies=3, workers=0, gpus=[[]])
    assert alone["max_batch_size"] == 0 and "dynamic_batching" not in alone
    assert alone["instance_group"] == [{"name": "m-demo", "kind": "KIND_CPU", "count": 3}]
    assert "gpus" not in alone["parameters"]
    batched = model_config(
        MODEL, EngineSettings(max_batch_size=16, max_batch_wait_ms=2.5), copies=1, workers=2, gpus=[["0", "1"], ["2"]]
    )
    assert batched["max_batch_size"] == 16 and batched["dynamic_batching"] == {"max_queue_delay_microseconds": 2500}
    assert [(g["name"], g["kind"], g["count"]) for g in batched["instance_group"]] == [
        ("worker-0", "KIND_MODEL", 1),
        ("worker-1", "KIND_MODEL", 1),
    ]
    assert batched["parameters"]["gpus"] == {"string_value": "worker-0: 0,1; worker-1: 2"}
    # Each image is an input of its own holding one element, whatever batching does across requests.
    assert batched["input"] == [
        {"name": "image", "data_type": "TYPE_STRING", "format": "FORMAT_NONE", "dims": [1], "optional": False}
    ]
    # Every field is one of the gRPC message's: nothing a REST client reads is lost over gRPC.
    sent = messages.from_json(messages.ModelConfigResponse, {"config": batched})
    assert (
        messages.json_format.MessageToDict(sent.config, preserving_proto_field_name=True)["parameters"]
        == (batched["parameters"])
    )


def test_statistics_count_requests_images_and_each_batch_once():
    names = {"m-demo": "m-demo", "m-deployed": "m-demo", "m-other": "m-other"}
    histograms = StageHistograms()  # counted with the statistics: the answered requests' stages
    stats = InferenceStatistics("m-demo", "1", names.__getitem__, histograms)
    stages = (1.0, 2.0, 1.0, 3.0, 4.0, 5.0, 2.0, 1.0)  # milliseconds, as the transports hand them
    # Two requests in one predict of three images (the first ran it), and one alone.
    runtime = RuntimeStages(0.003, 0.0, 0.004, 0.005, 0.002, seconds=0.014, images=2, batch=3, executed=True)
    stats.answered((stages, 0.02, 5.0, runtime))
    stats.answered((stages, 0.02, 5.0, runtime._replace(images=1, executed=False)))
    stats.answered((stages, 0.01, 5.0, runtime._replace(images=1, batch=1)))
    stats.failed("m-demo", 0.5, 5.0)
    stats.failed("m-other", 0.5, 5.0)  # another model's: not this one's
    assert 'chariot_request_stage_seconds_count{stage="read"} 3.0' in histograms.exposition().decode()
    got = stats.model_stats("m-deployed")
    assert got["name"] == "m-deployed" and got["version"] == "1"
    assert (got["inference_count"], got["execution_count"]) == (4, 2)
    inference = got["inference_stats"]
    assert inference["success"] == {"count": 3, "ns": 50_000_000} and inference["fail"] == {
        "count": 1,
        "ns": 500_000_000,
    }
    assert inference["queue"] == {"count": 3, "ns": 15_000_000}  # admission and queue
    assert inference["compute_infer"] == {"count": 3, "ns": 15_000_000}
    assert inference["cache_hit"] == inference["cache_miss"] == {"count": 0, "ns": 0}
    batches = {b["batch_size"]: b for b in got["batch_stats"]}
    assert batches[3]["compute_infer"] == {"count": 1, "ns": 5_000_000}  # the batch's one call
    assert batches[3]["compute_input"] == {"count": 1, "ns": 8_000_000}  # both requests' decoding
    assert batches[1]["compute_infer"] == {"count": 1, "ns": 5_000_000}
