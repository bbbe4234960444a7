"""The work requests leave for after their answers (log lines, metrics): done by a thread of its own, in order, a
batch at a time; by the caller when too much waits; all of it before a scrape (tests/support/test_hot_path.py
scrapes right after its requests) and before the process exits."""

import json
import subprocess
import sys
import threading
import time

import pytest

from chariot_support import after_answer as module
from chariot_support.after_answer import BATCH_SECONDS, Afterwards


def test_work_is_done_by_its_own_thread_in_order_a_batch_after_the_first():
    done: list[tuple[int, str]] = []
    later = Afterwards()
    for i in range(5):
        later.later(lambda i: done.append((i, threading.current_thread().name)), i)
    assert done == [], "nothing is done in the caller's thread"
    time.sleep(BATCH_SECONDS * 5)
    assert done == [(i, "chariot-afterwards") for i in range(5)]


def test_past_max_pending_the_caller_does_its_own_work_at_once(monkeypatch):
    monkeypatch.setattr(module, "MAX_PENDING", 0)  # as if stdout had not been read for 10,000 lines
    done: list[str] = []
    Afterwards().later(lambda: done.append(threading.current_thread().name))
    assert done == [threading.current_thread().name]


def test_one_failing_work_is_logged_and_the_rest_is_done(caplog):
    done: list[int] = []
    later = Afterwards()
    later.later(lambda: 1 / 0)
    later.later(done.append, 2)
    later.flush()
    assert done == [2]
    assert "failed" in caplog.text and "ZeroDivisionError" in caplog.text


@pytest.mark.parametrize("leave", ["return", "sys.exit(3)"])
def test_work_still_waiting_when_the_process_exits_is_done(leave):
    program = (
        "import logging.config, sys, time\n"
        "from chariot_support.logs import request_lines as logs\n"
        "logging.config.dictConfig(logs.logging_config('INFO'))\n"
        "def main():\n"
        "    for i in range(3):\n"
        "        logs.log_request(protocol='rest', method='POST', path='/infer', status=200,"
        " started=time.perf_counter(), request_id=f'last-{i}', model='m')\n"
        f"    {leave}\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [e["request_id"] for e in lines if e["logger"] == "chariot_support.requests"] == [
        "last-0",
        "last-1",
        "last-2",
    ]
