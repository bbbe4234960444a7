"""The engine's data plane over MLServer's: the model named as Chariot names it, readiness that means loaded, the
one pipeline every inference goes through (MLServer's own inference is refused), and the model repository of the one
model an engine serves."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mlserver.errors import ModelNotFound
from mlserver.settings import ModelSettings
from mlserver.types import (
    MetadataModelResponse,
    MetadataServerResponse,
    RepositoryIndexRequest,
    RepositoryIndexResponse,
)

from chariot_support import model_id as model_id_rule
from chariot_support.after_answer import afterwards
from chariot_support.errors import ChariotError, DoesNotStream, NotFound
from chariot_support.logs.request_lines import engine_ready
from chariot_support.pipeline.pipeline import SERVING_ERRORS, Pipeline
from chariot_support.protocols import v2_binary
from chariot_support.seams.mlserver import DataPlane, ModelRepository, ModelRepositoryHandlers
from chariot_support.settings import EngineSettings

logger = logging.getLogger("chariot_support")

# The extensions of the Open Inference Protocol the engine serves, named as Triton names them: request and response
# parameters, REST's binary tensor data (protocols/v2_binary.py), and Triton's statistics and model configuration
# (triton/); the model repository's too when CHARIOT_REPOSITORY_API opens its load and unload.
EXTENSIONS = ("parameters", v2_binary.EXTENSION, "statistics", "model_configuration")
REPOSITORY_EXTENSION = "model_repository"


class ChariotDataPlane:
    """MLServer's data plane with Chariot's model naming, readiness and not-found messages, shared by REST and gRPC;
    it holds the pipeline (`pipeline`), which gives requests their ids and answers them."""

    def __init__(self, inner: DataPlane, model_registry: Any, *, model_name: str, engine: EngineSettings):
        self._inner = inner
        self.engine = engine  # the engine's settings, for every transport in front of it
        self.model_registry = model_registry
        self.model_name = model_name
        self._pinned = bool(engine.model_id)  # CHARIOT_MODEL_ID: only that name reaches the model
        self._alias = engine.model_alias  # CHARIOT_MODEL_ALIAS: one more name that does (KServe's InferenceService)
        self.workers = None  # the WorkerWatch (server/workers.py), when the model runs in parallel workers
        self.model_config: dict[str, Any] = {}  # Triton's model configuration of the served model (triton/config.py)
        self.pipeline = Pipeline(self, inner)  # every inference request's one way to the model

    async def live(self) -> bool:
        return await self._inner.live()

    async def metadata(self) -> MetadataServerResponse:
        """MLServer's server metadata, listing the extensions the engine serves, and only those (MLServer lists
        none of its own)."""
        metadata = await self._inner.metadata()
        extensions = [*EXTENSIONS, *([REPOSITORY_EXTENSION] if self.engine.repository_api else [])]
        return metadata.model_copy(update={"extensions": extensions})

    async def model_statistics(self, name: str | None, version: str | None = None) -> dict[str, Any]:
        """Triton's statistics of the model `name` reaches (every model's when None: the served one), with every
        request answered so far counted; a 404 for a model or version not served."""
        if name:
            await self.pipeline.model(name, version)
        statistics = self.pipeline.statistics
        # The work after the answers is done first, off the event loop (it may wait on the log's stdout).
        stats = await asyncio.to_thread(afterwards.snapshot, lambda: statistics.model_stats(name))
        return {"model_stats": [stats]}

    async def model_configuration(self, name: str, version: str | None = None) -> dict[str, Any]:
        """Triton's model configuration of the model `name` reaches, named as the client named it; a 404 for a model
        or version not served."""
        await self.pipeline.model(name, version)
        return {**self.model_config, "name": name}

    async def infer_stream(self, payload: Any, name: str, version: str | None = None):
        raise DoesNotStream()

    def resolve(self, name: str) -> str:
        """Chariot addresses the model as m-<id> with an id chosen at deploy time; any such name reaches the
        one model this engine serves, unless CHARIOT_MODEL_ID pinned it. CHARIOT_MODEL_ALIAS, when set, does too."""
        if not self._pinned and name.startswith("m-") and model_id_rule.PATTERN.fullmatch(name[2:]):
            return self.model_name
        if self._alias and name == self._alias:
            return self.model_name
        return name

    def named(self, name: str, version: str | None = None) -> _Named:
        """`with data_plane.named(name, version) as resolved`: the registry's name for `name`; a model it cannot find
        in the block becomes a 404 that says what is served."""
        return _Named(self, name, version)

    def not_found(self, name: str, version: str | None) -> ChariotError:
        """The 404 for a model `name` (at `version`) the registry could not find, saying what is served."""
        if self.resolve(name) != self.model_name:
            lowered = name.lower()
            if lowered != name and self.resolve(lowered) == self.model_name:
                return NotFound(f"no model named {name!r}: model ids are lowercase in Chariot's URLs; use {lowered!r}")
            served = self.model_name if self._pinned else f"any m-<id> name (it was started as {self.model_name})"
            served += f" and {self._alias}" if self._alias else ""
            return NotFound(f"no model named {name!r}: this engine serves {served}")
        if version:
            return NotFound(f"model {name!r} has no version {version!r} loaded")
        return ChariotError(f"model {name!r} is not loaded: load it with POST /v2/repository/models/{name}/load", 404)

    async def infer(self, payload: Any, name: str, version: str | None = None) -> Any:
        # MLServer's way to a model, which the engine's transports never take: every request goes through the
        # pipeline (self.pipeline.answer), so that none skips its checks, limits, logs or metrics.
        raise ChariotError("inference is answered by the engine's pipeline, not MLServer's data plane", 500)

    async def ready(self) -> bool:
        # MLServer calls a server with no models ready; an engine is ready only once its model is loaded.
        if self.workers is not None and not self.workers.serving():
            return False
        try:
            return await self.model_ready(self.model_name)
        except SERVING_ERRORS:
            return False

    async def model_ready(self, name: str, version: str | None = None) -> bool:
        with self.named(name, version) as resolved:
            if not await self._inner.model_ready(resolved, version):
                return False
            # A model stuck in a predict past CHARIOT_PREDICT_TIMEOUT cannot serve (see ChariotRuntime.stuck). With
            # parallel workers the runtime lives in another process and only its 503 answers say so.
            model = await self.model_registry.get_model(resolved, version)
        if getattr(model, "stuck", False):
            return False
        engine_ready()  # readiness lost from now on is an error in the log (logs/request_lines.py)
        return True

    async def model_metadata(self, name: str, version: str | None = None) -> MetadataModelResponse:
        with self.named(name, version) as resolved:
            metadata = await self._inner.model_metadata(resolved, version)
        return metadata.model_copy(update={"name": name})


class EngineRepository(ModelRepository):
    """The model repository of an engine: the one model it was built to serve, so that repository loads and
    unloads act on it instead of searching the working directory for model-settings.json files."""

    def __init__(self, model: ModelSettings):
        self._model = model

    async def list(self) -> list[ModelSettings]:
        return [self._model]

    async def find(self, name: str) -> list[ModelSettings]:
        if name != self._model.name:
            raise ModelNotFound(name)
        return [self._model]


class ChariotRepositoryHandlers:
    """MLServer's model repository handlers, reached by any of the model's m-<id> names as inference is."""

    def __init__(self, inner: ModelRepositoryHandlers, data_plane: ChariotDataPlane):
        self._inner = inner
        self._data_plane = data_plane

    async def index(self, payload: RepositoryIndexRequest) -> RepositoryIndexResponse:
        return await self._inner.index(payload)

    def _check_open(self, verb: str) -> None:
        # Anyone who reaches the port could unload the model; the control plane is opt-in.
        if not self._data_plane.engine.repository_api:
            raise ChariotError(f"repository {verb} is turned off on this engine; set CHARIOT_REPOSITORY_API=1", 403)

    async def load(self, name: str) -> bool:
        self._check_open("load")
        with self._data_plane.named(name) as resolved:
            return await self._inner.load(resolved)

    async def unload(self, name: str) -> bool:
        self._check_open("unload")
        with self._data_plane.named(name) as resolved:
            return await self._inner.unload(resolved)


class _Named:
    """The block of `ChariotDataPlane.named`. A class, not a generator's context manager, which cost each request
    1.5 us more here."""

    __slots__ = ("_plane", "_name", "_version")

    def __init__(self, plane: ChariotDataPlane, name: str, version: str | None):
        self._plane, self._name, self._version = plane, name, version

    def __enter__(self) -> str:
        return self._plane.resolve(self._name)

    def __exit__(self, kind, error, traceback) -> None:
        if kind is not None and issubclass(kind, ModelNotFound):
            raise self._plane.not_found(self._name, self._version) from None
