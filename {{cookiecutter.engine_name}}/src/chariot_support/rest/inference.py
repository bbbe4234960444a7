"""The one REST transport for inference: every inference POST (V2, the root /infer, KServe V1 and TensorFlow
Serving's `:predict`) is read, answered and written here, in front of MLServer's REST app, which keeps every other
route.

For each request the front owns what belongs to the connection: the framing check, the body limit and the process's
body budget (counted before the bytes are buffered), chariot-v2 JSONL's line limit (counted while the body arrives),
the body-shape guard, `{"error"}` bodies cut to length, the request log line and MLServer's HTTP metrics. The
route's protocol (protocols/v2_rest.py, v2_binary.py, chariot_v2.py, legacy.py) reads the body into the one request
type; the front asks the pipeline (pipeline/pipeline.py) for the answer and has the same protocol render it. CORS and
gzip, when MLServer's settings turn them on, wrap the front's answers with the same Starlette middlewares MLServer
puts in its app.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.gzip import GZipMiddleware

from chariot_support.after_answer import afterwards
from chariot_support.error_bodies import send_error
from chariot_support.errors import BadRequest, ChariotError, internal_error
from chariot_support.logs.request_lines import (
    REQUEST_ID_HEADERS,
    header_request_id,
    log_request,
    note_request_id,
    request_entry,
)
from chariot_support.memory.budgets import LARGE_BODY, BodyBudget
from chariot_support.pipeline.pipeline import SERVING_ERRORS, request_id_of
from chariot_support.protocols import chariot_v2, legacy, v2_binary
from chariot_support.protocols import v2_rest as v2
from chariot_support.protocols.request import Answer
from chariot_support.rest.bodies import (
    BOTH_FRAMINGS,
    BodyTooLarge,
    body_too_large,
    both_framings,
    inflate,
    read_body,
    shape_problem,
)
from chariot_support.seams.metrics import HTTPMetrics
from chariot_support.seams.uvicorn import ANSWERED
from chariot_support.settings import EngineSettings
from chariot_support.stages.timing import server_timing, stage_times

logger = logging.getLogger("chariot_support")

Rendered = tuple[bytes, str, dict, Answer]  # a protocol's answer: body, media type, headers, the pipeline's answer

# Each inference route once: its path, and the route template MLServer's HTTP metrics label it with.
V2_PATH = re.compile(r"/v2/models/(?P<name>[^/]+)(?P<versioned>/versions/(?P<version>[^/]+))?/infer(?P<slash>/?)")
ROOT_PATH = re.compile(r"/infer/?")  # Chariot writes its URLs with the trailing slash
V1_PATH = re.compile(r"/v1/models/(?P<path>.+)")
_WANTED = {
    b"content-length",
    b"transfer-encoding",
    b"content-type",
    b"content-encoding",
    chariot_v2.PARAMETERS_HEADER.encode(),
    v2_binary.HEADER.encode(),
    *(name.encode() for name in REQUEST_ID_HEADERS),
}


def route_of(path: str) -> tuple[str, re.Match] | None:
    """Which inference route a POST to `path` is ("v2", "root", "v1"), with its match; None for any other path."""
    for kind, pattern in (("v2", V2_PATH), ("root", ROOT_PATH), ("v1", V1_PATH)):
        match = pattern.fullmatch(path)
        if match is not None:
            return kind, match
    return None


def route_template(kind: str, match: re.Match) -> str:
    """The route template MLServer's metrics label a request with, as its router would have matched it."""
    if kind == "root":
        return "/infer"
    if kind == "v1":
        return "/v1/models/{path:path}"
    version = "/versions/{model_version}" if match["versioned"] else ""
    return f"/v2/models/{{model_name}}{version}/infer{match['slash']}"


class InferenceFront:
    """ASGI middleware, outermost: answers inference POSTs itself, and passes everything else to `app`."""

    def __init__(
        self,
        app,
        *,
        pipeline,
        settings,
        engine: EngineSettings,
        budget: BodyBudget,
    ):
        self.app = app
        self.pipeline = pipeline
        self.budget = budget
        self.max_bytes = engine.max_request_mb << 20
        self.max_elements = engine.max_elements
        self.max_depth = engine.max_json_depth
        self.max_inputs = engine.max_inputs
        self.server_timing = engine.server_timing  # CHARIOT_SERVER_TIMING: each answer's stages in its headers
        self.protocol = chariot_v2.Protocol(engine.inference_protocol)
        self.metrics = HTTPMetrics.find(app)
        self.answer_http = _with_cors_and_gzip(self._inference, settings)
        self.refuse_http = _with_cors_and_gzip(self._not_allowed, settings)
        self._protocols: dict[str, Callable] = {"v2": self._v2, "root": self._root, "v1": self._v1}

    async def __call__(self, scope, receive, send):
        route = route_of(scope["path"]) if scope["type"] == "http" else None
        if route is None:
            return await self.app(scope, receive, send)
        scope["chariot.route"] = route
        if scope["method"] == "POST":
            return await self.answer_http(scope, receive, send)
        if route[0] == "v1":  # /v1/models/... also has the app's GET routes (status, metadata)
            return await self.app(scope, receive, send)
        await self.refuse_http(scope, receive, send)  # CORS answers a browser's preflight before this is called

    async def _not_allowed(self, scope, receive, send):
        started, method = time.perf_counter(), scope["method"]
        status = await send_error(send, 405, f"{method} is not allowed on {scope['path']}: send a POST")
        log_request(
            protocol="rest",
            method=method,
            path=scope["path"],
            status=status,
            started=started,
            request_id=header_request_id({k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}),
            model=self.pipeline.model_name,
        )

    async def _inference(self, scope, receive, send):
        """One inference request, answered, logged and counted."""
        kind, match = scope["chariot.route"]
        started = time.perf_counter()
        raw = {k: v for k, v in scope["headers"] if k in _WANTED}
        headers = {k.decode(): v.decode("latin-1") for k, v in raw.items()}
        status = 500
        if self.metrics is not None:
            self.metrics.started("POST")
        with request_entry() as entry:
            try:
                status = await self._serve(scope, receive, send, kind, match, raw, headers, started, entry)
            finally:
                ended = time.perf_counter()
                model = match["name"] if kind == "v2" else self.pipeline.model_name
                answer, stages = entry.get("answer"), entry.get("stages")
                if stages is not None:  # now that the answer is written
                    stages = stages[:-1] + ((ended - answer.answered_at) * 1000,)
                log_request(
                    protocol="rest",
                    method="POST",
                    path=scope["path"],
                    status=status,
                    started=started,
                    ended=ended,
                    request_id=entry.get("request_id") or header_request_id(headers),
                    model=model,
                    stages=stages,
                )
                if self.metrics is not None:
                    self.metrics.finished("POST", route_template(kind, match), status, ended - started)
                if status == 200 and stages is not None:  # Triton's statistics, and the stage histograms
                    self.pipeline.statistics.answered((stages, ended - started, ended, answer.answered.stages))
                else:
                    failed = self.pipeline.statistics.failed
                    afterwards.later(failed, _model_addressed(kind, match), ended - started, ended)

    async def _serve(
        self, scope, receive, send, kind: str, match: re.Match, raw: dict, headers: dict[str, str], started, entry
    ) -> int:
        """Read the body within its limits, answer it, and send the answer: the status sent (499 when the client
        left first, or what the connection answered when it cut a slow client). The pipeline's answer and the
        request's stages up to its writing go into `entry`."""
        if both_framings(raw.items()):
            return await send_error(send, 400, BOTH_FRAMINGS, close=True)
        declared = raw.get(b"content-length", b"")
        size = int(declared) if declared.isdigit() else None
        if size is not None and size > self.max_bytes:
            return await send_error(send, 413, body_too_large(f"{size:,} bytes", self.max_bytes))
        budget = self.budget
        held = 0
        admission = 0.0  # seconds waiting for room in the body budget
        try:
            if size:
                waiting = time.perf_counter()
                await budget.reserve(size)
                held = size
                admission = time.perf_counter() - waiting
            encoding = headers.get("content-encoding", "")
            lines = None
            jsonl = chariot_v2.media_type(headers.get("content-type")) in chariot_v2.JSONL_TYPES
            if kind == "root" and jsonl and not encoding:  # lines of a compressed body are counted once inflated
                lines = chariot_v2.LineCounter(self.max_inputs)

            def arrived(chunk: bytes, received: int) -> None:
                nonlocal held
                if received > held:  # counted in the budget as it arrives, beyond what Content-Length reserved
                    budget.grow(received - held)
                    held = received
                if lines is not None:
                    lines.add(chunk)

            body = await read_body(receive, self.max_bytes, lambda size: body_too_large(size, self.max_bytes), arrived)
            if body is None:
                return scope.get(ANSWERED, 499)  # the client left, or was cut for its slowness
            if encoding:  # inflated off the event loop: a bomb takes a step past the limit, health answers meanwhile
                too_large = functools.partial(body_too_large, max_bytes=self.max_bytes)
                # The most it may inflate to is held in the body budget while it does, so that bombs sent at once
                # wait their turn (or get a 503) instead of each growing to the limit outside the budget.
                await budget.reserve(self.max_bytes)
                held += self.max_bytes
                body = await asyncio.to_thread(inflate, body, encoding, self.max_bytes, too_large)
                unused = self.max_bytes - len(body)
                budget.release(unused)
                held -= unused
            # A V2 body in the binary tensor data extension: JSON for its first `head` bytes, then tensor bytes.
            head = v2_binary.head_length(headers.get(v2_binary.HEADER), len(body)) if kind != "v1" else None
            problem = await shape_problem(body, max_elements=self.max_elements, max_depth=self.max_depth, end=head)
            if problem is not None:
                return await send_error(send, *problem)
            arrived = time.perf_counter()
            content, media_type, extra, answer = await self._protocols[kind](body, match, headers, head)
        except BodyTooLarge as refused:
            return await send_error(send, 413, str(refused))
        except SERVING_ERRORS as error:
            # Refused before the whole body arrived, the rest is read and dropped by the HTTP protocol, not kept.
            return await send_error(send, error.status_code, str(error))
        except Exception as error:
            logger.error("unhandled error on POST %s", match.string, exc_info=error)
            return await send_error(send, 500, internal_error(error))
        finally:
            if held:
                budget.release(held)
        entry["answer"] = answer
        stages = entry["stages"] = stage_times((started, admission, arrived - started - admission, arrived), answer)
        response_headers = [(b"content-type", media_type.encode()), (b"content-length", b"%d" % len(content))]
        names = _HEADER_NAMES
        response_headers += [(names.get(k) or _header_name(k), v.encode("latin-1")) for k, v in extra.items()]
        if self.server_timing:  # the total: to the answer, which the stages so far add up to
            timing = server_timing(stages, (answer.answered_at - started) * 1000)
            response_headers.append((b"server-timing", timing))
        await send({"type": "http.response.start", "status": 200, "headers": response_headers})
        await send({"type": "http.response.body", "body": content})
        return 200

    # Each protocol answers with the body, its media type, the answer's headers, and the pipeline's answer.

    async def _v2(self, body: bytes, match: re.Match, headers: dict[str, str], head: int | None) -> Rendered:
        return await self._answer_v2(body, None, headers, match["name"], match["version"], head)

    async def _answer_v2(
        self,
        body: bytes,
        decoded: Any,
        headers: dict[str, str],
        name: str | None,
        version: str | None,
        head: int | None = None,
    ) -> Rendered:
        """A V2 body answered: JSON (`decoded`, when it is already read), or `head` bytes of JSON and then binary
        tensor data; a large one is read off the loop. The answer is JSON unless the request asks for binary
        outputs."""

        def read() -> tuple[Any, v2_binary.Outputs]:
            if head is not None:
                return v2_binary.parse(body, head, self.max_elements)
            value, outputs = v2_binary.requested_outputs(v2.read_json(body) if decoded is None else decoded)
            return v2.parse(value), outputs

        request, outputs = await asyncio.to_thread(read) if len(body) > LARGE_BODY else read()
        answer = await self.pipeline.answer(request, headers, name, version)
        content, media_type, extra = v2_binary.render(answer, outputs)
        return content, media_type, {**answer.headers, **extra}, answer

    async def _root(self, body: bytes, match: re.Match, headers: dict[str, str], head: int | None) -> Rendered:
        """The root /infer: chariot-v2-kserve or chariot-v2, as CHARIOT_INFERENCE_PROTOCOL pins it or the request
        shows it. A body in the binary tensor data extension is chariot-v2-kserve's."""
        if head is not None:
            if self.protocol is chariot_v2.Protocol.CHARIOT_V2:
                raise BadRequest(chariot_v2.BINARY_ON_CHARIOT_V2)
            return await self._answer_v2(body, None, headers, None, None, head)
        content_type = headers.get("content-type")
        parameters = headers.get(chariot_v2.PARAMETERS_HEADER)

        def read() -> tuple[Any, chariot_v2.ChariotV2Request | None]:
            chosen, decoded = chariot_v2.choose(self.protocol, content_type, body)
            if chosen is chariot_v2.Protocol.KSERVE:
                return decoded, None
            return decoded, chariot_v2.parse(body, content_type, parameters, self.max_inputs, decoded=decoded)

        decoded, sent = await asyncio.to_thread(read) if len(body) > LARGE_BODY else read()
        if sent is None:  # chariot-v2-kserve: a V2 body
            return await self._answer_v2(body, decoded, headers, None, None)
        answer = await self.pipeline.answer(sent.request, headers)
        content, media_type = chariot_v2.render(list(answer.answered.results), sent.form)
        return content, media_type, answer.headers, answer

    async def _v1(self, body: bytes, match: re.Match, headers: dict[str, str], head: int | None) -> Rendered:
        """KServe V1 and TensorFlow Serving: `/v1/models/<name>[/versions/<v>]:<verb>`."""
        path = match["path"]
        verb = legacy.VERB_PATH.fullmatch(path)
        if verb is None or verb["verb"] not in legacy.VERBS:
            known = ", ".join(f":{v}" for v in legacy.VERBS)
            raise ChariotError(f"no route for POST /v1/models/{path}; the verbs are {known}", 404)
        name = verb["verb"]
        # The request's id by the pipeline's rule, before the model is looked up: a 404 is logged with it too.
        request_id = request_id_of(None, headers)
        note_request_id(request_id)
        legacy.check_verb(name, await self.pipeline.served(verb["name"]))
        read = legacy.read_classify if name == "classify" else legacy.read_predict
        # Reading a body of pixel lists takes long enough to hold up health checks: off the loop.
        request = await asyncio.to_thread(lambda: dataclasses.replace(read(legacy.read_body(body)), id=request_id))
        answer = await self.pipeline.answer(request, headers, verb["name"], verb["version"], explain=name == "explain")
        return legacy.render(name, answer), "application/json", answer.headers, answer


# The answers' header names as uvicorn sends them, encoded once: the engine's own and MLServer's (CloudEvents), a few.
_HEADER_NAMES: dict[str, bytes] = {}


def _header_name(name: str) -> bytes:
    encoded = name.lower().encode("latin-1")
    if len(_HEADER_NAMES) < 64:  # the engine's and MLServer's own names: never a client's, but bounded all the same
        _HEADER_NAMES[name] = encoded
    return encoded


def _model_addressed(kind: str, match: re.Match) -> str | None:
    """The model a request the pipeline did not answer was sent to, as the client named it (None: the served model,
    as the root /infer and a legacy path too broken to name one address it)."""
    if kind == "v2":
        return match["name"]
    if kind == "v1":
        verb = legacy.VERB_PATH.fullmatch(match["path"])
        return None if verb is None else verb["name"]
    return None


def _with_cors_and_gzip(answer, settings):
    """`answer` wrapped in CORS and gzip as MLServer's settings configure its app (MLSERVER_CORS_SETTINGS,
    MLSERVER_GZIP_ENABLED), so inference answers carry the same headers and encoding as every other route."""
    if settings.gzip_enabled:
        answer = GZipMiddleware(answer)
    cors = settings.cors_settings
    if cors is not None:
        answer = CORSMiddleware(
            answer,
            allow_origins=cors.allow_origins,
            allow_origin_regex=cors.allow_origin_regex,
            allow_credentials=cors.allow_credentials,
            allow_methods=cors.allow_methods,
            allow_headers=cors.allow_headers,
            max_age=cors.max_age,
        )
    return answer
