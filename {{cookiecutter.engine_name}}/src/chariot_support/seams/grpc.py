"""What the engine relies on in grpc.aio beyond its documented API: an interceptor may serve a unary method as a
stream of requests, of which it reads the one message itself, as raw bytes, before anything is parsed; its answer is
sent with the call's status in one batch, as a unary method's is; and a callback can be told when the call has
ended (its answer and status sent, or the call failed or was cancelled). The client still sees the unary call it
made. `tests/support/test_grpc_seam.py` holds the canary for each assumption (GRPC_CANARIES)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc import aio

EOF = aio.EOF  # what `read` gives when the call ended without a message


def served_raw(handler: grpc.RpcMethodHandler, serve: Callable[[Any, Any], Awaitable[Any]]) -> grpc.RpcMethodHandler:
    """`handler`'s unary method served by `serve(requests, context)` instead: it reads the call's one message with
    `read(context)` (undeserialized bytes: the new handler has no deserializer) and returns the response, which gRPC
    serializes as `handler` would and sends with the call's status in one batch (a stream response would take two:
    the message, then the status)."""
    return grpc.stream_unary_rpc_method_handler(serve, response_serializer=handler.response_serializer)


async def read(context) -> bytes:
    """The call's message, as the bytes the client sent (or EOF)."""
    return await context.read()


def when_ended(context, callback: Callable[[], None]) -> None:
    """Call `callback()` on the event loop once the call has ended: its answer and status sent (a client that does
    not read its answer holds it until then), or the call aborted, failed or cancelled."""
    context.add_done_callback(lambda _context: callback())
