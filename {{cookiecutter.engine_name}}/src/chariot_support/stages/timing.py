"""A request's stages as durations: what the transport measured before the pipeline (`Received`), what the runtime
measured in the process the model lives in (`RuntimeStages`, which crosses back from a parallel worker with the
answer), and the two put together (`stage_times`), with the Server-Timing header that shows them.

The stages follow each other, so that they add up to the request's whole time: `read` (the body arriving),
`admission` (waiting for room in the body and decode budgets), `parse` (the body read into the request and checked
whole, images' base64 decoded), `queue` (waiting for a worker thread or parallel worker, for a model copy, or for a
batch to fill and reach the model), `decode` (the images' pixels), `predict` (the model's call; a batch's call is
every request's in it), `results` (checking, clipping, selecting and formatting them) and `write` (the answer
rendered and handed to the connection)."""

from __future__ import annotations

from typing import Any, NamedTuple

STAGES = ("read", "admission", "parse", "queue", "decode", "predict", "results", "write")


class RuntimeStages(NamedTuple):
    """What the runtime measured of one request, in seconds, in the process its model lives in: waiting (for a
    thread, a model copy, a batch), for room in the decode budget, decoding, in the model's call, and from that call's
    end to the formatted answer, which follow each other, and all of it; the request's images, the images in the
    predict call that served them, and whether this request's call ran it (a batch's call is counted once, with its
    first request)."""

    queue: float
    admission: float
    decode: float
    predict: float
    results: float
    seconds: float
    images: int
    batch: int
    executed: bool


# What the transport measured before it handed the request to the pipeline (time.perf_counter()): when the request
# started, the seconds it waited for admission (the body budget; gRPC's turn to read its message too) and took to
# arrive, and when it had arrived whole. A plain tuple: a NamedTuple's constructor is a Python call on every request.
Received = tuple[float, float, float, float]


def stage_times(received: Received, answer: Any, ended: float | None = None) -> tuple[float, ...]:
    """The stages (STAGES) of a request the pipeline answered (`answer`, protocols/request.Answer), in
    milliseconds, as every view of them shows them, up to `ended` (time.perf_counter() once the answer was written;
    None while it is being written, `write` then 0). The time between the pipeline handing the request to the
    runtime and having its answer, less what the runtime measured, is the hand-off (a worker thread waking, a
    parallel worker's pickling and pipe): it counts as queue."""
    started, admission, read, read_end = received
    runtime = answer.answered.stages
    called = answer.answered_at - answer.parsed_at
    if runtime is None:  # an answer of a runtime that does not measure (a test's stand-in): all of it in predict
        runtime = RuntimeStages(0.0, 0.0, 0.0, called, 0.0, called, len(answer.answered.names), 0, False)
    hand_off = called - runtime.seconds
    return (
        read * 1000,
        (admission + runtime.admission) * 1000,
        (answer.parsed_at - read_end) * 1000,
        (runtime.queue + hand_off if hand_off > 0 else runtime.queue) * 1000,
        runtime.decode * 1000,
        runtime.predict * 1000,
        runtime.results * 1000,
        0.0 if ended is None else (ended - answer.answered_at) * 1000,
    )


# W3C Server-Timing: one metric per stage before the write (the header goes out before it), and the total so far,
# in milliseconds.
_SERVER_TIMING = ", ".join(f"{name};dur=%.3f" for name in (*STAGES[:-1], "total")).encode()


def server_timing(stages: tuple[float, ...], total: float) -> bytes:
    """The Server-Timing header's value for a request's `stages` and its `total` milliseconds so far."""
    return _SERVER_TIMING % (stages[:-1] + (total,))
