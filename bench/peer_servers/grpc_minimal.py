"""The least a gRPC server can do and still answer a chariot-v2-kserve detect call: the demo's work (demo_answer.py) on
each input's base64 image, with nothing around it (no limits, checks, metrics or logs). `aio`: grpc.aio, the work on
a pool of `threads` threads (as the engine and MLServer serve it); `sync`: grpc's own thread-pool server, the work in
its handler threads. Serves on 127.0.0.1:PORT; prints "ready"."""

from __future__ import annotations

import asyncio
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import cv2
import grpc
from demo_answer import Demo, decode
from grpc import aio
from mlserver.grpc import dataplane_pb2 as pb
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceServicer, add_GRPCInferenceServiceServicer_to_server

cv2.setNumThreads(1)  # as the engine sets it: the threads spread the work over the cores
DEMO = Demo("detection")


def answer(request: pb.ModelInferRequest) -> pb.ModelInferResponse:
    outputs = [
        pb.ModelInferResponse.InferOutputTensor(
            name=tensor.name,
            datatype="BYTES",
            shape=[1],
            contents=pb.InferTensorContents(
                bytes_contents=[json.dumps(DEMO.find(decode(tensor.contents.bytes_contents[0]))).encode()]
            ),
        )
        for tensor in request.inputs
    ]
    return pb.ModelInferResponse(model_name=request.model_name, outputs=outputs)


class OnLoop(GRPCInferenceServiceServicer):
    def __init__(self, pool: ThreadPoolExecutor):
        self.pool = pool

    async def ModelInfer(self, request, context):
        return await asyncio.get_running_loop().run_in_executor(self.pool, answer, request)


class InHandler(GRPCInferenceServiceServicer):
    def ModelInfer(self, request, context):
        return answer(request)


async def serve_aio(port: int, pool: ThreadPoolExecutor) -> None:
    server = aio.server()
    add_GRPCInferenceServiceServicer_to_server(OnLoop(pool), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


def main() -> None:
    port, mode, threads = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    pool = ThreadPoolExecutor(threads)
    if mode == "aio":
        asyncio.run(serve_aio(port, pool))
        return
    server = grpc.server(pool)
    add_GRPCInferenceServiceServicer_to_server(InHandler(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
