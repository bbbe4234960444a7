"""Batching across requests: with CHARIOT_MAX_BATCH_SIZE above 1, the images of concurrent requests go to the model
in one predict call, each keeping its own settings, and every request gets back its own results (or the batch's
error); off by default."""

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import requests
import runtimes
from mlserver.types import InferenceRequest

from chariot_support.dev.testing import chariot_metadata, chariot_request, image_input, run_engine
from chariot_support.errors import InvalidResult, PredictFailed, PredictTimeout
from chariot_support.runtime.batching import Batcher, batch_settings
from chariot_support.runtime.runtime import ChariotRuntime
from chariot_support.settings import EngineSettings

HERE = Path(__file__).parent
LONG = 10.0  # a batch wait no test sits out: its batches go when full


@dataclass
class Call:
    deadline: float
    request_id: str = "r"


def call(seconds: float = 30.0, request_id: str = "r") -> Call:
    return Call(time.monotonic() + seconds, request_id)


class Model:
    """A stand-in for the runtime's predict: records each call's images and the call it ran as."""

    def __init__(self, error: Exception | None = None, short: bool = False):
        self.calls: list[list[str]] = []
        self.ran_as: list[Call] = []
        self.error = error
        self.short = short
        self._lock = threading.Lock()

    def __call__(self, images, calls):
        with self._lock:
            self.calls.append(list(images))
            self.ran_as.append(calls[0])
        if self.error is not None:
            raise self.error
        results = [f"result of {image}" for image in images]
        return results[:-1] if self.short else results


def submit_together(batcher: Batcher, requests_images: list[list[str]], seconds: float = 30.0) -> list:
    """Submit every request from its own thread at once; each one's results, or the exception it raised."""
    start = threading.Barrier(len(requests_images))

    def submit(images):
        start.wait()
        try:
            return batcher.predict(images, call(seconds))
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(len(requests_images)) as pool:
        return list(pool.map(submit, requests_images))


def gathering(batcher: Batcher) -> None:
    """Wait until a batch is gathering (its leader is waiting for more requests)."""
    deadline = time.monotonic() + 10
    while batcher._gathering is None:
        assert time.monotonic() < deadline, "no batch started gathering"
        time.sleep(0.01)


def test_concurrent_requests_share_one_predict_and_get_their_own_results_in_order():
    model = Model()
    batcher = Batcher(model, max_size=6, max_wait=LONG)
    sent = [["a"], ["b", "c"], ["d"], ["e", "f"]]
    answers = submit_together(batcher, sent)
    assert answers == [[f"result of {image}" for image in images] for images in sent]
    (batch,) = model.calls  # six images fill the batch: it goes at once, in one call
    assert sorted(batch) == list("abcdef")
    for images in sent:  # each request's images stay together and in order
        at = batch.index(images[0])
        assert batch[at : at + len(images)] == images


def test_batches_hold_at_most_max_size_images_and_never_split_a_request():
    model = Model()
    batcher = Batcher(model, max_size=4, max_wait=0.2)  # the last batch may not fill
    sent = [[f"{r}.{i}" for i in range(size)] for r, size in enumerate([1, 3, 2, 2, 1, 1, 5, 1])]
    answers = submit_together(batcher, sent)
    assert answers == [[f"result of {image}" for image in images] for images in sent]
    assert sorted(image for batch in model.calls for image in batch) == sorted(i for r in sent for i in r)
    for batch in model.calls:
        requests_in_it = {image.split(".")[0] for image in batch}
        assert all(image in batch for r in sent if r[0].split(".")[0] in requests_in_it for image in r), batch
        assert len(batch) <= 4 or len(requests_in_it) == 1, "only a request larger than a batch goes over the size"
    assert [f"6.{i}" for i in range(5)] in model.calls, "the five-image request went alone"


def test_a_batch_that_does_not_fill_goes_after_the_wait():
    model = Model()
    batcher = Batcher(model, max_size=100, max_wait=0.05)
    # Alone, the request would wait for 99 more images until its deadline (30 s) and time out.
    assert batcher.predict(["a"], call()) == ["result of a"]
    assert batcher.predict(["b", "c"], call()) == ["result of b", "result of c"]
    assert model.calls == [["a"], ["b", "c"]]


def test_a_request_that_does_not_fit_sends_the_gathering_batch_on_its_way():
    model = Model()
    batcher = Batcher(model, max_size=4, max_wait=LONG)
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(batcher.predict, ["a", "b", "c"], call())
        gathering(batcher)
        second = pool.submit(batcher.predict, ["d", "e"], call())  # does not fit: the first batch goes now
        assert first.result(timeout=LONG / 2) == ["result of a", "result of b", "result of c"]
        third = pool.submit(batcher.predict, ["f", "g"], call())  # fills the second batch
        assert second.result(timeout=LONG / 2) == ["result of d", "result of e"]
        assert third.result(timeout=LONG / 2) == ["result of f", "result of g"]
    assert model.calls == [["a", "b", "c"], ["d", "e", "f", "g"]]


def test_the_next_batch_keeps_gathering_while_the_model_is_busy():
    model = Model()
    busy = threading.Event()
    free = threading.Event()

    def slow(images, calls):
        busy.set()
        free.wait(LONG)
        return model(images, calls)

    batcher = Batcher(slow, max_size=8, max_wait=0.01, parallel=1)
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(batcher.predict, ["a"], call())
        assert busy.wait(LONG / 2)
        later = []
        for image in "bcd":  # each long after the previous one's wait: they still go together
            later.append(pool.submit(batcher.predict, [image], call()))
            time.sleep(0.05)
        free.set()
        assert first.result(timeout=LONG / 2) == ["result of a"]
        assert [f.result(timeout=LONG / 2) for f in later] == [["result of b"], ["result of c"], ["result of d"]]
    assert model.calls == [["a"], ["b", "c", "d"]]


def test_batches_predict_at_once_up_to_the_model_copies():
    model = Model()
    both = threading.Barrier(2, timeout=LONG / 2)  # breaks unless two predicts run at the same time

    def meet(images, calls):
        both.wait()
        return model(images, calls)

    batcher = Batcher(meet, max_size=2, max_wait=LONG, parallel=2)
    answers = submit_together(batcher, [["a"], ["b"], ["c"], ["d"]])
    assert answers == [["result of a"], ["result of b"], ["result of c"], ["result of d"]]
    assert sorted(len(batch) for batch in model.calls) == [2, 2]


def test_a_hung_predict_holds_up_the_next_batch_only_until_its_requests_time_out():
    model = Model()
    hung = threading.Event()
    release = threading.Event()

    def hangs_first(images, calls):
        if images == ["hang"]:
            hung.set()
            release.wait(LONG)
        return model(images, calls)

    batcher = Batcher(hangs_first, max_size=8, max_wait=0.01, parallel=1)
    with ThreadPoolExecutor(2) as pool:
        stuck = pool.submit(batcher.predict, ["hang"], call(seconds=0.3))
        assert hung.wait(LONG / 2)
        # The model is busy, so this batch waits; once the hung batch's request is out of time, it goes.
        assert batcher.predict(["a"], call()) == ["result of a"]
        assert not stuck.done(), "the hung predict is still running"
        release.set()
        # It returns in the end, as a predict past its timeout does without batching (its client had its 504).
        assert stuck.result(timeout=LONG / 2) == ["result of hang"]
    assert model.calls == [["a"], ["hang"]]


@pytest.mark.parametrize(
    "model, error, message",
    [
        (Model(error=PredictFailed("predict failed: RuntimeError: the GPU caught fire")), PredictFailed, "GPU"),
        (Model(short=True), RuntimeError, "a batch of 4 images got 3 result lists"),
    ],
    ids=["raises", "too-few-results"],
)
def test_every_request_of_a_failed_batch_gets_the_error(model, error, message):
    batcher = Batcher(model, max_size=4, max_wait=LONG)
    answers = submit_together(batcher, [["a"], ["b", "c"], ["d"]])
    assert len(model.calls) == 1
    assert all(isinstance(a, error) and message in str(a) for a in answers), answers
    assert len({id(a) for a in answers}) == 3, "each request raises its own exception object"
    if isinstance(answers[0], PredictFailed):
        assert {a.status_code for a in answers} == {500}


def test_a_request_that_times_out_while_queued_is_not_predicted():
    model = Model()
    batcher = Batcher(model, max_size=3, max_wait=LONG)
    with ThreadPoolExecutor(3) as pool:
        leader = pool.submit(batcher.predict, ["a"], call())
        gathering(batcher)
        with pytest.raises(PredictTimeout, match="while it waited for a batch"):
            batcher.predict(["late"], call(seconds=0.1))
        # Its image left room: two more fill the batch.
        others = pool.submit(batcher.predict, ["b"], call()), pool.submit(batcher.predict, ["c"], call())
        assert leader.result(timeout=LONG / 2) == ["result of a"]
        assert [o.result(timeout=LONG / 2) for o in others] == [["result of b"], ["result of c"]]
    (batch,) = model.calls
    assert sorted(batch) == ["a", "b", "c"]


def test_a_leader_out_of_time_sends_its_batch_as_the_next_request():
    model = Model()
    batcher = Batcher(model, max_size=3, max_wait=LONG)
    with ThreadPoolExecutor(2) as pool:
        leader = pool.submit(batcher.predict, ["a"], call(seconds=0.2, request_id="leader"))
        gathering(batcher)
        follower = call(request_id="follower")
        assert batcher.predict(["b"], follower) == ["result of b"]
        with pytest.raises(PredictTimeout):
            leader.result(timeout=LONG / 2)
    assert model.calls == [["b"]] and model.ran_as == [follower]


def test_stop_sends_the_gathering_batch_and_later_requests_go_alone():
    model = Model()
    batcher = Batcher(model, max_size=8, max_wait=LONG)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(batcher.predict, ["a"], call())
        gathering(batcher)
        batcher.stop()
        assert waiting.result(timeout=LONG / 2) == ["result of a"]
    assert batcher.predict(["b"], call()) == ["result of b"]
    assert model.calls == [["a"], ["b"]]


def batching_of(**env: str):
    return batch_settings(EngineSettings.from_env(env))


def test_batching_is_off_by_default():
    assert batching_of() is None
    assert batching_of(CHARIOT_MAX_BATCH_WAIT_MS="20") is None, "a wait alone turns nothing on"
    assert batching_of(CHARIOT_MAX_BATCH_SIZE="1") is None
    chosen = batching_of(CHARIOT_MAX_BATCH_SIZE="16", CHARIOT_MAX_BATCH_WAIT_MS="20")
    assert chosen.max_size == 16 and chosen.max_wait == pytest.approx(0.02)
    assert batching_of(CHARIOT_MAX_BATCH_SIZE="16").max_wait == pytest.approx(0.005)


@pytest.mark.parametrize(
    "name, value",
    [("CHARIOT_MAX_BATCH_SIZE", "0"), ("CHARIOT_MAX_BATCH_SIZE", "many"), ("CHARIOT_MAX_BATCH_WAIT_MS", "0")],
)
def test_bad_batch_settings_are_refused(name, value):
    with pytest.raises(ValueError, match=name):
        batching_of(**{"CHARIOT_MAX_BATCH_SIZE": "4", name: value})


# The runtime, in process, serving RecordingModel (batching_engine/model.py).


@pytest.fixture
def make_runtime(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    made = []

    def make(model_class: str = "RecordingModel", **settings) -> ChariotRuntime:
        runtime = runtimes.loaded_runtime(
            f"batching_engine.model:{model_class}", EngineSettings(threads=2, warmup=False, **settings)
        )
        made.append(runtime)
        return runtime

    from batching_engine import model

    model.CALLS.clear()
    yield make
    for runtime in made:
        asyncio.run(runtime.unload())


def pixels(value: int) -> np.ndarray:
    return np.full((8, 8, 3), value, np.uint8)


def payload(*values: int, tensor: bool = False, **parameters) -> InferenceRequest:
    inputs = [image_input(f"image-{i}", pixels(v)) for i, v in enumerate(values)]
    if tensor:
        inputs.append({"name": "t", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]})
    return InferenceRequest.model_validate(chariot_request(*inputs, **parameters))


def serve(runtime: ChariotRuntime, *payloads: InferenceRequest) -> list:
    async def run():
        return await asyncio.gather(*(runtimes.answer(runtime, p) for p in payloads), return_exceptions=True)

    return asyncio.run(run())


def labels(response) -> list[list[str]]:
    return [[r["label"] for r in output.data[0]] for output in response.outputs]


def test_the_runtime_is_unchanged_when_batching_is_off(make_runtime):
    runtime = make_runtime()
    assert runtime._batcher is None
    answers = serve(runtime, payload(1), payload(2, 3))
    assert [labels(a) for a in answers] == [
        [["image-1-None", "call-of-1"]],
        [["image-2-None", "call-of-2"], ["image-3-None", "call-of-2"]],
    ]


def test_batched_images_keep_their_own_settings(make_runtime):
    from batching_engine.model import CALLS

    runtime = make_runtime(max_batch_size=4, max_batch_wait_ms=10000.0)
    answers = serve(runtime, payload(1, tag="x"), payload(2, 3, score_threshold=0.5, tag="y"), payload(4))
    assert len(CALLS) == 1 and sorted(CALLS[0]["images"]) == ["1-x", "2-y", "3-y", "4-None"]
    assert [labels(a) for a in answers] == [
        [["image-1-x", "call-of-4"]],
        [["image-2-y"], ["image-3-y"]],  # its score_threshold drops the 0.4 result, for its images only
        [["image-4-None", "call-of-4"]],
    ]


def test_batched_images_keep_their_own_action(make_runtime):
    from batching_engine.model import CALLS

    runtime = make_runtime("RecordingClassifier", max_batch_size=3, max_batch_wait_ms=10000.0)
    answers = serve(runtime, payload(1, action="predict_proba"), payload(2), payload(3, action="predict_proba"))
    assert len(CALLS) == 1
    assert [labels(a) for a in answers] == [
        [["image-1-None", "call-of-3"]],  # every label, best first
        [["image-2-None"]],  # the default action, predict: the best label only
        [["image-3-None", "call-of-3"]],
    ]


def test_batched_images_keep_their_own_prompts(make_runtime):
    from batching_engine.model import CALLS

    runtime = make_runtime("RecordingAnswerer", max_batch_size=3, max_batch_wait_ms=10000.0)
    answers = serve(runtime, payload(1, prompts=["what?", "where?"]), payload(2, 3, prompts=["who?"]))
    assert len(CALLS) == 1
    found = [[[(r["prompt"], r["answer"]) for r in o.data[0]] for o in a.outputs] for a in answers]
    assert found == [
        [[("what?", "1-None of 3"), ("where?", "1-None of 3")]],
        [[("who?", "2-None of 3")], [("who?", "3-None of 3")]],
    ]


def test_a_request_with_tensors_is_predicted_alone(make_runtime):
    from batching_engine.model import CALLS

    runtime = make_runtime(max_batch_size=2, max_batch_wait_ms=10000.0)
    answers = serve(runtime, payload(1), payload(2, tensor=True), payload(3))
    assert [labels(a) for a in answers] == [
        [["image-1-None", "call-of-2"]],
        [["image-2-None", "call-of-1"]],
        [["image-3-None", "call-of-2"]],
    ]
    assert {"images": ["2-None"], "tensors": ["t"]} in CALLS and len(CALLS) == 2


@pytest.mark.parametrize(
    "fault, error, message",
    [("raise", PredictFailed, "the GPU caught fire"), ("too-few-lists", InvalidResult, "one list of Detection")],
)
def test_a_batch_whose_predict_fails_fails_every_request_in_it(make_runtime, fault, error, message):
    runtime = make_runtime(max_batch_size=3, max_batch_wait_ms=10000.0)
    answers = serve(runtime, payload(1), payload(2, fault=fault), payload(3))
    assert all(isinstance(a, error) and message in str(a) and a.status_code == 500 for a in answers), answers
    assert labels(serve(runtime, payload(4), payload(5), payload(6))[0]) == [["image-4-None", "call-of-3"]]


def test_the_predict_timeout_holds_for_each_batched_request(make_runtime):
    runtime = make_runtime(max_batch_size=2, max_batch_wait_ms=10000.0, predict_timeout=0.5)
    answers = serve(runtime, payload(1, seconds=2), payload(2))
    assert all(isinstance(a, PredictTimeout) and a.status_code == 504 for a in answers), answers
    # A request that waits alone for a batch that never fills gets its 504 too, unpredicted.
    from batching_engine.model import CALLS

    CALLS.clear()
    (alone,) = serve(runtime, payload(3))
    assert isinstance(alone, PredictTimeout) and CALLS == []


# The real engine over HTTP.


def test_concurrent_clients_are_answered_from_shared_predicts(tmp_path):
    calls = tmp_path / "calls.jsonl"
    env = {
        "CHARIOT_MAX_BATCH_SIZE": "8",
        "CHARIOT_MAX_BATCH_WAIT_MS": "1000",
        "CHARIOT_THREADS": "2",
        "BATCHING_CALLS": str(calls),
        "CHARIOT_WARMUP": "0",  # the file records the clients' calls only
    }
    # Eight clients, ten images: each client's images, settings and metadata are its own.
    clients = [
        {"values": [10 * c + 1] + ([10 * c + 2] if c % 3 == 0 else []), "tag": f"c{c}", "threshold": c % 2 * 0.5}
        for c in range(8)
    ]
    start = threading.Barrier(len(clients))

    def send(engine, client: dict) -> dict:
        inputs = [
            image_input(f"image-{i}", pixels(v), metadata=chariot_metadata(image=f"{client['tag']}/{i}"))
            for i, v in enumerate(client["values"])
        ]
        body = chariot_request(
            *inputs,
            tag=client["tag"],
            score_threshold=client["threshold"],
            metadata=chariot_metadata(client=client["tag"]),
        )
        start.wait()
        response = requests.post(f"{engine.url}/v2/models/m-batching/infer", data=json.dumps(body), timeout=60)
        assert response.status_code == 200, response.text
        return response.json()

    with run_engine("batching_engine", src=HERE, env=env) as engine:
        with ThreadPoolExecutor(len(clients)) as pool:
            answers = list(pool.map(lambda c: send(engine, c), clients))
    made = [json.loads(line) for line in calls.read_text().splitlines()]
    shared = [c for c in made if len({image.split("-")[1] for image in c["images"]}) > 1]
    assert shared, f"no predict took more than one client's images: {made}"
    assert sorted(i for c in made for i in c["images"]) == sorted(
        f"{v}-{c['tag']}" for c in clients for v in c["values"]
    ), "every image was predicted exactly once"
    for client, answer in zip(clients, answers, strict=True):
        assert json.loads(answer["parameters"]["metadata"])["extended_metadata"][0]["value"] == client["tag"]
        assert [o["name"] for o in answer["outputs"]] == [f"image-{i}" for i in range(len(client["values"]))]
        for i, (output, value) in enumerate(zip(answer["outputs"], client["values"], strict=True)):
            found = [r["label"] for r in output["data"][0]]
            assert found[0] == f"image-{value}-{client['tag']}", (client, answer)
            # Its own score_threshold: 0.5 drops the 0.4 result that names the call's size.
            assert len(found) == (1 if client["threshold"] else 2), (client, answer)
            assert (
                json.loads(output["parameters"]["metadata"])["extended_metadata"][0]["value"] == f"{client['tag']}/{i}"
            )
