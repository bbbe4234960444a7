"""The HTTP protocol every REST connection is served by: uvicorn's httptools protocol, bounded per connection. Every
use of uvicorn's protocol internals lives here; tests/support/test_connection_internals.py says when they change."""

from __future__ import annotations

import functools
import logging
import sys
import weakref
from asyncio import TimerHandle
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from chariot_support.error_bodies import raw_error, send_error
from chariot_support.refusals import Refusals, refusal_counter
from chariot_support.settings import DEFAULTS, EngineSettings

logger = logging.getLogger("chariot_support")

# Most bytes of a request's head (request line and headers) held while it arrives.
MAX_HEAD_BYTES = 64 << 10
# Seconds a connection being closed gets to take its last answer before it is cut: a client that reads nothing would
# otherwise hold it open with that answer unsent.
LINGER = 2.0

# Health checks, answered whatever the requests in flight: each is cheap, and the connection table bounds them.
HEALTH_PATHS = (b"/v2/health/live", b"/v2/health/ready", b"/ready")

# Seconds between the log lines that count the connections closed for their clients' slowness: one line per
# connection would let an attack write the log as fast as it opens connections.
LOG_EVERY = 10.0


def refused_connections():
    """The metrics server's count of REST connections the engine closed or refused itself, by reason (a late head, a
    slow body, an unread answer, a full table, too many requests)."""
    return refusal_counter(
        "chariot_rest_refused",
        "REST connections and requests the engine refused or cut before they reached the app, by reason",
    )


class ConnectionTable(Refusals):
    """One server's open connections, the one whose last sign of life is oldest first (see
    IdleLimitedProtocol._touch), and how many it closed since its last log line about them, by reason."""

    def __init__(self):
        super().__init__(refused_connections, LOG_EVERY)
        self.activity: OrderedDict[IdleLimitedProtocol, None] = OrderedDict()

    def count_closed(self, loop, reason: str) -> None:
        self.refused(reason, loop=loop)

    def summary(self, counts: Counter[str]) -> None:
        logger.warning(
            "closed %d connections in the last %g s for their clients' slowness or to make room: %s",
            counts.total(),
            self.every,
            ", ".join(f"{count} {reason}" for reason, count in sorted(counts.items())),
            extra={"fields": {"closed_connections": dict(counts)}},
        )


_TABLES: weakref.WeakKeyDictionary[object, ConnectionTable] = weakref.WeakKeyDictionary()  # by uvicorn server state


class IdleLimitedProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol with read deadlines and a connection table that makes room.

    - A connection that sends nothing is closed after the keep-alive time (uvicorn times out only connections that
      already had a request).
    - A request's head must arrive within CHARIOT_HEADER_TIMEOUT of its first byte, and be at most MAX_HEAD_BYTES
      (httptools would hold any length): past either, 408 or 431, and the connection is closed.
    - A body must keep flowing: each CHARIOT_BODY_TIMEOUT seconds must bring CHARIOT_MIN_BODY_RATE KiB a second.
      A rate over windows, rather than a deadline scaled to the declared length: it needs no Content-Length
      (chunked bodies have none), catches a body that stalls near its end (a deadline for 64 MiB at 32 KiB/s lets
      a client that sent all but the last byte at once hold it for half an hour), and cuts a sender of one byte
      every few seconds at the first window. Windows in which the engine itself holds the body back (reading
      paused until the app takes what it has, or a `100 Continue` not yet sent) do not count against the client.
      Behind Knative the queue-proxy passes bytes on as they come, so the engine sees each client's own pace,
      phones on poor links included: 1 KiB/s over 10 s is four times Kestrel's floor and far below any phone's
      upload, yet a client must spend 1 KiB/s to hold a slot.
    - A client that leaves its answer unread (the transport's buffer stays full) for CHARIOT_BODY_TIMEOUT is cut.
    - Bytes that are not HTTP are answered with the engine's JSON `{"error"}`, as every other refusal.
    - Past CHARIOT_MAX_CONNECTIONS requests in flight, a request other than a health check gets a 503 (uvicorn's
      limit_concurrency would say so in plain text, without Retry-After, to health checks too).
    - With CHARIOT_MAX_CONNECTIONS open, a new connection closes the one that has waited longest without a sign
      of life (idle, still in its head, with a stalled body, or not reading its answer) instead of being refused:
      a health probe gets in however many slow clients hold the table. Only when every connection has a request
      in flight is the new one closed.

    A class of the module, not of a function, because MLServer pickles its settings, this included, to start
    parallel workers.
    """

    _head_bytes = 0
    _in_head = False  # between a message's first byte and the end of its headers
    _in_body = False  # between the end of a message's headers and the end of its body
    _window_bytes = 0  # body bytes read in the current rate window
    _body_bytes = 0
    _timer: TimerHandle | None = None  # the head deadline, the end of a body's rate window, or the cut after LINGER
    _write_timer: TimerHandle | None = None  # the cut of a client that leaves its answer unread
    _table: ConnectionTable | None = None

    def __init__(self, *args: Any, settings: EngineSettings = DEFAULTS, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.settings = settings

    @classmethod
    def bound(cls, settings: EngineSettings) -> Callable[..., IdleLimitedProtocol]:
        """What uvicorn is given to make each connection's protocol: this class with the engine's settings (a
        partial, which pickles, since MLServer sends its settings to parallel workers)."""
        return functools.partial(cls, settings=settings)

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._table = _TABLES.get(self.server_state) or _TABLES.setdefault(self.server_state, ConnectionTable())
        self._table.activity[self] = None
        if len(self.connections) > self.settings.max_connections and not self._make_room():
            self._shut(None, "refused_table_busy")
            return
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self._cancel_write_timer()
        if self._table is not None:
            self._table.activity.pop(self, None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            return
        # Timers start only for a head or body that did not arrive in one read, which most requests do.
        if self._in_head:  # still inside the head after these bytes were read: all of them belong to it
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._shut(431, "head_too_long", f"the request's headers pass {MAX_HEAD_BYTES:,} bytes")
            elif self._timer is None:
                self._timer = self.loop.call_later(self.settings.header_timeout, self._head_late)
        elif self._in_body and self._timer is None:
            self._window_bytes = 0
            self._timer = self.loop.call_later(self.settings.body_timeout, self._body_window_ends)

    def on_message_begin(self) -> None:
        self._in_head, self._head_bytes = True, 0
        self._touch()  # a head is judged from its start: one that trickles in is no more alive for it
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head, self._in_body, self._body_bytes = False, True, 0
        self._cancel_timer()
        if len(self.tasks) < self.settings.max_connections or self.url.partition(b"?")[0] in HEALTH_PATHS:
            super().on_headers_complete()
            return
        # As many requests in flight as connections allowed (those of clients that left run on): this one is
        # answered by `too_many_requests` instead of the app.
        self._table.count_closed(self.loop, "too_many_requests")
        app, self.app = self.app, functools.partial(too_many_requests, self.settings.max_connections)
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def on_body(self, body: bytes) -> None:
        self._window_bytes += len(body)
        self._body_bytes += len(body)
        self._touch()
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_body = False
        self._cancel_timer()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._touch()
        super().on_response_complete()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes httptools cannot read as HTTP (a garbage request line, a malformed header or
        chunk size), called while it handles the parser's error: the engine's `{"error"}` JSON naming that error,
        and the connection closed, instead of uvicorn's plain text."""
        error = sys.exc_info()[1]
        reason = f" ({error})" if isinstance(error, httptools.HttpParserError) and str(error) else ""
        self._shut(
            400,
            "malformed_request",
            f"the request is not valid HTTP/1.1{reason}: send a request line, headers and body as HTTP/1.1 frames them",
        )

    def pause_writing(self) -> None:
        """The transport holds more of the answer than it may: the client has read none of it for a while. One
        that still reads nothing after CHARIOT_BODY_TIMEOUT is cut, or it would hold the answer's bytes and the
        request's task for as long as it likes."""
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.settings.body_timeout, self._answer_unread)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._cancel_write_timer()

    def _cancel_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _answer_unread(self) -> None:
        self._write_timer = None
        if self.flow.write_paused:
            self._shut(None, "answer_unread")

    def _touch(self) -> None:
        if self._table is not None and self in self._table.activity:
            self._table.activity.move_to_end(self)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_late(self) -> None:
        self._timer = None
        # The engine stops reading while pipelined requests wait their turn: not the client's doing.
        if self.flow.read_paused:
            self._timer = self.loop.call_later(self.settings.header_timeout, self._head_late)
        elif self._in_head and not self.transport.is_closing():
            limit = self.settings.header_timeout
            self._shut(
                408,
                "head_late",
                f"the request's head (request line and headers) did not arrive within {limit:g} s of its first byte;"
                f" send it at once (the engine's CHARIOT_HEADER_TIMEOUT is {limit:g} s)",
            )

    def _body_window_ends(self) -> None:
        self._timer = None
        if not self._in_body or self.transport.is_closing():
            return
        window, rate = self.settings.body_timeout, self.settings.min_body_rate
        held_back = self.flow.read_paused or (self.cycle is not None and self.cycle.waiting_for_100_continue)
        if held_back or self._window_bytes >= max(1, rate * 1024 * window):
            self._window_bytes = 0
            self._timer = self.loop.call_later(window, self._body_window_ends)
            return
        self._shut(
            408,
            "body_slow",
            f"the request body came too slowly: {self._window_bytes:,} bytes in the last {window:g} s, under the"
            f" {rate} KiB/s it must keep up (the engine's CHARIOT_MIN_BODY_RATE over CHARIOT_BODY_TIMEOUT);"
            f" {self._body_bytes:,} bytes of it had arrived",
        )

    def _evictable(self) -> bool:
        """Whether the connection waits on its client rather than on the engine."""
        cycle = self.cycle
        if self._in_head:
            return True
        if self._in_body:  # unless the engine holds the body back
            return not (self.flow.read_paused or (cycle is not None and cycle.waiting_for_100_continue))
        if cycle is None or cycle.response_complete:
            return True  # idle between requests
        return self.flow.write_paused  # its answer is not being read

    def _make_room(self) -> bool:
        """Close the connection that has gone longest without a sign of life and waits on its client; False when
        every other connection has a request in flight."""
        for other in self._table.activity:
            if other is not self and other._evictable():
                limit = self.settings.max_connections
                other._shut(
                    503,
                    "closed_to_make_room",
                    f"the engine holds its most connections (CHARIOT_MAX_CONNECTIONS, {limit}) and closed this one,"
                    " the one that had waited longest on its client, to serve another: retry",
                )
                return True
        return False

    def _shut(self, status: int | None, reason: str, message: str = "") -> None:
        """Close the connection, with an answer `status` when a request has started and none is being written. It
        leaves the connection table at once, and is cut after LINGER if the client does not take the answer. `reason`
        is counted in the next log line about closed connections."""
        self._table.count_closed(self.loop, reason)
        cycle = self.cycle
        if self._in_body:  # `cycle` is this body's request
            answering = status is not None and not cycle.response_started
        else:  # a head, answered unless the request before it is still being answered (pipelining)
            answering = status is not None and self._in_head and (cycle is None or cycle.response_complete)
        if cycle is not None and not cycle.response_complete:
            # What the app still sends is dropped and its receive() gets a disconnect, as when the client leaves.
            cycle.disconnected = True
            cycle.message_event.set()
        if answering:
            self.transport.write(raw_error(status, message))
            if cycle is not None:  # the request's log line says what the client was answered, not that it left
                cycle.scope[ANSWERED] = status
        self._in_head = self._in_body = False
        self._cancel_timer()
        self.connections.discard(self)
        self._table.activity.pop(self, None)
        if self.flow.write_paused:  # not reading what it was sent: nothing more will reach it
            self.transport.abort()
            return
        self.transport.close()
        self._timer = self.loop.call_later(LINGER, self.transport.abort)


# The scope key where a connection cut by the protocol leaves the status it answered with.
ANSWERED = "chariot.answered"


async def too_many_requests(limit: int, scope, receive, send) -> None:
    message = f"the engine is answering its most requests at once (CHARIOT_MAX_CONNECTIONS, {limit}): retry shortly"
    await send_error(send, 503, message, close=True)
