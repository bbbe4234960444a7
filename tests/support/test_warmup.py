"""Warm-up: the model predicts on warm-up pictures, on every copy and batch size, before the engine says ready, so
that the first request after ready is as fast as the rest; a warm-up that fails is a load failure that says why."""

import asyncio
import time

import cv2
import numpy as np
import pytest
import runtimes
from mlserver.types import InferenceRequest
from warming import PIXELS, ask, json_lines

from chariot_support.dev.testing import as_image, chariot_request, image_input
from chariot_support.errors import BadRequest, ModelLoadFailed
from chariot_support.model.base import ChariotModel
from chariot_support.model.demo import DemoDetector
from chariot_support.model.tasks import Detection, PromptAnswer, TaskType
from chariot_support.runtime.warmup import SYNTHETIC_SIZE, WARMUP_PROMPT, batch_sizes, warm_up, warmup_inputs
from chariot_support.settings import EngineSettings
from template_paths import ENGINE_TEMPLATE

FIRST_CALL = 1.5  # warming_engine's FIRST_CALL_SECONDS


class Recorder(ChariotModel):
    """Records the size and first picture's shape of each predict call."""

    task_type = TaskType.OBJECT_DETECTION

    def __init__(self):
        self.calls: list[tuple[int, tuple, str, tuple]] = []

    def predict(self, images, tensors):
        first = images[0]
        self.calls.append((len(images), first.pixels.shape, first.action, first.prompts))
        return [[Detection(label="x", score=0.5, xmin=0, ymin=0, xmax=1, ymax=1)] for _ in images]


class Given(Recorder):
    def warmup(self):
        return [np.full((20, 30, 3), 9, np.uint8), as_image(np.zeros((10, 12, 3), np.uint8), prompts=["what?"])]


def settings(**env: str) -> EngineSettings:
    return EngineSettings.from_env(env)


def test_batch_sizes_are_one_and_the_largest_batch():
    assert batch_sizes(1) == [1]
    assert batch_sizes(8) == [1, 8]


def test_every_copy_predicts_at_every_batch_size_with_a_requests_defaults():
    copies = [Recorder(), Recorder()]
    done = warm_up(copies, TaskType.OBJECT_DETECTION, settings(CHARIOT_MAX_BATCH_SIZE="3"))
    for copy in copies:
        assert [(size, action, prompts) for size, _, action, prompts in copy.calls] == [
            (1, "predict", ()),
            (3, "predict", ()),
        ]
    assert done["calls"] == 4 and done["batch_sizes"] == [1, 3] and done["copies"] == 2
    assert warm_up([Recorder()], TaskType.OBJECT_DETECTION, settings(CHARIOT_WARMUP="0")) is None


def test_the_pictures_come_from_the_setting_then_the_model_then_the_samples_then_a_synthetic_one(tmp_path):
    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((40, 50, 3), np.uint8))
    (tmp_path / "notes.txt").write_text("not a picture")
    chosen = warmup_inputs(Given(), settings(CHARIOT_WARMUP_IMAGES=str(tmp_path)))
    assert [i.pixels.shape for i in chosen.images] == [(40, 50, 3)] and chosen.source == str(tmp_path)
    chosen = warmup_inputs(Given(), settings())
    assert [i.pixels.shape for i in chosen.images] == [(20, 30, 3), (10, 12, 3)] and chosen.source == "Given.warmup"
    assert chosen.images[1].prompts == ("what?",), "an Image the model gives keeps its own settings"
    # The demo model runs from the engine's source, beside its samples/; a model in tests/ has none.
    chosen = warmup_inputs(DemoDetector(), settings())
    assert chosen.source == str(ENGINE_TEMPLATE / "samples") and len(chosen.images) == 2
    chosen = warmup_inputs(Recorder(), settings())
    assert chosen.source.startswith("a synthetic") and chosen.images[0].pixels.shape == (*SYNTHETIC_SIZE, 3)


def test_warmup_inputs_that_cannot_be_used_say_what_to_do(tmp_path):
    with pytest.raises(ModelLoadFailed, match="holds no pictures .*CHARIOT_WARMUP=0"):
        warmup_inputs(Recorder(), settings(CHARIOT_WARMUP_IMAGES=str(tmp_path)))
    with pytest.raises(ModelLoadFailed, match="is not a folder"):
        warmup_inputs(Recorder(), settings(CHARIOT_WARMUP_IMAGES=str(tmp_path / "gone")))
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(ModelLoadFailed, match="broken.png cannot be read"):
        warmup_inputs(Recorder(), settings(CHARIOT_WARMUP_IMAGES=str(tmp_path)))

    class Grey(Recorder):
        def warmup(self):
            return [np.zeros((8, 8), np.uint8)]

    with pytest.raises(ModelLoadFailed, match=r"Grey.warmup must return RGB pictures .* item 0 is uint8 \(8, 8\)"):
        warmup_inputs(Grey(), settings())


def test_a_warmup_that_fails_or_answers_wrongly_names_the_call_and_the_way_out():
    class Broken(Recorder):
        def predict(self, images, tensors):
            if len(images) > 1:
                raise RuntimeError("CUDA error: out of memory")
            return super().predict(images, tensors)

    with pytest.raises(
        ModelLoadFailed, match=r"predict of 2 images on copy 0 failed: RuntimeError: CUDA error.*CHARIOT_WARMUP=0"
    ):
        warm_up([Broken()], TaskType.OBJECT_DETECTION, settings(CHARIOT_MAX_BATCH_SIZE="2"))

    class Short(Recorder):
        def predict(self, images, tensors):
            return []

    with pytest.raises(ModelLoadFailed, match=r"InvalidResult: predict must return one list of Detection per image"):
        warm_up([Short()], TaskType.OBJECT_DETECTION, settings())


def test_the_first_request_after_ready_is_as_fast_as_the_rest(warming_engine):
    """Each worker's copy paid for its slow first call before the engine said ready: no request pays it."""
    answers = [ask(warming_engine, f"warm-{i}") for i in range(4)]
    assert all(took < FIRST_CALL / 3 for took, *_ in answers), [took for took, *_ in answers]
    assert all(calls > 1 for *_, calls in answers), "each answering copy had predicted before"
    warmed = [line for line in json_lines(warming_engine.log()) if "warmup" in line]
    assert len(warmed) == 2, "one warm-up line per worker"
    for line in warmed:
        assert line["warmup"]["batch_sizes"] == [1, 2] and line["warmup"]["calls"] == 2
        assert line["warmup"]["seconds"] >= FIRST_CALL and line["warmup"]["source"].startswith("a synthetic")


def first_answers(settings: EngineSettings) -> list[float]:
    """Seconds the first two requests take from the warming engine's model, loaded in this process."""
    runtime = runtimes.loaded_runtime("warming_engine.model:FirstCallSlowModel", settings)
    try:
        took = []
        for i in range(2):
            payload = InferenceRequest.model_validate(chariot_request(image_input(f"image-{i}", PIXELS)))
            started = time.perf_counter()
            asyncio.run(runtimes.answer(runtime, payload))
            took.append(time.perf_counter() - started)
        return took
    finally:
        asyncio.run(runtime.unload())


def test_a_model_that_refuses_the_warmup_as_a_bad_request_loads_unwarmed_and_says_how_to_warm_it(caplog):
    class Asks(ChariotModel):
        """Answers questions only, as a visual question answering model does."""

        task_type = TaskType.IMAGE_TEXT_TO_TEXT
        asked: list = []

        def predict(self, images, tensors):
            if not images[0].prompts:
                raise BadRequest("this model answers questions; send them in 'prompts'")
            self.asked.append(images[0].prompts)
            return [[PromptAnswer(prompt=p, answer="shapes") for p in i.prompts] for i in images]

    done = warm_up([Asks()], TaskType.IMAGE_TEXT_TO_TEXT, settings(CHARIOT_MAX_BATCH_SIZE="2"))
    assert done["calls"] == 2 and not done["refused"] and Asks.asked == [(WARMUP_PROMPT,)] * 2

    class Refuses(Recorder):
        def predict(self, images, tensors):
            raise BadRequest("send a 'region' parameter")

    done = warm_up([Refuses()], TaskType.OBJECT_DETECTION, settings())
    assert done["refused"] and done["calls"] == 0
    (warned,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "not warmed up: it refused the warm-up predict of 1 image on copy 0 as a bad request" in warned
    assert "send a 'region' parameter" in warned and "warmup()" in warned and "CHARIOT_WARMUP=0" in warned


def test_without_warmup_the_first_request_pays_for_the_first_call():
    first, second = first_answers(EngineSettings(threads=1, warmup=False))
    assert first > FIRST_CALL > second * 3, (first, second)


def test_a_model_whose_warmup_fails_does_not_load_and_the_log_says_why(monkeypatch, caplog):
    monkeypatch.setenv("WARMING_FAIL", "1")
    with pytest.raises(ModelLoadFailed) as failed:
        runtimes.loaded_runtime("warming_engine.model:FirstCallSlowModel", EngineSettings(threads=1))
    said = "warm-up predict of 1 image on copy 0 failed: RuntimeError: CUDA error: out of memory"
    assert said in str(failed.value) and "set CHARIOT_WARMUP=0 to start without warm-up" in str(failed.value)
    (logged,) = [r for r in caplog.records if said in r.getMessage()]
    assert logged.levelname == "ERROR" and "CUDA error" in str(logged.exc_info[1])
