"""The model's own output as the engine's log lines: what model.py logs (any logger) and what it prints or writes to
stderr becomes one JSON line each, with the id of the request whose predict wrote it.

`logging` reaches the engine's JSON lines through the root logger (logs/request_lines.logging_config). print() and
sys.stderr writes reach them through `ModelOutput`, which takes the place of sys.stdout and sys.stderr in each
process that serves (the main one and each parallel worker): each line written becomes a record of the logger
"print" (INFO) or "stderr" (WARNING), or at the level the line says. The engine's own handler writes to the real
stdout, never through them.
"""

from __future__ import annotations

import io
import logging
import sys
import threading
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any, TextIO

from chariot_support.logs.native_lines import MAX_LINE, Levels
from chariot_support.logs.native_output import enable_fault_dumps, engine_stdout

# The requests whose predict (or explain) runs in this context: one, or several batched into one call.
_requests: ContextVar[tuple[str, ...]] = ContextVar("chariot_model_requests", default=())
# MAX_LINE: the most characters of one line the model writes (as the forwarder takes native lines): a longer one (or
# output with no newline at all) goes out in pieces of this size, so that what a model writes cannot grow the
# engine's memory.


class serving:  # noqa: N801 (used as a function: `with serving(ids)`)
    """Mark what the model logs or writes in this block as written for these requests. A class, not a generator's
    context manager, which cost each request 1.5 us more here."""

    __slots__ = ("_ids", "_token")

    def __init__(self, request_ids: Sequence[str | None]):
        self._ids = tuple(str(i) for i in request_ids if i)

    def __enter__(self) -> None:
        self._token = _requests.set(self._ids)

    def __exit__(self, *exc_info) -> None:
        _requests.reset(self._token)


def request_fields() -> dict[str, Any]:
    """The fields a log line written now gets from the request being served: its request_id, and with a batch of
    several, every request's (request_ids)."""
    ids = _requests.get()
    if not ids:
        return {}
    if len(ids) == 1:
        return {"request_id": ids[0]}
    return {"request_id": ids[0], "request_ids": list(ids)}


class ModelOutput(io.TextIOBase):
    """A text stream that turns each line written to it into a record of `logger`: in place of sys.stdout or
    sys.stderr, at `level` or at the level the line says it has, as native lines get theirs (a traceback's lines at
    error, "WARNING: ..." at warning). Each thread's partial line waits for its newline (print writes the text and
    the newline apart), up to MAX_LINE characters. Writes made while a record is being handled (a handler writing to this stream, or
    logging's own error report) go to the real stream, so nothing loops."""

    def __init__(self, stream: TextIO, logger: logging.Logger, level: int):
        super().__init__()
        self.stream = stream
        self._logger = logger
        self._level = level
        self._local = threading.local()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.stream, "errors", None)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.stream.fileno()  # faulthandler and subprocesses write to the real descriptor

    def write(self, text: str) -> int:
        local = self._local
        if getattr(local, "emitting", False):
            return self.stream.write(text)
        pending = getattr(local, "pending", "") + text
        *lines, pending = pending.split("\n")
        while len(pending) > MAX_LINE:
            lines.append(pending[:MAX_LINE])
            pending = pending[MAX_LINE:]
        local.pending = pending
        for line in lines:
            self._emit(line)
        return len(text)

    def flush(self) -> None:
        """Flushes the real stream; a partial line keeps waiting for its newline."""
        self.stream.flush()

    def finish(self) -> None:
        """Write out this thread's partial line, if any."""
        pending = getattr(self._local, "pending", "")
        self._local.pending = ""
        if pending:
            self._emit(pending)

    def _emit(self, line: str) -> None:
        line = line.rstrip("\r")
        if not line.strip():
            return
        levels = getattr(self._local, "levels", None)
        if levels is None:
            levels = self._local.levels = Levels(logging.getLevelName(self._level).lower())
        level = logging.getLevelName(levels.of(line).upper())  # what the line says, as native lines' (Levels)
        if not self._logger.isEnabledFor(level):
            return
        self._local.emitting = True
        try:
            self._logger.log(level, "%s", line)
        finally:
            self._local.emitting = False


def real_stream(stream: Any) -> Any:
    """The stream under a ModelOutput (the stream itself otherwise)."""
    return stream.stream if isinstance(stream, ModelOutput) else stream


def stdout_handler() -> logging.StreamHandler:
    """The engine's handler of JSON lines: on the real stdout, even where sys.stdout is a ModelOutput and fd 1 a pipe to
    the forwarder of native output (logging's dictConfig builds it by this name, in every process and every time the
    configuration is applied)."""
    return logging.StreamHandler(real_stream(engine_stdout()))


def capture_output(handler_name: str) -> bool:
    """Put ModelOutput in place of sys.stdout and sys.stderr, once per process, when the root logger writes the
    engine's JSON lines (its handler named `handler_name`): not when MLSERVER_LOGGING_SETTINGS set logging up
    otherwise. Returns whether the model's output is captured."""
    if isinstance(sys.stdout, ModelOutput):
        return True
    if not any(h.get_name() == handler_name for h in logging.getLogger().handlers):
        return False
    logging.captureWarnings(True)  # warnings.warn: a record of "py.warnings", not a line on stderr
    enable_fault_dumps()  # a crash's dump of every thread, onto fd 2: JSON lines too (logs/native_output.py)
    sys.stdout = ModelOutput(sys.stdout, logging.getLogger("print"), logging.INFO)
    sys.stderr = ModelOutput(sys.stderr, logging.getLogger("stderr"), logging.WARNING)
    return True
