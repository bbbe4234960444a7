"""The runtime in this process, for tests of what it does with a request: built with the settings a test gives
(never the environment's), and asked through its one entry, `ChariotRuntime.answer`."""

import asyncio
import uuid

from mlserver.settings import ModelParameters, ModelSettings
from mlserver.types import InferenceRequest, InferenceResponse

from chariot_support.protocols import v2_rest
from chariot_support.protocols.chariot_v2_kserve import parse_request
from chariot_support.protocols.request import Answer
from chariot_support.runtime.runtime import ChariotRuntime, import_model_class
from chariot_support.settings import EngineSettings


def loaded_runtime(model_class: str, settings: EngineSettings) -> ChariotRuntime:
    """A ChariotRuntime serving `model_class` ("module:Class") with `settings`, loaded."""
    model = ModelSettings(
        name="m-test",
        implementation=ChariotRuntime,
        parameters=ModelParameters(extra={"model_class": model_class, "engine_settings": settings.to_json()}),
    )
    runtime = ChariotRuntime(model)
    asyncio.run(runtime.load())
    return runtime


async def answer(runtime: ChariotRuntime, payload: InferenceRequest) -> InferenceResponse:
    """The runtime's answer to a V2 request, as a V2 response."""
    request_id = payload.id or str(uuid.uuid4())
    task = import_model_class(runtime.settings.parameters.extra["model_class"]).task_type
    settings = EngineSettings.from_json(runtime.settings.parameters.extra["engine_settings"])
    parsed = parse_request(v2_rest.request_from_model(payload), task, settings)  # as the pipeline checks it
    answered = await runtime.answer(parsed, request_id)
    return InferenceResponse.model_validate_json(v2_rest.render(Answer(answered, request_id, "m-test", None, {})))
