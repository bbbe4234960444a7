"""With MLServer's parallel workers, a worker that dies or stops answering is noticed: the requests it held get a
fast 503, it is replaced, readiness says so meanwhile, the predict timeout holds in the main process, and SIGTERM
still stops the engine."""

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests
from hostile import HERE, wait_until

from chariot_support.dev.testing import chariot_request, image_input, run_engine

pytestmark = pytest.mark.hostile

PIXELS = np.zeros((32, 48, 3), np.uint8)
WORKERS = 2


def children(pid: int) -> set[int]:
    """The live (not zombie) parallel workers of the engine whose process id is `pid`."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z" and b"spawn_main" in command:
                found.add(int(entry.name))
    return found


def infer(engine, timeout: float = 20, **parameters):
    body = chariot_request(image_input("image", PIXELS, **parameters))
    started = time.monotonic()
    try:
        response = requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=json.dumps(body), timeout=timeout)
    except requests.Timeout:
        return "hung", time.monotonic() - started
    return response, time.monotonic() - started


def ready(engine) -> int:
    return requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code


def workers_of(engine, count: int = WORKERS) -> set[int]:
    assert wait_until(lambda: len(children(engine.process.pid)) >= count, 30), "the workers never started"
    return children(engine.process.pid)


def serving_again(engine, old: set[int], count: int = WORKERS) -> bool:
    current = children(engine.process.pid)
    return len(current) >= count and not current & old and ready(engine) == 200


def test_workers_killed_under_load_fail_fast_and_are_replaced():
    env = {"MLSERVER_PARALLEL_WORKERS": str(WORKERS), "CHARIOT_PREDICT_TIMEOUT": "10", "FAULTY_THREAD_SAFE": "1"}
    with run_engine("faulty_engine", src=HERE, env=env) as engine:
        old = workers_of(engine)
        # Both at once is a race with the signal that reports them: try it more than once, each time on the workers
        # that replaced those killed before.
        for trial in range(3):
            with ThreadPoolExecutor(8) as pool:
                calls = [pool.submit(infer, engine, fault="sleep", seconds=2) for _ in range(8)]
                time.sleep(0.8)  # every worker is inside a predict
                for pid in old:
                    os.kill(pid, signal.SIGKILL)
                answers = [call.result() for call in calls]
            for response, seconds in answers:
                assert response != "hung", f"trial {trial}: a request whose worker died hung"
                assert response.status_code == 503, (trial, response.status_code, response.text)
                assert "worker" in response.json()["error"]
                assert seconds < 5, f"trial {trial}: a request whose worker died took {seconds:.1f} s to fail"
            assert wait_until(lambda engine=engine, old=old: serving_again(engine, old), 60), (
                f"trial {trial}: the workers were not replaced; children {children(engine.process.pid)}, "
                f"log:\n{engine.log()[-3000:]}"
            )
            responses = [infer(engine)[0] for _ in range(2 * WORKERS)]
            assert [r.status_code for r in responses] == [200] * (2 * WORKERS)
            old = children(engine.process.pid)
        engine.process.send_signal(signal.SIGTERM)
        assert engine.process.wait(15) == 0


def test_a_worker_that_stops_answering_times_out_in_the_main_process_and_is_replaced():
    env = {"MLSERVER_PARALLEL_WORKERS": "1", "CHARIOT_PREDICT_TIMEOUT": "2", "FAULTY_THREAD_SAFE": "1"}
    with run_engine("faulty_engine", src=HERE, env=env) as engine:
        (worker,) = workers_of(engine, 1)
        os.kill(worker, signal.SIGSTOP)  # alive, but it answers nothing: its own timeout cannot fire
        try:
            response, seconds = infer(engine, timeout=30)
            assert response != "hung", "a request to a worker that stopped answering hung"
            assert response.status_code == 504, response.text
            assert "CHARIOT_PREDICT_TIMEOUT" in response.json()["error"]
            assert seconds < 2 + 8, seconds
        finally:
            os.kill(worker, signal.SIGCONT)
        assert wait_until(lambda: serving_again(engine, {worker}, 1), 60), engine.log()[-3000:]
        assert infer(engine)[0].status_code == 200
