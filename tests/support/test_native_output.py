"""What native code writes straight to fd 1 and fd 2 comes out as the engine's JSON lines, at the level each line
says it has: lines of real libraries' formats, long lines and lines without end in bounded pieces, a parallel worker's
own JSON lines unchanged; nothing lost when the process exits or crashes, and no deadlock when the writer holds the
GIL. The engines' end-to-end checks are in test_log_format.py (one process) and test_model_logs.py (workers)."""

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime

from chariot_support.logs import native_output
from chariot_support.logs.native_lines import MAX_LINE, MAX_RECORD, PARTIAL_WAIT, Lines, forward
from chariot_support.logs.request_lines import JSONLines

# Lines as the libraries write them, and the level each must get; a block's lines in order, as one stream reads them.
STDERR = [
    ("INFO: Created TensorFlow Lite XNNPACK delegate for CPU.", "info"),
    (
        "WARNING: Attempting to use a delegate that only supports static-sized tensors with a graph that has dynamic-sized tensors.",
        "warning",
    ),
    ("ERROR: Didn't find op for builtin opcode 'CONV_2D' version '6'.", "error"),
    (
        "W0000 00:00:1700000000.123456   123 inference_feedback_manager.cc:121] Feedback manager requires a model with a single signature inference.",
        "warning",
    ),
    ("I1201 10:00:00.123456  1234 gl_context.cc:344] GL version: 3.2 (OpenGL ES 3.2)", "info"),
    ("E1201 10:00:00.123456  1234 calculator_graph.cc:887] INTERNAL: CalculatorGraph::Run() failed", "error"),
    ("F1201 10:00:00.123456  1234 packet.h:123] Check failed: holder_ != nullptr", "critical"),
    ("*** Check failure stack trace: ***", "critical"),
    ("    @     0x7f0a1b2c3d4e  google::LogMessage::Fail()", "critical"),
    ("[W1201 10:00:00.123456789 ProcessGroupNCCL.cpp:1234] Warning: destroy_process_group() was not called", "warning"),
    ("[W socket.cpp:663] [c10d] The client socket has failed to connect", "warning"),
    (
        "2026-11-30 10:00:00.000 [W:onnxruntime:, graph.cc:4000 CleanUnusedInitializersAndNodeArgs] Removing initializer 'w'.",
        "warning",
    ),
    (
        "2026-11-30 10:00:00.000 [E:onnxruntime:, sequential_executor.cc:516 ExecuteKernel] Non-zero status code returned",
        "error",
    ),
    ("2026-11-30 10:00:00.000 [I:onnxruntime:, inference_session.cc:778 TraceSessionOptions] Session Options", "info"),
    ("2026-11-30 10:00:00.000000: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on.", "info"),
    ("[ WARN:0@0.010] global loadsave.cpp:244 findDecoder imread_('x.png'): can't open/read file", "warning"),
    ("[ERROR:0@0.020] global persistence.cpp:512 open Can't open file: 'x.yml' in read mode", "error"),
    ("ERROR:root:a subprocess's own Python logging, as basicConfig formats it", "error"),
    ("CUDA initialization: Found no NVIDIA driver on your system.", "warning"),
    ("terminate called after throwing an instance of 'std::runtime_error'", "critical"),
    ("Exception in thread Thread-1 (predict):", "error"),
    ("Traceback (most recent call last):", "error"),
    ('  File "/opt/venv/model.py", line 12, in load', "error"),
    ("ValueError: no weights", "error"),
    ("plain C after a traceback", "warning"),
    ("Fatal Python error: Segmentation fault", "critical"),
    ("Current thread 0x00007f0a1b2c3d40 (most recent call first):", "critical"),
    ('  File "/opt/venv/model.py", line 30 in predict', "critical"),
    ("Thread 0x00007f0a1b2c3d41 (most recent call first):", "critical"),
    ("Extension modules: numpy._core._multiarray_umath, cv2 (total: 2)", "critical"),
]


def levels(lines: Lines, text: str) -> list[tuple[str, str]]:
    return [(e["message"], e["level"]) for e in map(json.loads, lines.feed(text.encode(), time.monotonic()))]


def test_each_line_gets_the_level_it_says_it_has_or_the_line_it_continues():
    found = levels(Lines("stderr", "warning", threshold=0), "".join(f"{line}\n" for line, _ in STDERR))
    assert found == STDERR
    assert levels(Lines("stdout", "info"), "printf on stdout\n") == [("printf on stdout", "info")]
    at_info = Lines("stderr", "warning")  # CHARIOT_LOG_LEVEL=INFO: ONNX Runtime's verbose lines are left out
    assert levels(at_info, "2026-11-30 10:00:00.000 [V:onnxruntime:, graph.cc:1] verbose\nshown\n") == [
        ("shown", "warning")
    ]


def test_lines_are_json_lines_as_the_engines_own():
    (line,) = Lines("stderr", "warning").feed(b"plain C\n", time.monotonic())
    record = logging.LogRecord("stderr", logging.WARNING, __file__, 1, "plain C", (), None)
    record.created = datetime.fromisoformat(json.loads(line)["time"]).timestamp()
    assert line == JSONLines().format(record)


def test_long_lines_and_lines_without_end_go_out_in_bounded_pieces_and_records_pass_whole():
    lines = Lines("stderr", "warning")
    now = time.monotonic()
    out = []
    for _ in range(80):  # 5 MiB of a progress bar that never writes a newline
        out += lines.feed(b"x" * 65_536, now)
        assert len(lines.pending) <= MAX_LINE
    assert {len(json.loads(line)["message"]) for line in out} == {MAX_LINE}
    assert len(out) * MAX_LINE + len(lines.pending) == 80 * 65_536, "every byte, once"
    record = json.dumps({"time": "t", "level": "error", "logger": "chariot_support", "traceback": "y" * 200_000})
    assert lines.feed(b"\n" + record.encode() + b"\n", now)[-1] == record, "a worker's own JSON line, unchanged"
    out = lines.feed(b"{" + b"z" * (2 * MAX_RECORD), now)  # looks like a record, never ends: bounded all the same
    assert len(lines.pending) <= MAX_RECORD and all(len(json.loads(line)["message"]) <= MAX_LINE for line in out)


def test_a_fault_dump_starts_a_line_of_its_own_after_a_line_the_crash_cut_short():
    found = levels(Lines("stderr", "warning"), "loading weights...Fatal Python error: Aborted\n")
    assert found == [("loading weights...", "warning"), ("Fatal Python error: Aborted", "critical")]


def test_a_partial_line_waits_its_newline_a_while_and_what_the_pipe_holds_is_read_when_the_engine_ends():
    (out_r, out_w), (control_r, control_w) = os.pipe(), os.pipe()
    written: list[str] = []
    streams = {out_r: (Lines("stderr", "warning"), 2)}
    reader = threading.Thread(target=forward, args=(streams, control_r, lambda fd, lines: written.extend(lines)))
    reader.start()
    try:
        started = time.monotonic()
        os.write(out_w, b"no newline yet")
        while not written and time.monotonic() - started < 10:
            time.sleep(0.01)
        waited = time.monotonic() - started
        assert [json.loads(line)["message"] for line in written] == ["no newline yet"]
        assert waited >= PARTIAL_WAIT, f"the partial line went out after {waited:.2f} s, before its newline could come"
        os.write(out_w, b"last\nwords")
        os.close(control_w)  # the engine's main process has gone; out_w stays open, as a worker's may
        reader.join(5)
        assert not reader.is_alive()
        assert [json.loads(line)["message"] for line in written] == ["no newline yet", "last", "words"]
    finally:
        for fd in (out_r, out_w, control_r):
            os.close(fd)


# A process that captures its output as the engine's main process does, then writes as native code does.
PROGRAM = """
import ctypes, sys
from chariot_support.logs.native_output import capture_native_output
capture_native_output("INFO")
libc = ctypes.CDLL(None)
def write(fd, text):
    data = text.encode()
    libc.write(fd, data, len(data))
write(2, "INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\\n")
write(1, "printf on stdout\\n")
write(2, "x" * 200_000 + "\\n")  # longer than a pipe holds
data = (b"with the GIL held " + b"g" * 4_000 + b"\\n") * 256  # a writer that blocks on a full pipe while it holds the GIL
ctypes.PyDLL(None).write(2, data, len(data))
{then}
write(2, "no newline at the end")
"""
# A real library's own line: ONNX Runtime warns of an initializer no node uses, as it loads the model.
ONNX_RUNTIME = """
import onnxruntime
from onnx import TensorProto, helper
unused = helper.make_tensor("unused", TensorProto.FLOAT, [1], [0.0])
graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], [unused])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
"""


def run(then: str) -> tuple[int, list[dict]]:
    done = subprocess.run([sys.executable, "-c", PROGRAM.format(then=then)], capture_output=True, text=True, timeout=60)
    lines = (done.stdout + done.stderr).splitlines()
    assert all(line.startswith("{") for line in lines), [line[:200] for line in lines if not line.startswith("{")]
    return done.returncode, [json.loads(line) for line in lines]


def test_every_line_a_process_writes_natively_comes_out_whole_as_json_at_exit():
    code, lines = run(then=ONNX_RUNTIME)
    assert code == 0
    messages = [(e["logger"], e["level"], e["message"]) for e in lines if "x" * 100 not in e["message"]]
    assert ("stderr", "info", "INFO: Created TensorFlow Lite XNNPACK delegate for CPU.") in messages
    assert any(level == "warning" and "[W:onnxruntime:" in m and "unused" in m for _, level, m in messages), messages
    assert ("stdout", "info", "printf on stdout") in messages
    assert sum(m.startswith("with the GIL held ") for _, _, m in messages) == 256
    assert messages[-1] == ("stderr", "warning", "no newline at the end")
    assert sum(len(e["message"]) for e in lines if "x" * 100 in e["message"]) == 200_000


def test_a_segfault_s_last_words_reach_the_log_as_json():
    code, lines = run(then="ctypes.string_at(0)")
    assert code == -signal.SIGSEGV
    messages = [(e["level"], e["message"]) for e in lines]
    assert ("critical", "Fatal Python error: Segmentation fault") in messages
    assert any(level == "critical" and 'File "<string>"' in m for level, m in messages), "the crash's stack"
    assert ("info", "INFO: Created TensorFlow Lite XNNPACK delegate for CPU.") in messages, "what came before"


def test_a_crash_of_a_containers_first_process_dumps_straight_to_the_real_stderr(monkeypatch):
    """The forwarder ends with a container's PID 1: the dump must not wait for it."""
    enabled = []
    monkeypatch.setattr(native_output.faulthandler, "enable", lambda fd, all_threads: enabled.append(fd))
    monkeypatch.setattr(native_output, "_capture", type("Capture", (), {"real_err": 41})())
    for pid in (1, 4242):
        monkeypatch.setattr(native_output.os, "getpid", lambda pid=pid: pid)
        native_output.enable_fault_dumps()
    assert enabled == [41, 2]
