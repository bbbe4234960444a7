"""KServe V1's and TensorFlow Serving's GET routes at `/v1/models/...`: the models served, each model's status
and its metadata (inference there is the front's: rest/inference.py)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.responses import Response

from chariot_support.error_bodies import error_response, json_response
from chariot_support.model.tasks import TaskType
from chariot_support.pipeline.pipeline import SERVING_ERRORS
from chariot_support.protocols.legacy import DEFAULT_SIGNATURE, STATUS_PATH
from chariot_support.seams.mlserver import unwrap_worker_error


def model_status(name: str, version: str, ready: bool) -> dict:
    """KServe's model-ready object and TensorFlow Serving's GetModelStatusResponse, in one."""
    state = (
        {"state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
        if ready
        else {
            "state": "LOADING",
            "status": {"error_code": "UNAVAILABLE", "error_message": "the model is still loading"},
        }
    )
    return {"name": name, "ready": ready, "model_version_status": [{"version": version, **state}]}


def _tensor(dtype: str, dims: list[int], name: str) -> dict:
    return {
        "dtype": dtype,
        "tensor_shape": {"dim": [{"size": str(d), "name": ""} for d in dims], "unknown_rank": False},
        "name": name,
    }


def model_metadata(name: str, version: str, task: TaskType) -> dict:
    """TensorFlow Serving's GetModelMetadataResponse: the inputs a row may carry and the output per image."""
    inputs = {
        "image": _tensor("DT_STRING", [-1], "image"),
        "action": _tensor("DT_STRING", [-1], "action"),
        "score_threshold": _tensor("DT_FLOAT", [-1], "score_threshold"),
        "prompts": _tensor("DT_STRING", [-1, -1], "prompts"),
    }
    signatures = {
        DEFAULT_SIGNATURE: {
            "inputs": inputs,
            # One list of result objects per image; TensorFlow has no dtype for JSON objects.
            "outputs": {"predictions": _tensor("DT_STRING", [-1, -1], "predictions")},
            "method_name": "tensorflow/serving/predict",
        }
    }
    if task is TaskType.IMAGE_CLASSIFICATION:
        signatures["classify"] = {
            "inputs": {"inputs": _tensor("DT_STRING", [-1], "image")},
            "outputs": {
                "classes": _tensor("DT_STRING", [-1, -1], "classes"),
                "scores": _tensor("DT_FLOAT", [-1, -1], "scores"),
            },
            "method_name": "tensorflow/serving/classify",
        }
    return {
        "model_spec": {"name": name, "signature_name": "", "version": version},
        "metadata": {"signature_def": {"signature_def": signatures}},
    }


def install_legacy_routes(app: FastAPI, pipeline: Any) -> None:
    """Serve the model's status and metadata at `/v1/models/...` (inference there is the front's: rest/inference.py)."""

    async def list_models() -> Response:
        return json_response({"models": [pipeline.model_name]})

    async def status(path: str) -> Response:
        match = STATUS_PATH.fullmatch(path)
        if match is None:
            return error_response(404, f"no route for GET /v1/models/{path}")
        try:
            model = await pipeline.model(match["name"], match["version"])
            served = await pipeline.served(match["name"])
        except SERVING_ERRORS as error:
            error = unwrap_worker_error(error)
            return error_response(error.status_code, str(error))
        version = model.version or "1"
        if match["metadata"]:
            return json_response(model_metadata(match["name"], version, served.task))
        return json_response(model_status(match["name"], version, model.ready), 200 if model.ready else 503)

    app.add_api_route("/v1/models", list_models, methods=["GET"])
    app.add_api_route("/v1/models/{path:path}", status, methods=["GET"])
