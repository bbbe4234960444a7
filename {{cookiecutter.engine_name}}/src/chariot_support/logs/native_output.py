"""What native code writes straight to the file descriptors (1 and 2) as the engine's JSON lines: the main process
points both at pipes read by the forwarder (logs/native_lines.py), before MLServer starts the parallel workers, which
inherit them; the engine's own JSON lines keep going straight to the real stdout.

Python's fault handler is turned on in every process, onto fd 2: a segfault's or an abort's dump of every thread's
stack reaches the log as JSON lines, read by the forwarder after the process that wrote it has gone. The one
exception is a crash of the engine's main process as PID 1 (a container's first process), whose end takes every
process of the container with it, the forwarder too: its dump goes straight to the real stderr, as plain text.
"""

from __future__ import annotations

import atexit
import faulthandler
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

logger = logging.getLogger("chariot_support")

FORWARDER = Path(__file__).with_name("native_lines.py")
# How long the main process waits at exit for the forwarder to write what the pipes still hold.
FINISH_WAIT = 5.0


@dataclass
class _Capture:
    forwarder: subprocess.Popen
    real_out: int  # the descriptors fd 1 and 2 were before: where the engine's and the forwarder's lines go
    real_err: int
    control: int  # its closing tells the forwarder the main process has finished (or died)
    stdout: TextIO  # the engine's JSON lines, on real_out


_capture: _Capture | None = None


def capture_native_output(level: str) -> bool:
    """Point fd 1 and fd 2 of this process (and of every process it starts from now on) at the forwarder, which
    writes what comes in as JSON lines at `level` (CHARIOT_LOG_LEVEL) and above. Once per process; returns whether
    the output is captured (not when the forwarder cannot start: the descriptors are then left as they were)."""
    global _capture
    if _capture is not None:
        return True
    real_out, real_err = os.dup(1), os.dup(2)  # not inherited: only this process writes to them
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    control_r, control_w = os.pipe()
    try:
        forwarder = subprocess.Popen(
            [sys.executable, "-I", "-S", str(FORWARDER), str(out_r), str(err_r), str(control_r), level],
            stdin=subprocess.DEVNULL,
            stdout=real_out,
            stderr=real_err,
            pass_fds=(out_r, err_r, control_r),
        )
    except OSError as problem:
        for fd in (real_out, real_err, out_w, err_w, control_w):
            os.close(fd)
        logger.warning("what native code writes stays plain text: its forwarder did not start (%s)", problem)
        return False
    finally:
        for fd in (out_r, err_r, control_r):
            os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # what Python holds goes where it was written before the switch
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.close(out_w)
    os.close(err_w)
    # A child forked from this process (a model's own, say) must not keep the forwarder waiting for it.
    os.register_at_fork(after_in_child=lambda: _forget(control_w))
    encoding, errors = getattr(sys.stdout, "encoding", "utf-8"), getattr(sys.stdout, "errors", "strict")
    stdout = open(real_out, "w", encoding=encoding, errors=errors, closefd=False)  # as sys.stdout: handlers flush it
    _capture = _Capture(forwarder, real_out, real_err, control_w, stdout)
    atexit.register(finish_native_output)
    enable_fault_dumps()
    return True


def engine_stdout() -> TextIO:
    """Where the engine's own JSON lines go: the real stdout (not the pipe to the forwarder, which would cost every
    request line a second write and a read)."""
    return _capture.stdout if _capture is not None else sys.stdout


def enable_fault_dumps() -> None:
    """Turn Python's fault handler on in this process (main or parallel worker), onto fd 2."""
    if _capture is not None and os.getpid() == 1:
        faulthandler.enable(_capture.real_err, all_threads=True)
    else:
        faulthandler.enable(2, all_threads=True)


def finish_native_output() -> None:
    """Point fd 1 and fd 2 back at the real stdout and stderr, and wait for the forwarder to write what the pipes
    hold (at exit: nothing of it is lost when the main process is a container's first, whose end ends all)."""
    global _capture
    capture, _capture = _capture, None
    if capture is None:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os.dup2(capture.real_out, 1)
    os.dup2(capture.real_err, 2)
    os.close(capture.control)
    try:
        capture.forwarder.wait(FINISH_WAIT)
    except subprocess.TimeoutExpired:
        pass  # it is writing to a stdout nobody reads: it goes on alone, and ends when it can


def _forget(control: int) -> None:
    global _capture
    if _capture is not None:
        _capture = None
        os.close(control)
