"""The runtime spreads a request's images over its threads, and cannot deadlock its own pool doing so."""

import asyncio
import threading
import time

import numpy as np
import pytest
import runtimes
from mlserver.types import InferenceRequest

from chariot_support.dev.testing import chariot_request, image_input
from chariot_support.errors import BadRequest
from chariot_support.runtime import runtime as runtime_module
from chariot_support.runtime.runtime import ChariotRuntime
from chariot_support.settings import EngineSettings
from template_paths import TEMPLATE_ROOT

PIXELS = np.zeros((24, 32, 3), np.uint8)


@pytest.fixture
def make_runtime(monkeypatch):
    monkeypatch.syspath_prepend(str(TEMPLATE_ROOT / "tests" / "support"))
    made = []

    def make(threads: int) -> ChariotRuntime:
        runtime = runtimes.loaded_runtime("faulty_engine.model:FaultyModel", EngineSettings(threads=threads))
        made.append(runtime)
        return runtime

    yield make
    for runtime in made:
        asyncio.run(runtime.unload())


def request(images: int, *, bad: tuple[int, ...] = ()) -> InferenceRequest:
    inputs = [image_input(f"image-{i}", PIXELS) for i in range(images)]
    for i in bad:
        inputs[i]["data"] = ["aGVsbG8gd29ybGQ="]  # valid base64, not an image
    return InferenceRequest.model_validate(chariot_request(*inputs))


def slow_decodes(monkeypatch) -> list[str]:
    """Make each decode take a moment and record the thread it ran on."""
    threads = []
    decode = runtime_module.decode_pixels

    def recorded(*args, **kwargs):
        threads.append(threading.current_thread().name)
        time.sleep(0.05)
        return decode(*args, **kwargs)

    monkeypatch.setattr(runtime_module, "decode_pixels", recorded)
    return threads


def predict(runtime: ChariotRuntime, *payloads: InferenceRequest) -> list:
    async def run():
        return await asyncio.wait_for(asyncio.gather(*(runtimes.answer(runtime, p) for p in payloads)), timeout=30)

    return asyncio.run(run())


def test_images_of_one_request_are_decoded_on_several_threads(make_runtime, monkeypatch):
    runtime = make_runtime(threads=4)
    threads = slow_decodes(monkeypatch)
    (response,) = predict(runtime, request(8))
    assert [o.name for o in response.outputs] == [f"image-{i}" for i in range(8)]
    assert len(threads) == 8 and len(set(threads)) > 1, threads


@pytest.mark.parametrize("threads, requests", [(1, 1), (2, 6)])
def test_a_pool_busy_with_requests_still_decodes_their_images(make_runtime, monkeypatch, threads, requests):
    runtime = make_runtime(threads=threads)
    slow_decodes(monkeypatch)
    responses = predict(runtime, *(request(4) for _ in range(requests)))
    assert [len(r.outputs) for r in responses] == [4] * requests


def test_the_first_bad_image_is_the_one_named(make_runtime):
    runtime = make_runtime(threads=4)
    with pytest.raises(BadRequest, match="input 'image-1'"):
        predict(runtime, request(6, bad=(1, 4)))
    (response,) = predict(runtime, request(2))
    assert len(response.outputs) == 2


def test_a_batch_is_given_up_only_when_every_request_in_it_was(make_runtime):
    """A request whose caller gave up (a gRPC deadline, a client gone) while it waited for a model copy is not
    predicted; in a batch, the live requests beside it still are, whichever of them leads the batch."""
    from chariot_support.model.image import Image
    from chariot_support.runtime.threads import Call

    runtime = make_runtime(2)
    image = Image("image-0", PIXELS, "detect", None, (), {})
    deadline = time.monotonic() + 30
    gone, live = Call("gone", deadline, abandoned=True), Call("live", deadline)
    results = runtime._call_model(gone, "predict", [image, image], {}, calls=[gone, live])
    assert len(results) == 2, "the live request's batch is predicted though the request leading it gave up"
    with pytest.raises(asyncio.CancelledError):
        runtime._call_model(gone, "predict", [image], {}, calls=[gone, Call("gone too", deadline, abandoned=True)])
    with pytest.raises(asyncio.CancelledError):
        runtime._call_model(gone, "predict", [image], {})
    # Each refusal gave its copy back: the model still answers.
    assert len(runtime._call_model(live, "predict", [image], {})) == 1
