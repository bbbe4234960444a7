"""Triton's model configuration extension: the served model's configuration as Triton's ModelConfig describes a model,
saying only what is true of this engine, so that a client can rely on every field.

- `max_batch_size`: with batching across requests on, the most images the engine gives the model in one predict
  (CHARIOT_MAX_BATCH_SIZE), with `dynamic_batching` and its queue delay (CHARIOT_MAX_BATCH_WAIT_MS); 0 when it is
  off. Either way each image travels as an input of its own holding one BYTES element, `dims` [1]: a client
  sends a batch of one (perf_analyzer's default `-b 1`), and a tensor holding several images is refused (400).
- `input` and `output`: one image in, its results (one JSON text) out, under the names the model metadata gives;
  a request may carry up to CHARIOT_MAX_INPUTS image inputs under names of its own, each answered by an output of
  the same name (the `parameters` say so).
- `instance_group`: one group per process the model runs in (the engine's, or each parallel worker), `count` the
  model copies in it (one for a thread-safe model, shared by its threads); KIND_CPU where no GPU is visible, else
  KIND_MODEL: the model places itself (a torch model moves to `cuda` in its load), on the GPUs the engine gave its
  process, which the `parameters` name."""

from __future__ import annotations

from typing import Any

from mlserver.settings import ModelSettings

from chariot_support.settings import EngineSettings

BACKEND = "mlserver"  # an MLServer runtime serves the model: chariot_support.runtime.runtime.ChariotRuntime


def model_config(
    model: ModelSettings,
    engine: EngineSettings,
    *,
    copies: int,
    workers: int,
    gpus: list[list[str]],
) -> dict[str, Any]:
    """The configuration of `model` as this engine serves it (Triton's ModelConfig, as JSON), with `copies` of the
    model in each of `workers` parallel workers (0: in the engine's own process), and `gpus`, the GPUs each process
    was given (one list per process; empty when none is visible)."""
    extra = model.parameters.extra if model.parameters else {}
    batching = engine.max_batch_size > 1
    processes = max(1, workers)
    kind = "KIND_MODEL" if any(gpus) else "KIND_CPU"
    groups = [
        {"name": f"worker-{i}" if workers else model.name, "kind": kind, "count": copies} for i in range(processes)
    ]
    parameters = {
        "task_type": extra.get("task_type", ""),
        "model_class": extra.get("model_class", ""),
        "inputs": (
            f"up to {engine.max_inputs} image inputs (CHARIOT_MAX_INPUTS), each named as the client likes, each one"
            " BYTES element holding the image file (base64, or the file itself), shape [1]; each answered by an"
            " output of the same name holding its results as one JSON text"
        ),
        "predict_timeout_s": f"{engine.predict_timeout:g}",
    }
    if any(gpus):
        parameters["gpus"] = "; ".join(
            f"{group['name']}: {','.join(share) or 'none'}" for group, share in zip(groups, gpus, strict=False)
        )
    config: dict[str, Any] = {
        "name": model.name,
        "platform": model.platform,
        "backend": BACKEND,
        "max_batch_size": engine.max_batch_size if batching else 0,
        "input": [
            {"name": tensor.name, "data_type": "TYPE_STRING", "format": "FORMAT_NONE", "dims": [1], "optional": False}
            for tensor in model.inputs or ()
        ],
        "output": [{"name": tensor.name, "data_type": "TYPE_STRING", "dims": [1]} for tensor in model.outputs or ()],
        "instance_group": groups,
        "parameters": {key: {"string_value": str(value)} for key, value in parameters.items()},
        "model_transaction_policy": {"decoupled": False},
    }
    if batching:
        config["dynamic_batching"] = {"max_queue_delay_microseconds": round(engine.max_batch_wait_ms * 1000)}
    return config
