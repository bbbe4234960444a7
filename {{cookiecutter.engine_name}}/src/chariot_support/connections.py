"""The HTTP protocol every REST connection is served by: uvicorn's, bounded per connection. Every use of uvicorn's
protocol internals lives here."""

from __future__ import annotations

import json

from uvicorn.protocols.http.auto import AutoHTTPProtocol

from .settings import config

# Most bytes of a request's head (request line and headers) held while it arrives; h11 is given the same limit.
MAX_HEAD_BYTES = 64 << 10
_HTTPTOOLS = hasattr(AutoHTTPProtocol, "on_headers_complete")  # uvicorn's httptools protocol, not h11's


class IdleLimitedProtocol(AutoHTTPProtocol):  # httptools, or h11 where httptools is not installed
    """uvicorn's HTTP protocol, except that a connection that sends nothing is closed after the keep-alive time
    (uvicorn times out only connections that already had a request), one past CHARIOT_MAX_CONNECTIONS is closed at
    once, so idle sockets cannot use up the process's file descriptors, and a request head longer than
    MAX_HEAD_BYTES gets a 431 (httptools would hold any length). A class of the module, not of a function, because
    MLServer pickles its settings, this included, to start parallel workers. Uses uvicorn's protocol internals
    (`connections`, `timeout_keep_alive_task`, the parser callbacks); tests/support/test_hostile_connections.py
    says when they change."""

    _head_bytes = 0
    _in_head = False  # between a message's first byte and the end of its headers

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if len(self.connections) > config().max_connections:
            transport.close()
            return
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # Still inside the head after these bytes were read: all of them belong to it.
        if _HTTPTOOLS and self._in_head and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                body = json.dumps({"error": f"the request's headers pass {MAX_HEAD_BYTES:,} bytes"}).encode()
                self.transport.write(
                    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                    b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )
                self.transport.close()

    def on_message_begin(self) -> None:
        self._in_head, self._head_bytes = True, 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()
