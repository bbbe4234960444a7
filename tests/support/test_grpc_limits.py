"""The pieces of the gRPC call limits that need no server: where a call's message is parsed."""

import asyncio
import threading

from chariot_support import grpc_limits
from chariot_support.admission import LARGE_BODY


def _parsed_on(size: int) -> tuple[str, bytes]:
    """Where off_loop_if_large ran its function for a call whose message is `size` bytes, and what it returned."""

    async def call() -> tuple[str, bytes]:
        grpc_limits._message_bytes.set(size)
        loop_thread = threading.get_ident()

        def parse(message: bytes) -> tuple[str, bytes]:
            return ("loop" if threading.get_ident() == loop_thread else "thread"), message.upper()

        return await grpc_limits.off_loop_if_large(parse, b"abc")

    return asyncio.run(call())


def test_a_small_message_is_parsed_on_the_event_loop():
    assert _parsed_on(LARGE_BODY - 1) == ("loop", b"ABC")


def test_a_large_message_is_parsed_in_a_worker_thread_so_health_checks_answer_meanwhile():
    assert _parsed_on(LARGE_BODY) == ("thread", b"ABC")


def test_the_size_is_the_calls_own():
    async def main() -> list[str]:
        async def one(size: int) -> str:
            grpc_limits._message_bytes.set(size)
            await asyncio.sleep(0)  # the other call sets its size meanwhile
            loop_thread = threading.get_ident()
            return await grpc_limits.off_loop_if_large(
                lambda: "loop" if threading.get_ident() == loop_thread else "thread"
            )

        return await asyncio.gather(one(LARGE_BODY * 60), one(100))

    assert asyncio.run(main()) == ["thread", "loop"]
