"""What one gRPC call may hold: the calls served at once, the bytes of their messages against the body budget,
the time a message may take to arrive, and a message that cannot be parsed answered as the client's mistake."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import grpc
from grpc import aio

from chariot_support.errors import Overloaded
from chariot_support.logs.request_lines import PROBE_CALLS
from chariot_support.memory.budgets import LARGE_BODY, BodyBudget
from chariot_support.protocols.v2_grpc import fields_past
from chariot_support.refusals import LOG_EVERY, Refusals, refusal_counter
from chariot_support.seams.grpc import EOF, read, served_raw, when_ended
from chariot_support.settings import EngineSettings
from chariot_support.stages.timing import Received

logger = logging.getLogger("chariot_support")

# What a ModelInfer call holds, in multiples of its message, and what the body budget counts for it: the message's
# bytes, the request parsed from them, the inputs read from that, and their base64 decoding are alive together (a
# 60 MiB call peaked at 7 times its size).
MESSAGE_COPIES = 4
# The largest message an uncounted call takes: their requests hold a model's name and version at most. Such calls
# are read a few at a time (ReadingSlots of their own), so large messages sent to them cannot pile up in memory.
SMALL_MESSAGE = 64 << 10

T = TypeVar("T")
TOO_MANY_FIELDS = object()  # what _parse says of a message with more fields than the engine reads
# The size of the message of the call being served, for the handler to know whether its own copies of it (the
# protocol's request read from the message) should leave the event loop.
_message_bytes: ContextVar[int] = ContextVar("chariot_grpc_message_bytes", default=0)
# How the inference call being served was admitted and read, for its stages (stages/timing.py).
_received: ContextVar[Received | None] = ContextVar("chariot_grpc_received", default=None)


def call_received() -> Received | None:
    """When the ModelInfer call being served started, and the seconds it waited for its turn to read its message
    and for room in the body budget, and took to read it."""
    return _received.get()


async def off_loop_if_large(function: Callable[..., T], *args: Any) -> T:
    """function(*args), in a worker thread when the call's message is LARGE_BODY or more, so that health checks
    answer while it is copied; here otherwise, where a small message costs less than the hand-off."""
    if _message_bytes.get() >= LARGE_BODY:
        return await asyncio.to_thread(function, *args)
    return function(*args)


def refused_calls():
    """The metrics server's count of gRPC calls refused before they reached the model, by reason."""
    return refusal_counter("chariot_grpc_refused", "gRPC calls the engine refused before serving them, by reason")


class RefusalLog(Refusals):
    """Refused gRPC calls: the first with its reason and message at once, then one line per LOG_EVERY seconds with
    the counts since."""

    def __init__(self, every: float = LOG_EVERY):
        super().__init__(refused_calls, every)

    def first_line(self, reason: str, message: str) -> bool:
        logger.warning("refused a gRPC call (%s): %s", reason, message)
        return True

    def summary(self, counts: Counter[str]) -> None:
        listed = ", ".join(f"{count:,} {reason}" for reason, count in counts.most_common())
        logger.warning("refused %s more gRPC calls in the last %g s (%s)", counts.total(), self.every, listed)


class ReadingSlots:
    """Which calls may read their message now. One at a time: gRPC copies a message into Python on the event loop
    (a 60 MiB one took 65 ms here, 170 ms on a busy machine), and messages read side by side arrive together, so four
    large ones at once held health checks for the time of all four copies. While every call reading has been at it
    for PATIENCE or more (a slow sender, or a large message on a slow link), more may start, up to `most`: one slow
    client does not hold up the others."""

    PATIENCE = 0.5  # seconds: a message of a few MiB arrives well within it, a 64 MiB one on a fast network too

    def __init__(self, most: int, patience: float = PATIENCE):
        self.most, self.patience = most, patience
        self.readers: dict[object, float] = {}  # a token per call reading, with when it started
        self._waiting: list[asyncio.Future] = []

    def _open(self, now: float) -> bool:
        if not self.readers:
            return True
        return len(self.readers) < self.most and now >= max(self.readers.values()) + self.patience

    async def enter(self, wait: float) -> object | None:
        """A token once this call may read (give it back with `leave`); None if that took more than `wait` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while not self._open(now := loop.time()):
            if now >= deadline:
                return None
            # Woken when a reader leaves, or when the newest reader has been reading for PATIENCE.
            change = max(self.readers.values()) + self.patience if len(self.readers) < self.most else deadline
            woken = loop.create_future()
            self._waiting.append(woken)
            try:
                async with asyncio.timeout_at(min(deadline, change)):
                    await woken
            except TimeoutError:
                pass
            finally:
                if woken in self._waiting:
                    self._waiting.remove(woken)
        token = object()
        self.readers[token] = now
        return token

    def leave(self, token: object) -> None:
        del self.readers[token]
        waiting, self._waiting = self._waiting, []
        for woken in waiting:
            if not woken.done():
                woken.set_result(None)


# Status codes by their number: grpc.aio gives a call's code as either.
_STATUS_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


def _status_name(code: grpc.StatusCode | int | None, unset: str) -> str:
    if code is None:
        return unset
    return code.name if isinstance(code, grpc.StatusCode) else _STATUS_NAMES.get(code, "UNKNOWN")


class _Held:
    """The bytes a call holds in the body budget, once it has them."""

    __slots__ = ("bytes",)

    def __init__(self):
        self.bytes = 0


class CallLimits(aio.ServerInterceptor):
    """Serves each unary call as a request stream it reads the one message of, which lets the engine act before that
    message is read and until its answer is sent (with the status, in one batch, as a unary call's): a call past
    CHARIOT_GRPC_MAX_CALLS is refused before its message is read (a slot is free only once the answer is sent, so
    clients that do not read their answers hold at most that many); the message must arrive within
    CHARIOT_GRPC_READ_TIMEOUT, and is counted in the body budget until the call ends (waiting briefly for room, else
    UNAVAILABLE). The client sees the same unary call on the wire."""

    def __init__(self, settings: EngineSettings, budget: BodyBudget):
        self.budget = budget  # the body budget REST bodies are counted in too
        self.max_calls = settings.grpc_max_calls
        self.read_timeout = settings.grpc_read_timeout
        self.admission_wait = settings.admission_wait or 1e-9
        self.max_elements = settings.max_elements
        # Fields a large ModelInfer message may hold before it is parsed, for the parse's memory: elements are then
        # counted exactly, tensor by tensor (v2_grpc.parse); this leaves room for the inputs and parameters.
        self.max_fields = 2 * settings.max_elements
        self.in_flight = 0
        # Messages read (or waiting for room in the body budget) at once: one, and while those are slow, as many as
        # the budget holds of the largest.
        self._reading = ReadingSlots(max(1, settings.body_budget_mb // settings.max_request_mb))
        # Apart, so that health is never read behind inference. Their messages are a few bytes, read at once: one
        # still reading after 50 ms is large or slow, and lets another start.
        self._reading_uncounted = ReadingSlots(4, patience=0.05)
        self.log = RefusalLog()
        self._metrics: Any = None  # MLServer's gRPC call metrics (seams/metrics.py's GRPCMetrics), when it keeps them

    def count_calls_in(self, metrics: Any) -> None:
        """Count each unary call in `metrics` (started; handled, with its status and time), refused ones too."""
        self._metrics = metrics

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.response_streaming:
            return handler
        service, _, name = handler_call_details.method[1:].rpartition("/")
        if self._metrics is None:
            return served_raw(handler, functools.partial(self._serve, handler, name))
        return served_raw(handler, functools.partial(self._counted, handler, service, name))

    async def _counted(self, handler: grpc.RpcMethodHandler, service: str, name: str, requests, context):
        """The call served, and counted in the call metrics with the status it ends with."""
        started, code = time.perf_counter(), "UNKNOWN"
        self._metrics.started(service, name)
        try:
            answer = await self._serve(handler, name, requests, context, started)
            code = _status_name(context.code(), "OK")
            return answer
        except aio.AbortError:
            code = _status_name(context.code(), "UNKNOWN")
            raise
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        finally:
            self._metrics.finished(service, name, code, time.perf_counter() - started)

    async def _serve(self, handler: grpc.RpcMethodHandler, name: str, _requests, context, started: float = 0.0):
        started = started or time.perf_counter()
        counted = name not in PROBE_CALLS  # small, answered at once: never refused for load
        if counted and self.in_flight >= self.max_calls:
            await self._refuse(
                context,
                "max_calls",
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the engine is serving as many gRPC calls as it takes at once ({self.max_calls},"
                " CHARIOT_GRPC_MAX_CALLS); retry shortly",
            )
        self.in_flight += counted
        held = _Held()
        # The call's place and its room in the body budget are given back once its answer is sent, with its status
        # in the same batch: a client that does not read its answers holds at most CHARIOT_GRPC_MAX_CALLS of them.
        when_ended(context, functools.partial(self._ended, counted, held))
        if counted:
            message, held.bytes, (waiting, entered, read, reserved) = await self._admit(context, name, self.budget)
            if name == "ModelInfer":
                admission = (entered - waiting) + (reserved - read)
                _received.set((started, admission, reserved - started - admission, reserved))
        else:
            message = await self._read_small(context, name)
        size = len(message)
        _message_bytes.set(size)  # each call is served in a task, with a context of its own
        request = await off_loop_if_large(self._parse, handler, name, message)
        # Let go before any refusal: gRPC keeps an abort's exception, and its traceback these frames, past the
        # call (twenty refused 60 MiB messages held 1.2 GB after they were answered).
        del message
        if request is TOO_MANY_FIELDS:
            await self._refuse(
                context,
                "too_many_fields",
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the request message ({size:,} bytes) holds more than {self.max_fields:,} fields (inputs,"
                f" parameters and elements together), twice the {self.max_elements:,} elements this engine reads"
                " in one request (CHARIOT_MAX_ELEMENTS): send each image as one element holding the whole file",
            )
        if request is None:
            await self._refuse(
                context,
                "malformed",
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the request message ({size:,} bytes) could not be parsed as a {name}Request: send a"
                f" serialized inference.{name}Request, as a client generated from the service's .proto does",
            )
        return await handler.unary_unary(request, context)  # sent by gRPC with the call's status

    def _ended(self, counted: bool, held: _Held) -> None:
        self.in_flight -= counted
        if held.bytes:
            self.budget.release(held.bytes)

    async def _admit(self, context, name: str, budget) -> tuple[bytes, int, tuple[float, float, float, float]]:
        """The call's message, read while few enough others are being read, and its room in the body budget; with
        when (time.perf_counter()) it began to wait for its turn to read, the turn came, the message was read, and
        the room was had."""
        waiting = time.perf_counter()
        slot = await self._reading.enter(self.admission_wait)
        if slot is None:
            refusal = budget.full_message()
        else:
            try:  # gRPC buffers a message once it is read: a few at a time, then the budget counts each
                entered = time.perf_counter()
                message = await self._read(context, name)
                read = time.perf_counter()
                cost = min(MESSAGE_COPIES * len(message), budget.capacity)
                await budget.reserve(cost)
                return message, cost, (waiting, entered, read, time.perf_counter())
            except Overloaded as full:
                refusal = str(full)
                del message  # not kept with the refusal (see _serve)
            finally:
                self._reading.leave(slot)
        await self._refuse(context, "body_budget", grpc.StatusCode.UNAVAILABLE, refusal)

    async def _read_small(self, context, name: str) -> bytes:
        """An uncounted call's message: read while few others of its kind are (twenty 60 MiB ServerLive messages
        read at once peaked at 2.5 GB), and SMALL_MESSAGE at most."""
        slot = await self._reading_uncounted.enter(self.admission_wait)
        if slot is None:
            await self._refuse(
                context,
                "busy",
                grpc.StatusCode.UNAVAILABLE,
                f"the engine is reading as many {name} messages as it takes at once; retry shortly",
            )
        try:
            message = await self._read(context, name)
        finally:
            self._reading_uncounted.leave(slot)
        if len(message) <= SMALL_MESSAGE:
            return message
        size = len(message)
        del message  # not kept with the refusal (see _serve)
        self.budget.let_go(size)  # not counted while it was read, but its memory is reclaimed with the rest
        await self._refuse(
            context,
            "malformed",
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the {name} request message is {size:,} bytes; a {name}Request holds a model's name and version at"
            f" most, {SMALL_MESSAGE:,} bytes are taken",
        )

    async def _read(self, context, name: str) -> bytes:
        timed_out = False
        try:
            async with asyncio.timeout(self.read_timeout):
                message = await read(context)
        except TimeoutError:
            timed_out = True
        if timed_out:
            await self._refuse(
                context,
                "read_timeout",
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the {name} request message did not arrive within {self.read_timeout:g} s"
                " (CHARIOT_GRPC_READ_TIMEOUT): send the message with the call",
            )
        if message is EOF:
            await self._refuse(
                context,
                "malformed",
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the call ended without its {name}Request message: send one message per call",
            )
        return message

    def _parse(self, handler: grpc.RpcMethodHandler, name: str, message: bytes):
        """The message as the handler takes it; None when it is not one (protobuf's DecodeError, or worse), and
        TOO_MANY_FIELDS when a large ModelInfer message holds more fields than the engine reads."""
        if handler.request_deserializer is None:
            return message
        if name == "ModelInfer" and len(message) >= LARGE_BODY and fields_past(message, self.max_fields):
            return TOO_MANY_FIELDS
        try:
            return handler.request_deserializer(message)
        except Exception:  # noqa: BLE001 - any failure to parse is the client's message, never the engine's fault
            return None

    async def _refuse(self, context, reason: str, code: grpc.StatusCode, message: str) -> None:
        self.log.refused(reason, message)
        await context.abort(code, message)
