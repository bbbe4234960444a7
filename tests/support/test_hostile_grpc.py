"""gRPC under attack, with the engine's default settings: too many calls at once, large messages, answers never
read, messages never sent, and messages that are not protobuf. Each is refused with a status that says why, the
engine stays under 1.5 GiB and gives it back, and health answers from a new connection meanwhile: over REST within a
second, over gRPC within a second too but for the attacks of large messages, which gRPC copies on its event loop.
The attacks take turns on one engine (the session's faulty engine), each leaving it serving for the next."""

import time

import grpc
import pytest
from grpc_attacks import (
    INFER_METHOD,
    BothHealthProbe,
    RawCalls,
    call_all,
    call_apart,
    call_in_threads,
    infer_message,
    live_calls_apart,
    refused_count,
)
from hostile import HERE, RSSGuard, healthy_and_reset, peak_rss_mib, rss_mib, wait_until

from chariot_support.dev.testing import run_engine

pytestmark = pytest.mark.hostile

LIMIT_MIB = 1536
# grpc-status values as a raw HTTP/2 client reads them
DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, UNAVAILABLE = "4", "8", "14"
CALLS = 120  # unread calls on one connection, past the 64 CHARIOT_GRPC_MAX_CALLS serves


@pytest.fixture
def engine(faulty_engine):
    """The session's faulty engine with default settings, shared by the attacks below: each checks it serves and
    that its memory comes back, so the next starts from a healthy engine (checked live, peak RSS reset)."""
    return healthy_and_reset(faulty_engine)


@pytest.fixture(scope="module")
def strict_engine():
    """An engine with a short gRPC read timeout, four calls at most and 1,000 elements a request."""
    env = {"CHARIOT_GRPC_READ_TIMEOUT": "1", "CHARIOT_GRPC_MAX_CALLS": "4", "CHARIOT_MAX_ELEMENTS": "1000"}
    with run_engine("faulty_engine", src=HERE, env=env) as running:
        yield running


def settled(engine, start: float, slack: float = 150) -> bool:
    """Whether the engine's memory comes back near where it started within a few seconds."""
    return wait_until(lambda: rss_mib(engine.process.pid) < start + slack, 10, 0.25)


def serves(engine) -> bool:
    return call_all(engine, [infer_message()]) == {("OK", ""): 1}


def healthy(probe, grpc_within: float = 1.0, rest_within: float = 1.0) -> None:
    """No probe failed, REST health (what Kubernetes asks) answered within `rest_within` (a second at most, what a
    probe waits), and gRPC's within `grpc_within`."""
    assert not probe.failures, probe.failures[:5]
    assert probe.worst_rest < rest_within, f"health over REST took {probe.worst_rest:.2f} s during the attack"
    assert probe.worst_grpc < grpc_within, f"health over gRPC took {probe.worst_grpc:.2f} s during the attack"


def test_calls_past_the_limit_at_once_are_served_or_refused_by_name_and_counted(engine):
    # 400 calls at once over ten connections, each predict 50 ms: far past the 64 calls in flight.
    counted, logged = refused_count(engine, "max_calls"), len(engine.log())
    messages = [infer_message(fault="sleep", seconds="0.05") for _ in range(400)]
    with BothHealthProbe(engine) as probe:
        answers = call_all(engine, messages, channels=10)
    healthy(probe)
    codes = {code for code, _ in answers}
    assert codes <= {"OK", "RESOURCE_EXHAUSTED"}, answers.most_common(5)
    refused = sum(n for (code, _), n in answers.items() if code == "RESOURCE_EXHAUSTED")
    assert refused, "400 calls at once should pass the 64-call limit"
    details = next(d for code, d in answers if code == "RESOURCE_EXHAUSTED")
    assert "CHARIOT_GRPC_MAX_CALLS" in details
    assert refused_count(engine, "max_calls") - counted == refused
    lines = [line for line in engine.log()[logged:].splitlines() if "refused" in line and "gRPC call" in line]
    # The first refusal's line at once; the counts of the rest once a LOG_EVERY (test_grpc_limits.py).
    assert 1 <= len(lines) <= 3, f"{refused} refusals took {len(lines)} log lines"
    assert "refused a gRPC call (max_calls): " in lines[0] and "CHARIOT_GRPC_MAX_CALLS" in lines[0], lines[0]
    assert serves(engine)


def test_large_messages_at_once_stay_within_the_body_budget_and_memory_comes_back(engine):
    # Six of 60 MiB each, under the 64 MiB message limit: 360 MB of messages, past the 256 MiB body budget (ten, 600 MB
    # of them, peaked at 3.5 GB and held 3.4 GB after, before the budget).
    # (Forty at once, which went past 6 GiB, are measured by scripts/hostile_figures.py --grpc.)
    start = rss_mib(engine.process.pid)
    with BothHealthProbe(engine) as probe, RSSGuard(engine.process, LIMIT_MIB) as guard:
        answers = call_apart(engine, 6, padding=60 << 20)
    assert not guard.tripped, f"the engine passed {LIMIT_MIB} MiB and was killed"
    # gRPC copies each message into Python on the event loop that answers its health calls (65-170 ms for 60
    # MiB): its slowest health answer took 0.22, 0.45 and 0.43 s in three runs on this 2-CPU machine (and 1.00 s
    # once in a full run beside other tests). REST health, which Kubernetes probes, keeps its second (0.57, 0.50
    # and 0.22 s).
    healthy(probe, grpc_within=1.4)
    for (code, details), _ in answers.items():
        assert code in ("INVALID_ARGUMENT", "UNAVAILABLE", "RESOURCE_EXHAUSTED"), (code, details)
        if code == "UNAVAILABLE":
            assert "CHARIOT_BODY_BUDGET_MB" in details
        if code == "INVALID_ARGUMENT":
            assert "image-1" in details  # the padding input, read and refused as an image
    assert peak_rss_mib(engine.process.pid) < LIMIT_MIB
    assert settled(engine, start), f"RSS {rss_mib(engine.process.pid):.0f} MiB after, {start:.0f} MiB before"
    assert serves(engine)


def test_large_messages_sent_to_health_calls_are_read_a_few_at_a_time_and_refused(engine):
    # Twelve ServerLive calls at once, each carrying 60 MiB (720 MB, past the 600 MB bound below): health calls are not
    # counted against CHARIOT_GRPC_MAX_CALLS or the body budget, and twenty read side by side peaked at 2.5 GB.
    start = rss_mib(engine.process.pid)
    with BothHealthProbe(engine) as probe, RSSGuard(engine.process, LIMIT_MIB) as guard:
        answers = live_calls_apart(engine, 12, 60 << 20)
    assert not guard.tripped, f"the engine passed {LIMIT_MIB} MiB and was killed"
    # gRPC health probes are read in the same lane as these calls, which are health calls too: their slowest took
    # 0.96, 0.55 and 0.63 s in three runs here (0.64-0.70 s before), so its bound is looser than the second REST
    # health keeps. REST health, which these calls do not hold up, took 0.02, 0.05 and 0.08 s; 0.25 s in a full run
    # on a machine whose bench floor is 1.6 times slower.
    healthy(probe, grpc_within=2.0, rest_within=0.75)
    for (code, details), _ in answers.items():
        assert code in ("INVALID_ARGUMENT", "UNAVAILABLE"), (code, details)
        if code == "INVALID_ARGUMENT":
            assert details == (
                "the ServerLive request message is 62,914,565 bytes; a ServerLiveRequest holds a model's name"
                " and version at most, 65,536 bytes are taken"
            )
    assert peak_rss_mib(engine.process.pid) < start + 600
    assert settled(engine, start)
    assert serves(engine)


def test_answers_a_client_never_reads_are_bounded_and_freed_when_it_leaves(engine):
    # 120 calls on one connection whose window is 0. With 1 MiB request ids echoed in each answer this held past
    # 2 GB, kept after the client left; such ids are now refused at once, so each call carries the longest id taken.
    start = rss_mib(engine.process.pid)
    message = infer_message(request_id="r" * 256).SerializeToString()
    with BothHealthProbe(engine) as probe, RSSGuard(engine.process, LIMIT_MIB) as guard:
        client = RawCalls(engine)
        try:
            streams = [client.call(message) for _ in range(CALLS)]
            deadline = time.monotonic() + 15
            while len(client.statuses) < CALLS - 64 and time.monotonic() < deadline:
                client.read(0.5)
            held = rss_mib(engine.process.pid)
        finally:
            client.close()
    assert not guard.tripped
    healthy(probe)
    # The calls served hold their answers (at most CHARIOT_GRPC_MAX_CALLS of them); every other was refused.
    answered = {stream: client.statuses[stream] for stream in streams if stream in client.statuses}
    assert len(answered) >= CALLS - 64, f"{len(answered)} of {CALLS} unread calls had an answer"
    named = {RESOURCE_EXHAUSTED: "CHARIOT_GRPC_MAX_CALLS", UNAVAILABLE: "CHARIOT_BODY_BUDGET_MB"}
    for code, details in answered.values():
        assert code in named and named[code] in details, (code, details)
    assert held < LIMIT_MIB
    assert settled(engine, start), f"RSS {rss_mib(engine.process.pid):.0f} MiB after, {start:.0f} MiB before"
    assert serves(engine)


def test_a_message_that_never_arrives_is_deadline_exceeded_and_frees_its_place(strict_engine):
    engine = strict_engine
    client = RawCalls(engine)
    try:
        streams = [client.call(None, headers_only=True) for _ in range(4)]
        client.read(0.3)
        ((code, details),) = call_all(engine, [infer_message()])
        assert code == "RESOURCE_EXHAUSTED" and "(4, CHARIOT_GRPC_MAX_CALLS)" in details, (code, details)
        # Each starts reading once those before it have been reading for ReadingSlots.PATIENCE, so the last
        # times out about 1.5 s after the first.
        deadline = time.monotonic() + 6
        while not set(streams) <= set(client.statuses) and time.monotonic() < deadline:
            client.read(0.25)
    finally:
        client.close()
    for stream in streams:
        code, details = client.statuses[stream]
        assert code == DEADLINE_EXCEEDED, (code, details)
        assert "CHARIOT_GRPC_READ_TIMEOUT" in details
    assert serves(engine)


def test_clients_whose_messages_never_arrive_do_not_hold_up_one_that_sends(engine):
    # Three calls that send headers and no message hold three of the four reading places for 10 s; messages are
    # read one at a time, and another may start while those reading have been at it for half a second.
    client = RawCalls(engine)
    try:
        for _ in range(3):
            client.call(None, headers_only=True)
        client.read(0.3)
        assert serves(engine)  # refused UNAVAILABLE if it waited CHARIOT_ADMISSION_WAIT (2 s) for a place
    finally:
        client.close()


@pytest.mark.parametrize("form", ["raw_input_contents", "contents"])
def test_a_tensor_of_more_elements_than_the_engine_reads_is_refused_before_they_are_read(strict_engine, form):
    engine = strict_engine
    # 60 MiB of raw contents reads as 15 million zero-length elements: 12 s of unpacking before the cap.
    message = infer_message()
    extra = message.inputs.add(name="many", datatype="BYTES", shape=[-1])
    if form == "raw_input_contents":
        for tensor in message.inputs:
            contents = list(tensor.contents.bytes_contents)
            tensor.ClearField("contents")
            message.raw_input_contents.append(b"".join(len(c).to_bytes(4, "little") + c for c in contents))
        message.raw_input_contents[1] = b"\0" * 4 * 1001
    else:
        extra.contents.bytes_contents.extend([b"x"] * 1001)
    ((code, details),) = call_all(engine, [message])
    assert code == "RESOURCE_EXHAUSTED", (code, details)
    assert details.startswith("input 'many' holds more than 1,000 elements") and "CHARIOT_MAX_ELEMENTS" in details
    assert serves(engine)


def test_a_message_of_millions_of_tiny_elements_is_refused_before_protobuf_builds_it(engine):
    # Five million: 15 MiB on the wire, but protobuf holds about 90 bytes for each element: parsed, ten million took
    # 900 MB; these would take 450 MB, past the 300 MB bound below.
    message = infer_message()
    message.inputs.add(name="many", datatype="BYTES", shape=[-1]).contents.bytes_contents.extend([b"x"] * 5_000_000)
    raw = message.SerializeToString()
    del message
    start, counted = rss_mib(engine.process.pid), refused_count(engine, "too_many_fields")
    with RSSGuard(engine.process, LIMIT_MIB) as guard:
        answers = call_in_threads(engine.grpc_address, [raw])
    assert not guard.tripped
    ((code, details),) = answers
    assert code == "RESOURCE_EXHAUSTED", (code, details)
    assert "holds more than 2,000,000 fields" in details and "CHARIOT_MAX_ELEMENTS" in details
    assert peak_rss_mib(engine.process.pid) < start + 300
    assert refused_count(engine, "too_many_fields") - counted == 1
    assert serves(engine)


@pytest.mark.parametrize("garbage", [b"\xff\xff\xff\xff", b"\x0a\x05ab", b"\x12\xff\xff\xff\xff\x0f"])
def test_a_message_that_is_not_protobuf_is_invalid_argument(engine, garbage):
    with grpc.insecure_channel(engine.grpc_address) as channel:
        call = channel.unary_unary(INFER_METHOD)
        with pytest.raises(grpc.RpcError) as caught:
            call(garbage, timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "could not be parsed as a ModelInferRequest" in caught.value.details()
        assert serves(engine)


def test_png_bombs_over_grpc_stay_near_the_decode_budget(engine):
    # Each 9,999 x 9,999 PNG decodes to 300 MB: the default 1,024 MiB budget holds three of these four.
    start = rss_mib(engine.process.pid)
    with BothHealthProbe(engine) as probe, RSSGuard(engine.process, 2048) as guard:
        answers = call_apart(engine, 4, side=9_999)
    assert not guard.tripped
    healthy(probe)
    assert {code for code, _ in answers} <= {"OK", "UNAVAILABLE"}, answers
    peak = peak_rss_mib(engine.process.pid)
    assert peak - start < 1024 + 200, f"peak {peak:.0f} MiB from {start:.0f} MiB against a 1,024 MiB budget"
    time.sleep(0.5)
    assert settled(engine, start)
