"""The model's logs are the engine's: what model.py logs (any logger), prints or writes to stderr comes out as one
JSON line each, with the id of the request whose predict wrote it."""

import io
import json
import logging
import threading

import pytest
from native_writers import TFLITE_LINE, native_lines, not_json
from warming import ask, json_lines

from chariot_support.logs.model_output import MAX_LINE, ModelOutput, real_stream, serving
from chariot_support.logs.request_lines import JSONLines


@pytest.fixture
def captured():
    """A ModelOutput in front of `real`, whose records the engine's formatter writes to `lines` (as the engine's
    handler writes them to the real stdout)."""
    real, lines = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(JSONLines())
    logger = logging.getLogger("print-under-test")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    output = ModelOutput(real, logger, logging.INFO)
    yield output, real, lambda: [json.loads(line) for line in lines.getvalue().splitlines()]
    logger.removeHandler(handler)


def test_each_line_written_is_one_record_and_a_partial_line_waits_for_its_newline(captured):
    output, real, records = captured
    print("one", file=output)
    output.write("two and ")
    assert [r["message"] for r in records()] == ["one"]
    output.write("a half\nthree\n\n")
    assert [r["message"] for r in records()] == ["one", "two and a half", "three"]
    assert real.getvalue() == "", "nothing reaches the real stream but through the engine's handler"
    output.write("left over")
    output.finish()
    assert records()[-1]["message"] == "left over"


def test_a_line_gets_the_level_it_says_it_has_as_a_native_one_does(captured):
    output, _, records = captured
    output.write('Traceback (most recent call last):\n  File "model.py", line 3, in predict\nValueError: no\n')
    output.write("WARNING: a library's own\nprinted\n")
    assert [r["level"] for r in records()] == ["error", "error", "error", "warning", "info"]


def test_a_line_without_end_goes_out_in_pieces_of_the_longest_line(captured):
    output, _, records = captured
    output.write("x" * (MAX_LINE * 2 + 5))
    assert [len(r["message"]) for r in records()] == [MAX_LINE, MAX_LINE]
    output.write("\n")
    assert len(records()[-1]["message"]) == 5


def test_threads_lines_do_not_mix_and_carry_their_requests_ids(captured):
    output, _, records = captured

    def write(request_id: str) -> None:
        with serving([request_id]):
            for i in range(50):
                output.write(f"{request_id} line {i}")
                output.write("\n")  # print writes the text and its newline apart

    threads = [threading.Thread(target=write, args=(f"r{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    written = records()
    assert len(written) == 200
    assert all(r["message"].startswith(r["request_id"] + " line ") for r in written)
    with serving(["a", "b"]):
        print("batched", file=output)
    assert records()[-1]["request_id"] == "a" and records()[-1]["request_ids"] == ["a", "b"]


def test_a_handler_that_writes_back_to_the_stream_does_not_loop(captured):
    output, real, records = captured
    logger = logging.getLogger("print-under-test")
    echo = logging.StreamHandler(output)  # say, a handler a library set up on the stream it found as sys.stderr
    logger.addHandler(echo)
    try:
        print("once", file=output)
    finally:
        logger.removeHandler(echo)
    assert [r["message"] for r in records()] == ["once"]
    assert real.getvalue() == "once\n", "the nested write went straight to the real stream"
    assert real_stream(output) is real and real_stream(real) is real


def test_model_logs_prints_and_stderr_lines_are_json_lines_with_their_request_id(warming_engine):
    """In each parallel worker: logging.getLogger("my_model").info, print and sys.stderr.write inside predict; and
    what native code writes to fds 1 and 2 (C's write(2) in predict, a LiteRT interpreter at load), as JSON lines at
    its level, without a request id (the engine cannot tell which request native code wrote for)."""
    for n in range(4):
        ask(warming_engine, f"logs-{n}")
    wanted = {
        (logger, f"{verb} for image-logs-{n}", f"logs-{n}")
        for n in range(4)
        for logger, verb in (("my_model", "logged"), ("print", "printed"), ("stderr", "written to stderr"))
    }
    warming_engine.wait_for_log("written to stderr for image-logs-3")
    warming_engine.wait_for_log("printf on stdout for image-logs-3")
    log = warming_engine.log()
    found = {
        (line["logger"], line["message"], line.get("request_id"))
        for line in json_lines(log)
        if "image-logs-" in line["message"] and "request_id" in line
    }
    assert found == wanted
    levels = {
        line["logger"]: line["level"]
        for line in json_lines(log)
        if (line["logger"], line["message"], line.get("request_id")) in wanted
    }
    assert levels == {"my_model": "info", "print": "info", "stderr": "warning"}
    native = {(line["logger"], line["message"]): line for line in json_lines(log) if "request_id" not in line}
    for tag in ("import", *(f"image-logs-{n}" for n in range(4))):  # the model's module, imported in each process
        for fd, text, level in native_lines(tag):
            assert native.get(("stdout" if fd == 1 else "stderr", text), {}).get("level") == level, text
    loaded = [line for line in json_lines(log) if line["message"] == TFLITE_LINE]
    naming = [line[:300] for line in log.splitlines() if "XNNPACK" in line]  # what became of it, if it is not there
    assert len(loaded) >= 2 and {line["level"] for line in loaded} == {"info"}, (
        f"LiteRT's line from each worker: {naming}"
    )
    assert not not_json(log)
