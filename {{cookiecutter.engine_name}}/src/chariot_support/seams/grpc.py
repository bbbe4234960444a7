"""What the engine relies on in grpc.aio beyond its documented API: an interceptor may serve a unary method as a
stream of one message that it reads itself, as raw bytes, before anything is parsed; the client still sees the
unary call it made. `tests/support/test_grpc_seam.py` holds the canary for each assumption (GRPC_CANARIES)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc import aio

EOF = aio.EOF  # what `read` gives when the call ended without a message


def served_raw(handler: grpc.RpcMethodHandler, serve: Callable[[Any, Any], Awaitable[None]]) -> grpc.RpcMethodHandler:
    """`handler`'s unary method served by `serve(requests, context)` instead: it reads the call's one message with
    `read(context)` (undeserialized bytes: the new handler has no deserializer) and answers with `answer(context,
    response)`, serialized as `handler` would."""
    return grpc.stream_stream_rpc_method_handler(serve, response_serializer=handler.response_serializer)


async def read(context) -> bytes:
    """The call's message, as the bytes the client sent (or EOF)."""
    return await context.read()


async def answer(context, response: Any) -> None:
    """Send the unary call's one response; returns once it is on its way."""
    await context.write(response)
