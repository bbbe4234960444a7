"""ASGI middlewares in front of MLServer's REST app (the routes other than inference, which the front answers): a
body too dense or too deep to parse is refused before any JSON parser sees it, ambiguous framing is refused, and
error bodies stay short."""

from __future__ import annotations

import asyncio
import json

import numpy as np

_BRACKETS = np.zeros(256, np.int8)
_BRACKETS[[ord("["), ord("{")]] = 1
_BRACKETS[[ord("]"), ord("}")]] = -1


def json_shape(body: bytes) -> tuple[int, int]:
    """An upper bound on the number of values in a JSON document, and on its nesting depth, without parsing it:
    a comma precedes every value but the first of a list or object, and brackets open and close levels. Commas and
    brackets inside strings only raise the bounds (base64 holds neither). Runs at memchr speed."""
    values = body.count(b",") + 1
    opens = body.count(b"[") + body.count(b"{")
    if opens <= 64:  # no deeper than its count of opening brackets: an ordinary request stops here
        return values, opens
    steps = _BRACKETS[np.frombuffer(body, np.uint8)]
    steps = steps[steps != 0].astype(np.int32)
    return values, int(np.cumsum(steps).max())


BOTH_FRAMINGS = "the request has both Content-Length and Transfer-Encoding; send one"
RETRY_AFTER = b"1"  # seconds, on every 503


def body_too_large(size: str, max_bytes: int) -> str:
    return (
        f"the request body is {size}, more than this engine's limit of {max_bytes:,} bytes:"
        " send fewer or smaller images per request, or raise CHARIOT_MAX_REQUEST_MB"
    )


async def shape_problem(body: bytes, *, max_elements: int, max_depth: int) -> tuple[int, str] | None:
    """The status and message refusing a body too deep or with too many values to parse, or None. A large body is
    counted off the event loop, so health keeps answering. Only a JSON object or list is counted: an image file sent
    as the body (chariot-v2) holds bracket bytes by chance, and nothing in it nests."""
    if body.lstrip()[:1] not in (b"{", b"["):
        return None
    values, depth = await asyncio.to_thread(json_shape, body) if len(body) > 65536 else json_shape(body)
    if depth > max_depth:
        return 400, f"the request body nests deeper than {max_depth} levels; no request needs that"
    if values > max_elements:
        return 413, (
            f"the request body holds about {values:,} values, more than this engine parses in one request"
            f" ({max_elements:,}, CHARIOT_MAX_ELEMENTS): send images as base64 files, or fewer values"
        )
    return None


def short_error(error: str, max_chars: int) -> str:
    """An error message cut to `max_chars`, saying how much was left out."""
    if len(error) <= max_chars:
        return error
    return f"{error[:max_chars]}... ({len(error) - max_chars:,} more characters)"


def find_middleware(app, kinds: type | tuple[type, ...]):
    """The first middleware of one of `kinds` in `app`'s chain (each layer holds the next as `.app`), or None."""
    while app is not None:
        if isinstance(app, kinds):
            return app
        app = getattr(app, "app", None)
    return None


def replay(body: bytes, receive):
    """A receive that gives an already read body once, then whatever the client sends next (a disconnect)."""
    replayed = False

    async def again():
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


async def send_error(send, status: int, message: str, *, close: bool = False) -> int:
    """Answer with `{"error": message}`; a 503 says when to retry, and `close` ends the connection. Returns the
    status."""
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 503:
        headers.append((b"retry-after", RETRY_AFTER))
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
    return status


class BodyShape:
    """Read a POST body whole (the body limit outside bounds it) and refuse, before it is parsed, one that holds
    more JSON values than CHARIOT_MAX_ELEMENTS (413: parsing holds the GIL, about 0.3 s a million) or nests deeper
    than `max_depth` (400: parsers recurse). The count runs off the event loop, so health keeps answering."""

    def __init__(self, app, *, max_elements: int, max_depth: int):
        self.app = app
        self.max_elements = max_elements
        self.max_depth = max_depth

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        del chunks
        problem = await shape_problem(body, max_elements=self.max_elements, max_depth=self.max_depth)
        if problem is not None:
            return await send_error(send, *problem)
        await self.app(scope, replay(body, receive), send)


class Framing:
    """Refuse a request that carries both Content-Length and Transfer-Encoding: a proxy in front may read its body
    one way and this server the other (request smuggling). Every 503 gets a Retry-After."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        names = {k.lower() for k, _ in scope["headers"]}
        if b"content-length" in names and b"transfer-encoding" in names:
            return await send_error(send, 400, BOTH_FRAMINGS, close=True)

        async def retry_later(message):
            if message["type"] == "http.response.start" and message["status"] == 503:
                message = {**message, "headers": [*message.get("headers", []), (b"retry-after", RETRY_AFTER)]}
            await send(message)

        await self.app(scope, receive, retry_later)


class ShortErrors:
    """Cut the message of an `{"error": ...}` body to `max_chars`, so a client's oversize field is not sent back
    to it (or into a log) whole."""

    def __init__(self, app, *, max_chars: int):
        self.app = app
        self.max_chars = max_chars

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = None
        chunks: list[bytes] = []

        async def shorten(message):
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400:
                start = message
                return
            if start is None:
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = self._shortened(b"".join(chunks))
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, shorten)

    def _shortened(self, body: bytes) -> bytes:
        if len(body) <= self.max_chars + 20:
            return body
        try:
            content = json.loads(body)
        except ValueError:
            return body[: self.max_chars]
        if isinstance(content, dict) and isinstance(content.get("error"), str):
            content["error"] = short_error(content["error"], self.max_chars)
            return json.dumps(content).encode()
        return body


class JSONBodies:
    """Read every POST body but the root /infer's as JSON whatever its Content-Type (`curl -d` labels it form data,
    and those routes take nothing but JSON), and an empty body as `{}` where no body is needed, as tritonclient sends a
    repository index."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"].rstrip("/") == "/infer":
            # The root /infer reads its own body: it may be an image file or JSONL as well as JSON.
            return await self.app(scope, receive, send)
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
        scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        # An empty inference body is refused as such; elsewhere (a repository index) it means no options.
        first = not scope["path"].rstrip("/").endswith("infer")

        async def empty_is_an_object():
            nonlocal first
            message = await receive()
            if first and message["type"] == "http.request" and not message.get("body") and not message.get("more_body"):
                message = {**message, "body": b"{}"}
            first = False
            return message

        await self.app(scope, empty_is_an_object, send)


# The most a body may hold on the app's routes: inference is the front's, and what is left (repository index, load
# and unload) takes a small JSON object. Bodies this small need no place in the body budget.
MAX_CONTROL_BODY = 64 << 10


class BodyLimit:
    """Refuse a request body over the size limit with 413, before reading it when Content-Length says so and
    as soon as the limit is passed when it does not, so an oversize upload never sits whole in memory."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, send, size: str) -> None:
        await send_error(
            send,
            413,
            f"the request body is {size}, more than the {self.max_bytes:,} bytes this route takes: it reads a small"
            " JSON object (inference is sent to /v2/models/<name>/infer)",
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(send, f"{int(declared):,} bytes")
        received = 0
        too_large = False

        async def counted_receive():
            nonlocal received, too_large
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                # End the body here, so the app stops reading; its answer to the cut body is replaced below.
                too_large = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return message

        async def guarded_send(message):
            if not too_large:
                await send(message)

        await self.app(scope, counted_receive, guarded_send)
        if too_large:
            await self._refuse(send, f"over {self.max_bytes:,} bytes")
