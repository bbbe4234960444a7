"""A model that is not thread-safe still uses every core: the engine loads independent copies of it, each running
one predict at a time, and tells each predict how many threads it may use."""

import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests

from chariot_support.dev.testing import chariot_request, image_input, run_engine
from chariot_support.model.base import ChariotModel
from chariot_support.model.tasks import TaskType
from chariot_support.runtime.copies import copies_wanted, threads_per_call
from chariot_support.settings import EngineSettings

HERE = Path(__file__).parent
PIXELS = np.zeros((16, 16, 3), np.uint8)


class Locked(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION


class Three(Locked):
    copies = 3


class Shared(Locked):
    thread_safe = True


def test_how_many_copies():
    assert copies_wanted(Locked, threads=4) == 1
    assert copies_wanted(Three, threads=4) == 3
    assert copies_wanted(Three, threads=4, setting="2") == 2
    assert copies_wanted(Shared, threads=4, setting="2") == 1, "a thread-safe model is shared by every call"
    assert copies_wanted(Locked, threads=4, setting="threads") == 4
    for bad in ("0", "two", "-1"):
        with pytest.raises(ValueError, match="CHARIOT_MODEL_COPIES must be a whole number of at least 1, or 'threads'"):
            EngineSettings.from_env({"CHARIOT_MODEL_COPIES": bad})
    assert EngineSettings.from_env({"CHARIOT_MODEL_COPIES": "threads"}).model_copies == "threads"
    for bad in (0, "two", True):
        with pytest.raises(ValueError, match=r"Bad.copies must be a whole number of at least 1, or 'threads'"):
            copies_wanted(type("Bad", (Locked,), {"copies": bad}), threads=4)


def test_threads_per_call_share_the_cores():
    assert threads_per_call(8, 2) == 4
    assert threads_per_call(2, 2) == 1
    assert threads_per_call(2, 8) == 1
    assert threads_per_call(4, 1) == 4


def whoami(engine) -> tuple[str, int]:
    body = chariot_request(image_input("image-0", PIXELS, fault="whoami"))
    response = requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=json.dumps(body), timeout=30)
    assert response.status_code == 200, response.text
    copy, threads = response.json()["outputs"][0]["data"][0][0]["label"].split("/")
    return copy, int(threads)


def span(engine, seconds: float) -> tuple[str, int, float, float]:
    """Which copy answered, the threads it may use, and when its predict began and ended (the engine's clock)."""
    body = chariot_request(image_input("image-0", PIXELS, fault="span", seconds=seconds))
    response = requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=json.dumps(body), timeout=30)
    assert response.status_code == 200, response.text
    copy, threads, began, ended = response.json()["outputs"][0]["data"][0][0]["label"].split("/")
    return copy, int(threads), float(began), float(ended)


def most_at_once(spans) -> int:
    """The most predicts that were running at the same moment (one that ends as another begins is not overlapping)."""
    events = sorted([(began, 1) for _, _, began, _ in spans] + [(ended, -1) for _, _, _, ended in spans])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


# Two copies on four threads, with a predict timeout well above the copies test's half-second predicts (a request
# may wait for its copy as long again): shared by the tests of copies side by side and of a copy stuck past it.
TIMEOUT = 2


@pytest.fixture(scope="module")
def two_copies():
    env = {"CHARIOT_MODEL_COPIES": "2", "CHARIOT_THREADS": "4", "CHARIOT_PREDICT_TIMEOUT": str(TIMEOUT)}
    with run_engine("faulty_engine", src=HERE, env=env) as engine:
        yield engine


@pytest.mark.slow
@pytest.mark.parametrize("copies", [1, 2])
def test_copies_answer_at_the_same_time(copies, request):
    """Four requests at once: each copy runs one predict at a time, and the copies run side by side, as the model
    itself records (no wall clock: the machine may be busy)."""
    with contextlib.ExitStack() as stack:
        if copies == 2:
            engine = request.getfixturevalue("two_copies")
        else:
            env = {"CHARIOT_MODEL_COPIES": "1", "CHARIOT_THREADS": "4"}
            engine = stack.enter_context(run_engine("faulty_engine", src=HERE, env=env))
        with ThreadPoolExecutor(4) as pool:
            spans = list(pool.map(lambda _: span(engine, seconds=0.5), range(4)))
        assert "2 copies" in engine.log() if copies == 2 else "1 copy" in engine.log()
    by_copy = {copy: [s for s in spans if s[0] == copy] for copy, _, _, _ in spans}
    assert len(by_copy) == copies
    assert {threads for _, threads, _, _ in spans} == {4 // copies}
    assert [most_at_once(each) for each in by_copy.values()] == [1] * copies, spans
    assert most_at_once(spans) == copies, spans


def test_a_thread_safe_model_is_one_instance_with_a_share_of_the_cores():
    with run_engine("faulty_engine", src=HERE, env={"FAULTY_THREAD_SAFE": "1", "CHARIOT_THREADS": "4"}) as engine:
        answers = [whoami(engine) for _ in range(3)]
    assert len({copy for copy, _ in answers}) == 1 and {t for _, t in answers} == {1}


@pytest.mark.slow
def test_a_copy_stuck_past_the_timeout_leaves_the_others_serving(two_copies):
    engine = two_copies
    # Each hang outlasts both timeouts, so that both copies are stuck at once.
    hang = json.dumps(chariot_request(image_input("image-0", PIXELS, fault="hang", seconds=3 * TIMEOUT)))
    url = f"{engine.url}/v2/models/m-faulty/infer"
    assert requests.post(url, data=hang, timeout=30).status_code == 504
    assert requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code == 200, "one copy still serves"
    whoami(engine)
    second = time.monotonic()
    assert requests.post(url, data=hang, timeout=30).status_code == 504
    assert requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code != 200, "both copies are stuck"
    refused = requests.post(url, data=json.dumps(chariot_request(image_input("image-0", PIXELS))), timeout=30)
    assert refused.status_code == 503 and "every copy of the model" in refused.json()["error"]
    deadline = time.monotonic() + 10
    while requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code != 200:
        assert time.monotonic() < deadline, "the engine did not come back when the stuck predicts returned"
        time.sleep(0.2)
    whoami(engine)
    # The engine is shared: the second stuck predict has returned, too, before another test counts on both copies.
    time.sleep(max(0.0, second + 3 * TIMEOUT + 0.2 - time.monotonic()))
