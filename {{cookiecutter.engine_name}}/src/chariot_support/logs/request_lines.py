"""The engine's logs as JSON lines on stdout: one line per request (request id, model, status, latency, and an
answered inference's stages in milliseconds) beside the engine's and MLServer's own messages, at the level
CHARIOT_LOG_LEVEL names (default INFO)."""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from chariot_support.after_answer import afterwards
from chariot_support.logs.model_output import request_fields
from chariot_support.seams.mlserver import current_model_name
from chariot_support.stages.timing import STAGES

HANDLER_NAME = "chariot_json_lines"
requests_logger = logging.getLogger("chariot_support.requests")

# What the request being served has learnt about itself, for its log line; a dict so that code running in a copy
# of the context (a task group, a middleware's task) still writes to the same place.
_current: ContextVar[dict | None] = ContextVar("chariot_request", default=None)
# The most characters of a path or request id a log line carries.
MAX_LOGGED = 256
_MODEL_PATH = re.compile(r"^/v2/models/([^/]+)")
# Health, metadata, and Triton's model configuration and statistics (which perf_analyzer reads every few seconds).
_QUIET_PATHS = re.compile(
    r"^/(v2/health/(live|ready)|ready|v2/models/[^/]+/ready|v2/models/[^/]+|v2"
    r"|v2/models(/[^/]+(/versions/[^/]+)?)?/(stats|config))/?$"
)
# gRPC's health and metadata calls, which probes and clients' discovery make: logged as quietly as REST's probes, and
# never refused for load (grpc/limits.py), so that liveness answers while inference is at its limits.
PROBE_CALLS = frozenset(
    {"ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelConfig", "ModelStatistics"}
)
# Readiness answered "not ready" (503) while the model loads and warms up is what a starting engine says, not an
# error: those probes are logged at DEBUG until the engine has once been ready. From then on a failing probe means the
# engine lost its readiness (its model stuck, its workers gone) and is logged at ERROR.
_READINESS_PATHS = re.compile(r"^/(v2/health/ready|ready|v2/models/[^/]+(/versions/[^/]+)?/ready)/?$")
_ready_once = False
# Each stage's field in a request's line, and the JSON of all of them, in milliseconds to three places, which the
# engine's own lines end with: written so, the fields cost a fifth of what json.dumps took for them with the rest.
STAGE_FIELDS = tuple(f"{stage}_ms" for stage in STAGES)
_STAGES_JSON = "".join(f', "{field}": %.3f' for field in STAGE_FIELDS) + "}"


def engine_ready() -> None:
    """The engine answered ready: readiness probes that fail from now on are errors."""
    global _ready_once
    _ready_once = True


class JSONLines(logging.Formatter):
    """One JSON object per record: time (UTC), level, logger, message, the record's `fields`, and any traceback."""

    def format(self, record: logging.LogRecord) -> str:
        traceback = self.formatException(record.exc_info) if record.exc_info else None
        fields = getattr(record, "fields", {})
        ids = request_fields()  # written inside a predict: the request's id, whichever logger wrote it
        if ids:
            fields = {**ids, **fields}
        return json_line(record.created, record.levelname, record.name, record.getMessage(), fields, traceback)


def json_line(
    created: float, level: str, name: str, message: str, fields: dict[str, Any], traceback: str | None = None
) -> str:
    """The JSON line of one record."""
    entry: dict[str, Any] = {
        "time": datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds"),
        "level": level.lower(),
        "logger": name,
        "message": message,
    }
    model = current_model_name()
    if model:
        entry["model"] = model
    entry.update(fields)
    if traceback is not None:
        entry["traceback"] = traceback
    return json.dumps(entry, default=str)


class EngineChoices(logging.Filter):
    """Drops MLServer's warnings about choices the engine makes on purpose, which a person can do nothing about:
    "REST custom configuration is out of support", written at every start because the engine passes uvicorn its own
    options (idle keep-alive, the protocol that bounds connections; see seams/mlserver.set_uvicorn_options)."""

    DROPPED = frozenset({"REST custom configuration is out of support. Use as your own risk"})

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name.startswith("mlserver") and record.getMessage() in self.DROPPED)


def logging_config(level: str, *, mlserver_debug: bool = False) -> dict[str, Any]:
    """The engine's logging, for `logging.config.dictConfig`: its own records, MLServer's and uvicorn's, one JSON
    object per line on stdout at CHARIOT_LOG_LEVEL (MLServer's at DEBUG when MLSERVER_DEBUG asks for it). Every other
    logger (the model's, its libraries', and the model's print and stderr lines: see logs/model_output.py) reaches
    the same lines through the root logger, at CHARIOT_LOG_LEVEL.

    The engine hands it to MLServer as `logging_settings`, which MLServer applies in each parallel worker and
    passes to uvicorn as its log configuration: every process of the engine writes the same lines."""
    own = {"handlers": [HANDLER_NAME], "level": level, "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json_lines": {"()": f"{__name__}.JSONLines"}},
        "filters": {"engine_choices": {"()": f"{__name__}.EngineChoices"}},
        "handlers": {
            HANDLER_NAME: {
                "()": "chariot_support.logs.model_output.stdout_handler",  # the real stdout, never the model's
                "formatter": "json_lines",
                "filters": ["engine_choices"],
            }
        },
        "root": {"handlers": [HANDLER_NAME], "level": level},
        "loggers": {
            "chariot_support": own,
            "mlserver": {**own, "level": "DEBUG" if mlserver_debug else level},
            "uvicorn": own,
            "uvicorn.error": {"handlers": [], "level": level, "propagate": True},  # written by "uvicorn"'s handler
            "uvicorn.access": own,
        },
    }


def log_request(
    *,
    protocol: str,
    method: str,
    path: str,
    status: int,
    started: float,
    request_id: str | None,
    model: str | None,
    ended: float | None = None,
    stages: tuple[float, ...] | None = None,
) -> None:
    """One request's line: `started` and `ended` are time.perf_counter() (now when None), `stages` an answered
    inference's (stages/timing.STAGES, milliseconds), written as fields."""
    latency_ms = round(((time.perf_counter() if ended is None else ended) - started) * 1000, 2)
    if status >= 500:
        level = logging.ERROR
        if status == 503 and not _ready_once and method == "GET" and _READINESS_PATHS.match(path):
            level = logging.DEBUG  # still loading or warming up
    elif status < 400 and ((method == "GET" and _QUIET_PATHS.match(path)) or method in PROBE_CALLS):
        level = logging.DEBUG  # health probes and metadata arrive every few seconds; they would drown the rest
    else:
        level = logging.INFO
    if not requests_logger.isEnabledFor(level):
        return
    # A line stays one short line whatever the client sent.
    path, request_id, model = _capped(path), _capped(request_id), _capped(model)
    fields = {
        "request_id": request_id,
        "model": model,
        "protocol": protocol,
        "method": method,
        "path": path,
        "status": status,
        "latency_ms": latency_ms,
    }
    # Written by the thread that does requests' work after their answers, with the time this request ended.
    afterwards.later(_write_line, time.time(), level, (method, path, status, latency_ms), fields, stages)


_LINE = "%s %s %s %.1f ms"  # method, path, status, latency


def _write_line(
    created: float, level: int, args: tuple, fields: dict[str, Any], stages: tuple[float, ...] | None = None
) -> None:
    handler = _own_handler(level)
    if handler is not None:  # the engine's own JSON lines on stdout: written a batch at a time (_write_batch)
        if _batch and _batch[0] is not handler:
            _write_batch()
        if not _batch:
            _batch.append(handler)
        line = json_line(created, logging.getLevelName(level), requests_logger.name, _LINE % args, fields)
        _batch.append(line if stages is None else line[:-1] + _STAGES_JSON % stages)
        return
    if stages is not None:
        fields.update(zip(STAGE_FIELDS, [round(ms, 3) for ms in stages], strict=True))
    # Logging set up otherwise (MLSERVER_LOGGING_SETTINGS): a record through its handlers and filters, as any other.
    record = requests_logger.makeRecord(
        requests_logger.name, level, __file__, 0, _LINE, args, None, extra={"fields": fields}
    )
    record.created, record.msecs = created, int((created - int(created)) * 1000) + 0.0  # when the request ended
    requests_logger.handle(record)


# The engine's handler, then the lines for it of the batch being done (by the thread of after_answer.py, under
# its lock). A forked worker starts with none: those are its parent's to write.
_batch: list = []
os.register_at_fork(after_in_child=_batch.clear)


def _write_batch() -> None:
    """The batch's lines, in one write: a LogRecord and a write for each line cost several times as much."""
    if not _batch:
        return
    handler, lines = _batch[0], _batch[1:]
    _batch.clear()
    with handler.lock:
        handler.stream.write("\n".join(lines) + "\n")
        handler.flush()


def _own_handler(level: int) -> logging.StreamHandler | None:
    """The engine's own JSON-lines handler, when a request's record would reach it and it alone, unchanged on the
    way (as `logging_config` sets logging up); None otherwise."""
    parent = requests_logger.parent
    if (
        requests_logger.handlers
        or requests_logger.filters
        or requests_logger.disabled
        or not requests_logger.propagate
        or parent is None
        or parent.propagate
        or len(parent.handlers) != 1
    ):
        return None
    handler = parent.handlers[0]
    if (
        type(handler) is logging.StreamHandler
        and type(handler.formatter) is JSONLines
        and level >= handler.level
        and all(type(f) is EngineChoices for f in handler.filters)  # which keeps every request line
    ):
        return handler
    return None


afterwards.at_batch_end(_write_batch)


def _capped(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_LOGGED:
        return text
    return f"{text[:MAX_LOGGED]}... ({len(text) - MAX_LOGGED:,} more characters)"


# Where a request's id comes from when its body has none, first match first: the caller's own id, then the base id
# Chariot builds its inference ids from.
REQUEST_ID_HEADERS = ("x-request-id", "chariot-inference-base-id")


def id_header(headers: Mapping[str, str]) -> tuple[str, str] | None:
    """The header that carries the request's id, and its value (lowercase names, as HTTP/2, gRPC metadata and
    Starlette give them), or None."""
    for name in REQUEST_ID_HEADERS:
        value = headers.get(name)
        if value:
            return name, value
    return None


def header_request_id(headers: Mapping[str, str]) -> str | None:
    """The request id the headers carry, as the log names a request the pipeline never saw."""
    found = id_header(headers)
    return found[1] if found else None


class request_entry:  # noqa: N801 (used as a function: `with request_entry() as entry`)
    """What the request served in this block learns about itself (its id), for its log line. A class, not a
    generator's context manager, which cost each request 1.5 us more here."""

    __slots__ = ("_entry", "_token")

    def __enter__(self) -> dict[str, Any]:
        self._entry: dict[str, Any] = {}
        self._token = _current.set(self._entry)
        return self._entry

    def __exit__(self, *exc_info) -> None:
        _current.reset(self._token)


def note_request_id(request_id: str | None) -> None:
    """Tell the current request's log line its id, once the engine knows it (from the body, a header, or new)."""
    entry = _current.get()
    if entry is not None and request_id:
        entry.setdefault("request_id", request_id)


class RequestLog:
    """ASGI middleware: one log line per REST request, written when the reply has been sent."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        entry: dict[str, Any] = {"status": 500}  # what the client sees if the app fails before replying
        token = _current.set(entry)

        async def record(message):
            if message["type"] == "http.response.start":
                entry["status"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record)
        finally:
            _current.reset(token)
            path = scope.get("path", "")
            found = _MODEL_PATH.match(path)
            request_id = entry.get("request_id") or header_request_id(_headers(scope))
            model = found.group(1) if found else None
            log_request(
                protocol="rest",
                method=scope.get("method", ""),
                path=path,
                status=entry["status"],
                started=started,
                request_id=request_id,
                model=model,
            )


def _headers(scope) -> dict[str, str]:
    return {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope.get("headers", ())}


def install_request_log(app) -> None:
    """Log every REST request of `app` (inference, which the front answers, is logged by the front)."""
    app.add_middleware(RequestLog)
