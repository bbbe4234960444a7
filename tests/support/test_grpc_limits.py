"""The pieces of the gRPC call limits that need no server: where a call's message is parsed, which calls may read
their message at once, and how many fields a message holds before protobuf builds it."""

import asyncio
import threading

import pytest
from mlserver.grpc import dataplane_pb2 as pb

from chariot_support.grpc import limits as grpc_limits
from chariot_support.memory.budgets import LARGE_BODY
from chariot_support.protocols import v2_grpc


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


def test_one_call_reads_at_a_time_and_the_next_goes_in_as_it_leaves():
    async def scenario():
        slots = grpc_limits.ReadingSlots(4, patience=10)
        first = await slots.enter(1)
        second = asyncio.create_task(slots.enter(5))
        await asyncio.sleep(0.05)
        waited = not second.done()
        slots.leave(first)
        return waited, await asyncio.wait_for(second, 1), len(slots.readers)

    waited, second, readers = asyncio.run(scenario())
    assert waited and second is not None and readers == 1


def test_a_call_that_cannot_start_within_its_wait_is_told_so():
    async def scenario():
        slots = grpc_limits.ReadingSlots(4, patience=10)
        await slots.enter(1)
        started = asyncio.get_running_loop().time()
        refused = await slots.enter(0.1)
        return refused, asyncio.get_running_loop().time() - started, len(slots.readers)

    refused, took, readers = asyncio.run(scenario())
    assert refused is None and 0.1 <= took < 1 and readers == 1


def test_slow_readers_let_others_start_up_to_the_most():
    async def scenario():
        loop = asyncio.get_running_loop()
        slots = grpc_limits.ReadingSlots(3, patience=0.1)
        start = loop.time()
        tokens = [await slots.enter(5) for _ in range(3)]  # the 2nd and 3rd after the patience of those before
        entered = loop.time() - start
        fourth = await slots.enter(0.3)  # three slow readers: the most
        for token in tokens:
            slots.leave(token)
        return entered, fourth, await slots.enter(0.1)

    entered, fourth, again = asyncio.run(scenario())
    assert 0.2 <= entered < 1.5
    assert fourth is None
    assert again is not None


def _many(elements: int, **parameters: str) -> bytes:
    message = pb.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="x", datatype="BYTES", shape=[1])
    tensor.contents.bytes_contents.extend([b"x"] * elements)
    for key, value in parameters.items():
        message.parameters[key].string_param = value
    return message.SerializeToString()


def test_fields_are_counted_at_every_depth_from_the_wire():
    # model_name, inputs, then in the input its name, datatype, shape and contents: 6 fields beside the elements.
    assert not v2_grpc.fields_past(_many(94), 100)
    assert v2_grpc.fields_past(_many(95), 100)
    # each parameter is a map entry holding a key and a value message holding a string: 4 fields
    assert not v2_grpc.fields_past(_many(1, **{f"k{i}": "v" for i in range(23)}), 100)
    assert v2_grpc.fields_past(_many(1, **{f"k{i}": "v" for i in range(24)}), 100)


def test_a_large_payload_in_few_fields_is_read_by_its_lengths():
    raw = _many(1) + pb.ModelInferRequest(raw_input_contents=[b"\0" * (8 << 20)]).SerializeToString()
    assert not v2_grpc.fields_past(raw, 10)


@pytest.mark.parametrize("cut", [b"\x0a\xff", b"\x0a", b"\x80"])
def test_a_message_cut_short_is_left_to_protobuf_to_refuse(cut):
    assert not v2_grpc.fields_past(cut, 100)


def test_refusals_after_the_first_are_logged_as_one_line_of_counts_per_interval(caplog):
    """Thousands of refused calls cost a few lines: the first with its reason and message, then one line each
    interval with how many more were refused, by reason, and none when none were."""

    async def refuse() -> None:
        log = grpc_limits.RefusalLog(every=0.05)
        log.refused("max_calls", "the engine is serving as many gRPC calls as it takes at once")
        for _ in range(40):
            log.refused("max_calls", "ignored")
        for _ in range(2):
            log.refused("read_timeout", "ignored")
        await asyncio.sleep(0.2)  # the interval passes, then passes again with nothing to say

    with caplog.at_level("WARNING", logger="chariot_support"):
        asyncio.run(refuse())
    lines = [r.getMessage() for r in caplog.records if "gRPC call" in r.getMessage()]
    assert lines == [
        "refused a gRPC call (max_calls): the engine is serving as many gRPC calls as it takes at once",
        "refused 42 more gRPC calls in the last 0.05 s (40 max_calls, 2 read_timeout)",
    ]
