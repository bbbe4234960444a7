"""Canaries for what the engine relies on in grpc.aio beyond its documented API (chariot_support/seams/grpc.py):
a real grpc.aio server on loopback, a unary method served raw by an interceptor, and a real client calling it. On a
gRPC where an assumption no longer holds, the canary says which in plain words."""

import ast
import asyncio
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
from grpc import aio

from chariot_support.seams import grpc as seam

METHOD = "/canary.Echo/Say"


def _unary(request: bytes, context) -> bytes:
    return b"unary:" + request


class RawInterceptor(aio.ServerInterceptor):
    """Serves every unary method raw, as the engine's call limits do, noting what it read."""

    def __init__(self):
        self.read: list = []

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)

        async def serve(_requests, context):
            message = await seam.read(context)
            self.read.append(message)
            return handler.unary_unary(handler.request_deserializer(message), context)

        return seam.served_raw(handler, serve)


@asynccontextmanager
async def _channel(interceptor: aio.ServerInterceptor, handler: grpc.RpcMethodHandler | None = None):
    """A channel to a grpc.aio server on loopback serving METHOD with `handler` (plain `_unary` when None) behind
    `interceptor`; the server stops when the block ends."""
    server = aio.server(interceptors=[interceptor])
    handler = handler or grpc.unary_unary_rpc_method_handler(_unary)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("canary.Echo", {"Say": handler})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await server.stop(None)


def _call(*messages: bytes) -> tuple[list, RawInterceptor]:
    async def run():
        interceptor = RawInterceptor()
        handler = grpc.unary_unary_rpc_method_handler(
            _unary, request_deserializer=lambda b: b.upper(), response_serializer=lambda b: b + b"!"
        )
        async with _channel(interceptor, handler) as channel:
            say = channel.unary_unary(METHOD)
            answers = [await say(m, timeout=10) for m in messages]
        return answers, interceptor

    return asyncio.run(run())


def test_an_interceptor_serves_a_unary_method_raw_and_the_client_sees_its_unary_call():
    answers, interceptor = _call(b"one", b"two")
    assert interceptor.read == [b"one", b"two"], (
        "grpc.aio no longer hands a stream handler with no deserializer the message's raw bytes from"
        f" context.read() ({interceptor.read}): the engine could not count a message before it is parsed"
    )
    assert answers == [b"unary:ONE!", b"unary:TWO!"], (
        "a unary call served as a stream of one message no longer reaches its client as the unary answer,"
        f" serialized by the original handler ({answers})"
    )


def test_a_call_without_a_message_reads_eof():
    async def run():
        seen = []

        class Reader(aio.ServerInterceptor):
            async def intercept_service(self, continuation, details):
                handler = await continuation(details)

                async def serve(_requests, context):
                    seen.append(await seam.read(context))
                    return b"none"

                return seam.served_raw(handler, serve)

        async with _channel(Reader()) as channel:
            call = channel.stream_stream(METHOD)(timeout=10)
            await call.done_writing()  # a stream call that sends no message, as a broken client might
            await call.read()
        return seen

    assert asyncio.run(run()) == [seam.EOF], "grpc.aio no longer reads EOF for a call that ended without a message"


def test_the_end_of_every_call_is_told_once_answered_aborted_or_cancelled():
    async def run():
        ended: list[bytes] = []
        release = asyncio.Event()

        class Ends(aio.ServerInterceptor):
            async def intercept_service(self, continuation, details):
                await continuation(details)

                async def serve(_requests, context):
                    message = await seam.read(context)
                    seam.when_ended(context, lambda: ended.append(message))
                    if message == b"abort":
                        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no")
                    if message == b"hang":
                        await release.wait()
                    return message

                return seam.served_raw(grpc.unary_unary_rpc_method_handler(_unary), serve)

        try:
            async with _channel(Ends()) as channel:
                say = channel.unary_unary(METHOD)
                assert await say(b"answer", timeout=10) == b"answer"
                try:
                    await say(b"abort", timeout=10)
                except aio.AioRpcError as error:
                    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
                hung = say(b"hang", timeout=10)
                await asyncio.sleep(0.2)
                hung.cancel()
                for _ in range(100):
                    if len(ended) == 3:
                        break
                    await asyncio.sleep(0.02)
        finally:
            release.set()
        return ended

    ended = asyncio.run(run())
    assert sorted(ended) == [b"abort", b"answer", b"hang"], (
        "grpc.aio no longer calls a call's done callback once for an answered, an aborted and a cancelled call"
        f" ({ended}): the engine's gRPC call limits would leak their places and body budget"
    )


def test_every_use_of_grpc_in_the_seam_has_a_canary():
    """What seams/grpc.py calls of gRPC's (beyond building a handler) is listed in GRPC_CANARIES, and only that."""
    tree = ast.parse(Path(seam.__file__).read_text())
    used = {
        f"{node.value.id}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("grpc", "aio", "context")
    }
    assert used == set(GRPC_CANARIES), f"seams/grpc.py uses {sorted(used)}; GRPC_CANARIES names {sorted(GRPC_CANARIES)}"


_RAW = (test_an_interceptor_serves_a_unary_method_raw_and_the_client_sees_its_unary_call,)
GRPC_CANARIES = {
    "grpc.RpcMethodHandler": _RAW,
    "grpc.stream_unary_rpc_method_handler": _RAW,
    "context.read": _RAW,
    "context.add_done_callback": (test_the_end_of_every_call_is_told_once_answered_aborted_or_cancelled,),
    "aio.EOF": (test_a_call_without_a_message_reads_eof,),
}
