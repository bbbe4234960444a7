"""The forwarder: the small process that turns what native code writes to the engine's file descriptors 1 and 2
(TFLite, glog, ONNX Runtime, CUDA, a crash's fault dump) into the engine's JSON lines, each with the level the line
says it has.

The engine's processes write into two pipes (logs/native_output.py); this process reads them, and writes JSON lines to
the real stdout (what came in on fd 1) and the real stderr (what came in on fd 2). It runs apart from the engine so
that it needs none of the engine's GIL and outlives a process that crashes: a writer blocked on a full pipe while
holding the GIL cannot stop it reading, and a segfault's last words are read after the process that wrote them has
gone. It runs as `python -I -S native_lines.py OUT ERR CONTROL LEVEL` and imports the standard library alone:
json, re and datetime with the first line it reads, so that beside an engine whose native code writes nothing (most
engines without parallel workers) it starts and waits in a few milliseconds of CPU.
"""

from __future__ import annotations

import os
import select
import sys
import time

try:  # the signal module's own C part: the module itself imports enum, which costs more than all the rest of a start
    import _signal as signal
except ImportError:  # a Python without it
    import signal  # type: ignore[no-redef]

# The most bytes of a native line in one JSON line: a longer line, or output that never ends one, goes out in pieces
# of this size, so that what native code writes cannot grow this process's memory.
MAX_LINE = 16_384
# A JSON line an engine process wrote (a parallel worker's log lines reach its fd 1) is passed on whole up to this size.
MAX_RECORD = 1 << 20
# How long a line waits for its newline before it goes out as it is: all the engine's processes share the pipes, so a
# worker that dies mid-line must not hold another's next line back.
PARTIAL_WAIT = 0.5
CHUNK = 1 << 16
# Writes up to this size reach a pipe whole, never mixed with another process's bytes (POSIX's PIPE_BUF).
ATOMIC_WRITE = 4096

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_LETTERS = {"V": "debug", "D": "debug", "I": "info", "W": "warning", "E": "error", "F": "critical"}
_WORDS = {"VERBOSE": "debug", "DEBUG": "debug", "INFO": "info", "WARN": "warning", "WARNING": "warning"}
_WORDS |= {"ERROR": "error", "FATAL": "critical", "CRITICAL": "critical"}

# How native libraries mark a line's level, first match first; the group is a letter of _LETTERS or a word of _WORDS.
MARKERS = [
    # glog and abseil ("W0000 00:00:1700000000.123456   123 file.cc:121] ..."), and PyTorch's c10, which brackets the
    # same ("[W1201 10:00:00.123456789 file.cpp:42] ...", "[W socket.cpp:663] ...").
    r"\[?([IWEF])(?:\d{4} [\d:.]+)?(?: +\d+)? [^\s\]]+:\d+\]",
    # ONNX Runtime: "2026-11-30 10:00:00.000 [W:onnxruntime:, file.cc:42 Function] ..."
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \[([VIWEF]):onnxruntime:",
    # TensorFlow: "2026-11-30 10:00:00.000000: W tensorflow/core/..."
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) ",
    # TFLite and LiteRT ("INFO: Created TensorFlow Lite XNNPACK delegate for CPU."), glog's own "WARNING: ...", and
    # Python's logging as basicConfig formats it in a model's subprocess ("WARNING:root:...").
    r"(VERBOSE|DEBUG|INFO|WARNING|ERROR|FATAL|CRITICAL):(?: |[\w.]+:)",
    # OpenCV: "[ WARN:0@0.010] global loadsave.cpp:244 ..."
    r"\[ ?(VERBOSE|DEBUG|INFO|WARN|ERROR|FATAL):",
]
# A process's last words: Python's fatal errors and fault dumps, C++'s uncaught exceptions, glog's and abseil's crash
# reports ("*** Check failure stack trace: ***", "*** SIGSEGV received at ...").
FATAL = r"Fatal Python error: |terminate called |\*\*\* "
# A Python traceback, and what Python writes before one (a thread's, an exception it could not raise).
TRACEBACK = r"Traceback \(most recent call last\):|Exception in thread |Exception ignored in: "
# Lines that continue the one before (a traceback's or a fault dump's frames, the threads of a dump): its level.
CONTINUES = r"\s|Current thread 0x|Thread 0x|Stack \(most recent call first\)|Extension modules: |<no Python frame>"
_DUMP = b"Fatal Python error: "


class _Patterns:
    """The formats above, compiled when the first line is read (re keeps them compiled for every later stream)."""

    def __init__(self):
        import re

        self.markers = [re.compile(marker) for marker in MARKERS]
        self.fatal, self.traceback, self.continues = (re.compile(p) for p in (FATAL, TRACEBACK, CONTINUES))


class Levels:
    """The level of each line of one stream, read in order: the one the line says it has, or the one of the line it
    continues (a traceback's frames, the rest of a line cut in pieces), or `default`."""

    def __init__(self, default: str):
        self.default = default
        self.last = default  # the level of the line before
        self._closing = False  # a Python traceback ends with an unindented line: its exception
        self._patterns: _Patterns | None = None

    def of(self, text: str) -> str:
        patterns = self._patterns = self._patterns or _Patterns()
        if patterns.continues.match(text):
            return self.last
        closing, self._closing = self._closing, False
        for marker in patterns.markers:
            found = marker.match(text)
            if found:
                level = _LETTERS.get(found.group(1)) or _WORDS[found.group(1)]
                break
        else:
            if patterns.fatal.match(text):
                level = "critical"
            elif patterns.traceback.match(text):
                level, self._closing = "error", True
            else:
                level = self.last if closing else self.default
        self.last = level
        return level


class Lines:
    """One pipe's bytes as JSON lines: complete lines, long ones in pieces, with each line's level (Levels);
    `default` is the level of a line that says none."""

    def __init__(self, logger: str, default: str, threshold: int = LEVELS["info"]):
        self.logger = logger
        self.levels = Levels(default)
        self.threshold = threshold
        self.pending = b""
        self.since = 0.0  # when the pending partial line began
        self._cut = False  # the last line went out in pieces: the next piece continues it

    def feed(self, data: bytes, now: float) -> list[str]:
        """The JSON lines `data` completes."""
        if not self.pending:
            self.since = now
        *complete, self.pending = (self.pending + data).split(b"\n")
        out = [line for raw in complete for line in self._lines(raw)]
        if complete:
            self.since = now
        while len(self.pending) > (MAX_RECORD if self.pending.startswith(b"{") else MAX_LINE):
            piece, self.pending = self.pending[:MAX_LINE], self.pending[MAX_LINE:]
            out += self._lines(piece, cut=True)
        return out

    def finish(self) -> list[str]:
        """The partial line, as it is (its newline did not come in time, or will not come)."""
        piece, self.pending = self.pending, b""
        return self._lines(piece)

    def _lines(self, raw: bytes, cut: bool = False) -> list[str]:
        # A fault dump starts a line of its own, even after a partial line that a crash cut short.
        start = raw.find(_DUMP, 1)
        parts = [(raw[:start], False), (raw[start:], cut)] if start > 0 else [(raw, cut)]
        return [line for part, part_cut in parts if part and (line := self._line(part, part_cut)) is not None]

    def _line(self, raw: bytes, cut: bool = False) -> str | None:
        raw = raw.rstrip(b"\r")
        continues, self._cut = self._cut, cut
        if not (cut or continues) and raw.startswith(b"{") and raw.endswith(b"}") and _is_record(raw):
            return raw.decode("utf-8", "replace")  # an engine process's own JSON line: as it is
        text = raw.decode("utf-8", "replace")
        if not text.strip():
            return None
        level = self.levels.last if continues else self.levels.of(text)
        if LEVELS[level] < self.threshold:
            return None
        return json_line(time.time(), level, self.logger, text)


def _is_record(raw: bytes) -> bool:
    import json

    try:
        return isinstance(json.loads(raw), dict)
    except ValueError:
        return False


def json_line(created: float, level: str, logger: str, message: str) -> str:
    """A line in the engine's format (logs/request_lines.json_line)."""
    import json
    from datetime import UTC, datetime

    entry = {
        "time": datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds"),
        "level": level,
        "logger": logger,
        "message": message,
    }
    return json.dumps(entry)


def write_lines(fd: int, lines: list[str]) -> None:
    """Write `lines` to `fd`, in writes a pipe takes whole where each fits; a reader that went away loses them."""
    batch = b""
    for line in lines:
        encoded = line.encode("utf-8", "replace") + b"\n"
        if batch and len(batch) + len(encoded) > ATOMIC_WRITE:
            _write(fd, batch)
            batch = b""
        batch += encoded
    if batch:
        _write(fd, batch)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # nothing left to read the log: keep draining the pipes, so that the writers never block on them


def forward(streams: dict[int, tuple[Lines, int]], control: int, write=write_lines) -> None:
    """Read each pipe in `streams` (its Lines, and the descriptor its JSON lines go to) until every one has ended, or
    until `control` ends (the engine's main process has finished or died): then what the pipes hold already is read,
    and the forwarder ends. `write(fd, lines)` writes the JSON lines read."""
    poller = select.poll()
    for fd in (*streams, control):
        poller.register(fd, select.POLLIN)
    open_fds = set(streams)
    while open_fds:
        waiting = [lines.since + PARTIAL_WAIT for fd, (lines, _) in streams.items() if lines.pending and fd in open_fds]
        timeout = max(0.0, min(waiting) - time.monotonic()) * 1000 if waiting else None
        events = poller.poll(timeout)
        if any(fd == control for fd, _ in events):
            break
        now = time.monotonic()
        for fd, _ in events:
            lines, out = streams[fd]
            data = os.read(fd, CHUNK)
            if data:
                write(out, lines.feed(data, now))
            else:
                poller.unregister(fd)
                open_fds.discard(fd)
                write(out, lines.finish())
        for fd in open_fds:
            lines, out = streams[fd]
            if lines.pending and now - lines.since >= PARTIAL_WAIT:
                write(out, lines.finish())
    for fd in open_fds:  # the engine is gone: what the pipes hold is all there will be
        lines, out = streams[fd]
        os.set_blocking(fd, False)
        try:
            while data := os.read(fd, CHUNK):
                write(out, lines.feed(data, time.monotonic()))
        except BlockingIOError:
            pass
        write(out, lines.finish())


def main(argv: list[str]) -> int:
    out, err, control = (int(fd) for fd in argv[:3])
    threshold = LEVELS.get(argv[3].lower(), LEVELS["info"]) if len(argv) > 3 else LEVELS["info"]
    # Ctrl-C in a terminal, or SIGTERM to the engine's process group, reach this process too: it ends when the engine
    # does, once it has written every line the engine wrote before.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    streams = {out: (Lines("stdout", "info", threshold), 1), err: (Lines("stderr", "warning", threshold), 2)}
    forward(streams, control)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
