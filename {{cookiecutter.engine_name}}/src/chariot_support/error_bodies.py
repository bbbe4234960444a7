"""Every error a REST client is answered with, written one way: `{"error": message}` in UTF-8 JSON (orjson, the
engine's encoder, on every route and for the connection's own refusals), with the message cut to MAX_ERROR_CHARS (a
client's oversize field is not sent back whole), and one policy of headers: JSON, its length, `Retry-After` on every
503, `Connection: close` when the connection ends with it."""

from __future__ import annotations

import http
from typing import Any

import orjson
from starlette.responses import Response

from chariot_support.settings import EngineSettings

RETRY_AFTER = b"1"  # seconds, on every 503: the engine is busy, stopping or loading, not broken
MAX_ERROR_CHARS = EngineSettings.max_error_chars


def short_error(error: str, max_chars: int = MAX_ERROR_CHARS) -> str:
    """An error message cut to `max_chars`, saying how much was left out."""
    if len(error) <= max_chars:
        return error
    return f"{error[:max_chars]}... ({len(error) - max_chars:,} more characters)"


def error_body(message: str) -> bytes:
    """The bytes of every `{"error": message}` body."""
    text = short_error(message)
    try:
        return orjson.dumps({"error": text})
    except orjson.JSONEncodeError:  # a lone surrogate (a client's bytes read with surrogateescape) is not UTF-8
        return orjson.dumps({"error": text.encode("utf-8", "backslashreplace").decode("utf-8")})


def answer_headers(status: int, length: int, *, close: bool = False) -> list[tuple[bytes, bytes]]:
    """The headers of a JSON answer of `length` bytes with `status`."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % length)]
    if status == 503:
        headers.append((b"retry-after", RETRY_AFTER))
    if close:
        headers.append((b"connection", b"close"))
    return headers


async def send_error(send, status: int, message: str, *, close: bool = False) -> int:
    """Answer an ASGI request with `{"error": message}`; returns the status."""
    body = error_body(message)
    await send(
        {"type": "http.response.start", "status": status, "headers": answer_headers(status, len(body), close=close)}
    )
    await send({"type": "http.response.body", "body": body})
    return status


def json_response(content: Any, status: int = 200) -> Response:
    """A route's JSON answer, strict JSON whatever came in, with the headers every answer of its status carries."""
    return _response(orjson.dumps(content), status)


def error_response(status: int, message: str) -> Response:
    """A route's `{"error": message}` answer."""
    return _response(error_body(message), status)


def _response(body: bytes, status: int) -> Response:
    response = Response(body, status_code=status)
    response.raw_headers = answer_headers(status, len(body))
    return response


def raw_error(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 error answer, for a connection the HTTP protocol answers and closes itself."""
    body = error_body(message)
    head = b"".join(b"%s: %s\r\n" % pair for pair in answer_headers(status, len(body), close=True))
    return b"HTTP/1.1 %d %s\r\n%s\r\n%s" % (status, http.HTTPStatus(status).phrase.encode(), head, body)
