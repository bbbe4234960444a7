"""Inference over REST (V2, and the root /infer) served in one pass, in front of MLServer's REST app.

Every other request goes through the app's middleware stack: the request log, the engine's guards (framing, body
limit, short errors, JSON bodies, body shape), MLServer's HTTP metrics, FastAPI's routing and exception handlers.
For inference, the request the engine exists for, those layers cost more CPU than a small model's predict. The front
does the same work for it in one pass: the same checks with the same messages, the same request log line and HTTP
metrics, the same `{"error"}` bodies. A body it does not read as a plain V2 request goes on to the app, which reads
it with MLServer's request model as before.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.gzip import GZipMiddleware

from . import chariot_v2
from .chariot_v2 import PARAMETERS_HEADER
from .decoding import request_from_json
from .errors import BadRequest
from .internals import SERVING_ERRORS, HTTPMetrics
from .logs import REQUEST_ID_HEADERS, _current, header_request_id, log_request
from .traffic import BOTH_FRAMINGS, body_too_large, find_middleware, replay, send_error, shape_problem, short_error

logger = logging.getLogger("chariot_support")

# The V2 inference paths, with an optional version and the trailing slash Chariot's URLs end in, and the root /infer
# (chariot-v2, or chariot-v2-kserve).
INFER_PATH = re.compile(r"/v2/models/([^/]+)(/versions/([^/]+))?/infer(/?)|/infer")
# Headers the front reads: the body's framing, the body's type and chariot-v2's parameters, and where a request id
# may come from.
_REQUEST_IDS = tuple(name.encode() for name in REQUEST_ID_HEADERS)
_WANTED = {b"content-length", b"transfer-encoding", b"content-type", PARAMETERS_HEADER.encode(), *_REQUEST_IDS}


def read_json(body: bytes) -> Any:
    """A V2 request body read as JSON; an empty or broken one is the client's mistake, said plainly."""
    if not body.strip():
        raise BadRequest("the request body must be a JSON object with an 'inputs' list; it is empty")
    return chariot_v2.read_json(body, "the request body")


class InferenceFront:
    """ASGI middleware, outermost: answers inference POSTs (V2 and the root /infer) itself, and passes everything
    else to `app`."""

    def __init__(
        self,
        app,
        *,
        data_plane,
        root_answer: Callable[[bytes, Mapping[str, str]], Awaitable[tuple[bytes, str, dict[str, str]] | None]],
        max_bytes: int,
        max_elements: int,
        max_depth: int,
        max_error_chars: int,
    ):
        self.app = app
        self.data_plane = data_plane
        self.root_answer = root_answer  # the root /infer's answer (server.py), None to hand the request to the app
        self.max_bytes = max_bytes
        self.max_elements = max_elements
        self.max_depth = max_depth
        self.max_error_chars = max_error_chars
        self.metrics = HTTPMetrics.find(app)
        # MLServer's CORS headers (MLSERVER_CORS_SETTINGS) and reply compression (MLSERVER_GZIP_ENABLED) come from
        # middlewares inside the app: with either configured, inference goes through the app too.
        self.serving = find_middleware(app, (CORSMiddleware, GZipMiddleware)) is None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or not self.serving:
            return await self.app(scope, receive, send)
        path = INFER_PATH.fullmatch(scope["path"])
        if path is None:
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        headers = {k: v for k, v in scope["headers"] if k in _WANTED}
        named = {k.decode(): v.decode("latin-1") for k, v in headers.items()}
        entry: dict[str, Any] = {}
        token = _current.set(entry)  # the engine notes the request id here as soon as it knows it
        status, handed_over = 500, False
        if self.metrics is not None:
            self.metrics.started("POST")
        try:
            status, handed_over = await self._serve(scope, receive, send, path, headers, named)
        finally:
            _current.reset(token)
            if handed_over:  # the app's own request log and metrics counted it
                if self.metrics is not None:
                    self.metrics.handed_over("POST")
            else:
                log_request(
                    protocol="rest",
                    method="POST",
                    path=scope["path"],
                    status=status,
                    started=started,
                    request_id=entry.get("request_id") or header_request_id(named),
                    model=path[1] or self.data_plane.model_name,
                )
                if self.metrics is not None:
                    self.metrics.finished("POST", _route(path), status, time.perf_counter() - started)

    async def _serve(
        self, scope, receive, send, path: re.Match, headers: dict[bytes, bytes], named: dict[str, str]
    ) -> tuple[int, bool]:
        """Answer the request: the status sent (499 when the client left first), and whether the app answered."""
        if b"content-length" in headers and b"transfer-encoding" in headers:
            return await self._error(send, 400, BOTH_FRAMINGS, close=True), False
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await self._error(send, 413, body_too_large(f"{int(declared):,} bytes", self.max_bytes)), False
        body = await self._body(receive)
        if body is None:
            return 499, False  # the client left
        if len(body) > self.max_bytes:
            return await self._error(send, 413, body_too_large(f"over {self.max_bytes:,} bytes", self.max_bytes)), False
        problem = await shape_problem(body, max_elements=self.max_elements, max_depth=self.max_depth)
        if problem is not None:
            return await self._error(send, *problem), False
        try:
            answer = await (self._v2(body, path, named) if path[1] else self.root_answer(body, named))
            if answer is None:  # an unusual body: MLServer's request model reads it, in the app
                await self.app(scope, replay(body, receive), send)
                return 0, True
            content, media_type, extra = answer
        except SERVING_ERRORS as error:
            return await self._error(send, error.status_code, str(error)), False
        except Exception as error:
            logger.error("unhandled error on POST %s", scope["path"], exc_info=error)
            return await self._error(send, 500, f"internal error: {type(error).__name__}: {error}"), False
        response_headers = [(b"content-type", media_type.encode()), (b"content-length", b"%d" % len(content))]
        response_headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()]
        await send({"type": "http.response.start", "status": 200, "headers": response_headers})
        await send({"type": "http.response.body", "body": content})
        return 200, False

    async def _v2(self, body: bytes, path: re.Match, headers: dict[str, str]) -> tuple[bytes, str, dict] | None:
        decoded = await asyncio.to_thread(read_json, body) if len(body) > 1 << 20 else read_json(body)
        plain = request_from_json(decoded)
        if plain is None:
            return None
        content, extra = await self.data_plane.infer_body(plain, path[1], path[3], headers)
        return content, "application/json", extra

    async def _body(self, receive) -> bytes | None:
        """The whole body, or as much as passes the limit by one chunk; None when the client left."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            if size > self.max_bytes or not message.get("more_body"):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _error(self, send, status: int, message: str, *, close: bool = False) -> int:
        return await send_error(send, status, short_error(message, self.max_error_chars), close=close)


def _route(path: re.Match) -> str:
    """The route template MLServer's metrics label a request with, as the app's router would have matched it."""
    if not path[1]:
        return "/infer"
    version = "/versions/{model_version}" if path[2] else ""
    return f"/v2/models/{{model_name}}{version}/infer{path[4]}"
