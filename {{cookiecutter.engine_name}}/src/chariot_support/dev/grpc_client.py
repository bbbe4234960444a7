"""Talking to an engine over gRPC in tests, as a client would: the Open Inference Protocol's ModelInferRequest built
from the same Chariot request a REST test sends, and the results read back; of MLServer, only its generated messages
are imported."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from chariot_support.protocols.tensors import NUMERIC_DTYPES

# Each datatype's field of InferTensorContents, as the Open Inference Protocol's gRPC schema names them.
_CONTENTS = {"BOOL": "bool", "UINT64": "uint64", "INT64": "int64", "FP32": "fp32", "FP64": "fp64", "BYTES": "bytes"}
_CONTENTS.update({kind: "uint" for kind in ("UINT8", "UINT16", "UINT32")})
_CONTENTS.update({kind: "int" for kind in ("INT8", "INT16", "INT32")})


def oip_messages():
    """The Open Inference Protocol's gRPC messages (MLServer's generated `mlserver.grpc.dataplane_pb2`), loaded from
    its file without importing the rest of MLServer: its server, FastAPI and pandas cost about a second of every test
    process that only talks to an engine. The module is registered under its own name, so a later import of MLServer
    in the same process finds and uses this very module (one set of message classes); import it by that name
    (`from mlserver.grpc import dataplane_pb2`), as the attribute `mlserver.grpc.dataplane_pb2` is not set then."""
    name = "mlserver.grpc.dataplane_pb2"
    if name not in sys.modules:
        package = importlib.util.find_spec("mlserver")  # found, not imported
        if package is None or package.origin is None:
            raise ModuleNotFoundError("MLServer is not installed: it carries the gRPC messages", name=name)
        spec = importlib.util.spec_from_file_location(name, Path(package.origin).parent / "grpc" / "dataplane_pb2.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def grpc_request(body: dict, model_name: str, *, raw: bool = False):
    """The gRPC ModelInferRequest carrying the same Chariot request as the REST `body`. gRPC parameters hold no
    lists, so list values (prompts) travel JSON-encoded, and BYTES strings travel as their bytes; with `raw`,
    tensor data goes in raw_input_contents (BYTES elements each after its 4-byte little-endian length, numbers
    packed little-endian). A parameter gRPC cannot hold (an object, null) is a TypeError."""
    pb = oip_messages()

    def parameter(key: str, value: Any):
        # The gRPC schema has no double parameter: a number with a fraction travels as its decimal string.
        if isinstance(value, list):
            value = json.dumps(value)
        elif isinstance(value, float):
            value = repr(value)
        kinds = ((bool, "bool_param"), (int, "int64_param"), (str, "string_param"))
        for kind, field in kinds:
            if isinstance(value, kind):
                return pb.InferParameter(**{field: value})
        raise TypeError(f"gRPC parameters cannot hold {key}={value!r}")

    def fill(target, parameters: dict | None) -> None:
        for key, value in (parameters or {}).items():
            target[key].CopyFrom(parameter(key, value))

    message = pb.ModelInferRequest(model_name=model_name)
    if body.get("id") is not None:
        message.id = body["id"]
    fill(message.parameters, body.get("parameters"))
    for t in body["inputs"]:
        data = t.get("data")
        data = data if isinstance(data, list) else [data]
        if t["datatype"] == "BYTES":
            data = [d.encode() if isinstance(d, str) else d for d in data]
        sent = message.inputs.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        fill(sent.parameters, t.get("parameters"))
        if not raw:
            getattr(sent.contents, f"{_CONTENTS[t['datatype']]}_contents").extend(data)
        elif t["datatype"] == "BYTES":
            message.raw_input_contents.append(b"".join(len(d).to_bytes(4, "little") + d for d in data))
        else:
            kind = np.dtype(NUMERIC_DTYPES[t["datatype"]]).newbyteorder("<")
            message.raw_input_contents.append(np.asarray(data, kind).tobytes())
    for output in body.get("outputs") or ():
        fill(message.outputs.add(name=output["name"]).parameters, output.get("parameters"))
    return message


def grpc_results(response) -> dict[str, list]:
    """Each output's result list from a gRPC ModelInferResponse, whichever field carries the bytes."""
    results = {}
    for index, output in enumerate(response.outputs):
        if response.raw_output_contents:
            raw = response.raw_output_contents[index]
            first = raw[4 : 4 + int.from_bytes(raw[:4], "little")]
        else:
            first = output.contents.bytes_contents[0]
        results[output.name] = json.loads(first)
    return results


def grpc_infer(address: str, body: dict, model_name: str, *, timeout: float = 120) -> dict[str, list]:
    """Send the Chariot request `body` to the engine at `address` over gRPC (ModelInfer); each output's results."""
    import grpc

    pb = oip_messages()
    with grpc.insecure_channel(address) as channel:
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=pb.ModelInferRequest.SerializeToString,
            response_deserializer=pb.ModelInferResponse.FromString,
        )
        return grpc_results(infer(grpc_request(body, model_name), timeout=timeout))
