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
    end to the formatted answer; the request's images, the images in the predict call that served them, and whether
    this request's call ran it (a batch's call is counted once, with its first request)."""

    queue: float
    admission: float
    decode: float
    predict: float
    results: float
    images: int
    batch: int
    executed: bool

    @property
    def seconds(self) -> float:
        """The runtime's whole time on the request: its stages follow each other."""
        return self.queue + self.admission + self.decode + self.predict + self.results


class Received(NamedTuple):
    """What the transport measured before it handed the request to the pipeline (time.perf_counter()): when the
    request started, the seconds it waited for admission (the body budget; gRPC's turn to read its message too) and
    took to arrive, and when it had arrived whole."""

    started: float
    admission: float
    read: float
    read_end: float


def stage_times(received: Received, answer: Any, ended: float | None = None) -> tuple[float, ...]:
    """The stages (STAGES, in seconds) of a request the pipeline answered (`answer`, protocols/request.Answer), up
    to `ended` (time.perf_counter() once the answer was written;
    None while it is being written, `write` then 0). The time between the pipeline handing the request to the
    runtime and having its answer, less what the runtime measured, is the hand-off (a worker thread waking, a
    parallel worker's pickling and pipe): it counts as queue."""
    runtime = answer.answered.stages
    called = answer.answered_at - answer.parsed_at
    if runtime is None:  # an answer of a runtime that does not measure (a test's stand-in): all of it in predict
        runtime = RuntimeStages(0.0, 0.0, 0.0, called, 0.0, len(answer.answered.names), 0, False)
    return (
        received.read,
        received.admission + runtime.admission,
        answer.parsed_at - received.read_end,
        runtime.queue + max(0.0, called - runtime.seconds),
        runtime.decode,
        runtime.predict,
        runtime.results,
        0.0 if ended is None else ended - answer.answered_at,
    )


# W3C Server-Timing: one metric per stage before the write (the header goes out before it), and the total so far,
# in milliseconds.
_SERVER_TIMING = ", ".join(f"{name};dur=%.3f" for name in (*STAGES[:-1], "total"))


def server_timing(stages: tuple[float, ...], total: float) -> bytes:
    """The Server-Timing header's value for a request's `stages` and its `total` seconds so far."""
    return (_SERVER_TIMING % tuple(s * 1000 for s in (*stages[:-1], total))).encode()
