"""The one way into the model: every inference request, whatever its protocol and transport, is answered by
`Pipeline.answer`. It gives the request its id, refuses it while the engine stops, finds the model by the name the
client used, counts the request in MLServer's inference metrics, checks the request whole (its envelope, settings and
image files, against the limits) before it waits for anything, and calls the runtime's one entry
(`ChariotRuntime.answer`), in this process or in the parallel worker the model lives in, which decodes the pixels,
batches, predicts and checks the results within CHARIOT_PREDICT_TIMEOUT."""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mlserver.errors import MLServerError

from chariot_support.after_answer import afterwards
from chariot_support.errors import BadRequest, ChariotError, ModelLoading
from chariot_support.logs.request_lines import id_header, note_request_id
from chariot_support.memory.budgets import LARGE_BODY
from chariot_support.model.tasks import TaskType
from chariot_support.protocols.chariot_v2_kserve import HEADER_TEXT, parse_request
from chariot_support.protocols.request import Answer, ImageFile, ParsedRequest, Request
from chariot_support.seams.mlserver import (
    call_runtime,
    response_headers,
    served_inference,
    unwrap_worker_error,
)
from chariot_support.stages.histograms import StageHistograms
from chariot_support.triton.statistics import InferenceStatistics

# What an engine answers with a status code: its own errors, and MLServer's (a model not found, not ready...).
SERVING_ERRORS = (ChariotError, MLServerError)

# The longest request id taken from a body or a header: it is echoed in the answer, its headers and the log.
MAX_REQUEST_ID = 256


# Request ids drawn from a generator of the engine's own, seeded from the system's randomness (and again in a forked
# worker): uuid4 asks the kernel for every id, a system call that lets another thread take the GIL mid-request. A
# model that seeds Python's shared generator for its own ends leaves these ids as they are.
_ids = random.Random()
os.register_at_fork(after_in_child=_ids.seed)


def new_request_id() -> str:
    """A version 4 UUID."""
    return str(uuid.UUID(int=_ids.getrandbits(128), version=4))


def request_id_of(body_id: str | None, headers: Mapping[str, str]) -> str:
    """The request's id: the body's, else the caller's header (X-Request-ID, then Chariot's base id), else a new
    UUID. An id that could not travel back in a response header, or is longer than MAX_REQUEST_ID, is a 400."""
    if body_id:
        return _checked_id(body_id, "the request id")
    found = id_header(headers)
    return _checked_id(found[1], f"the {found[0]} header") if found else new_request_id()


def _checked_id(value: str, where: str) -> str:
    if len(value) > MAX_REQUEST_ID:
        raise BadRequest(
            f"{where} is {len(value):,} characters long; this engine takes ids of at most {MAX_REQUEST_ID} (a UUID is 36)"
        )
    if not HEADER_TEXT.fullmatch(value):
        raise BadRequest(
            f"{where} {value[:100]!r} cannot travel in an HTTP header: use letters, digits and punctuation"
            " (a UUID is usual)"
        )
    return value


class Pipeline:
    """Answers inference requests with the model behind `data_plane` (data_plane.ChariotDataPlane), whose naming
    rules say which names reach it, and MLServer's data plane `inner`, whose metrics count each request."""

    def __init__(self, data_plane: Any, inner: Any):
        self.data_plane = data_plane
        self._inner = inner
        # Every inference request, handed over after its answer by the transport that served it, whichever worker
        # served it: in Triton's statistics, and the answered ones' stages in the histograms.
        self.histograms = StageHistograms()
        self.statistics = InferenceStatistics(
            data_plane.model_name, data_plane.engine.model_version, data_plane.resolve, self.histograms
        )
        afterwards.at_batch_end(self.statistics.fold_if_many)
        self.stopping = False  # the engine is draining: requests from now on are refused, those in flight answered
        self._in_flight = 0
        self._drained: asyncio.Event | None = None

    async def drain(self, timeout: float) -> int:
        """Refuse new requests from now on, and wait up to `timeout` seconds for those in flight to be answered;
        returns how many were still in flight after it."""
        self.stopping = True
        if self._in_flight:
            self._drained = asyncio.Event()
            try:
                await asyncio.wait_for(self._drained.wait(), timeout)
            except TimeoutError:
                pass
        return self._in_flight

    @property
    def model_name(self) -> str:
        return self.data_plane.model_name

    async def model(self, name: str, version: str | None) -> Any:
        """The model the name reaches; a 404 that says what is served when none does."""
        with self.data_plane.named(name, version) as resolved:
            return await self.data_plane.model_registry.get_model(resolved, version)

    async def _parse(self, request: Request, task: TaskType) -> ParsedRequest:
        """The request's inputs and parameters checked against the protocol and the engine's limits, its images read
        from their base64 and their files checked from their headers (off the event loop when large, so health
        answers meanwhile)."""
        limits = self.data_plane.engine
        if _encoded_bytes(request) > LARGE_BODY:
            return await asyncio.to_thread(parse_request, request, task, limits)
        return parse_request(request, task, limits)

    async def served(self, name: str | None = None) -> Served:
        """What the model `name` reaches is (its task type, whether it explains), read from its settings: the model's
        own module is never imported here, where parallel workers would not need it."""
        return _served(await self.model(name or self.model_name, None))

    async def answer(
        self,
        request: Request,
        headers: Mapping[str, str],
        name: str | None = None,
        version: str | None = None,
        *,
        explain: bool = False,
    ) -> Answer:
        """Answer `request`, sent to the model `name` (the served model when None) with `headers` (lowercase)."""
        request_id = request_id_of(request.id, headers)
        note_request_id(request_id)
        if self.stopping:
            raise ChariotError(
                "the engine is stopping (a new version is rolling out, or it is scaled down): retry", 503
            )
        self._in_flight += 1
        try:
            return await self._answer(request, request_id, headers, name, version, explain)
        finally:
            self._in_flight -= 1
            if not self._in_flight and self._drained is not None:
                self._drained.set()

    async def _answer(
        self, request: Request, request_id: str, headers: Mapping[str, str], name, version, explain: bool
    ) -> Answer:
        name = name or self.model_name
        with self.data_plane.named(name, version) as resolved:
            # Names and versions that are not served end here, before a metric is labelled with them.
            model = await self.data_plane.model_registry.get_model(resolved, version)
            if not model.ready:
                raise ModelLoading(f"model {name!r} is still loading; retry when GET /v2/health/ready answers 200")
            # Counted under the version that answers (CHARIOT_MODEL_VERSION), whichever the request named: MLServer
            # labels its metrics with the request's, `None` for every request that names none, as Chariot's do.
            async with served_inference(self._inner, model, model.version) as served:
                # Checked here, before the request waits for a thread, a batch or a parallel worker: a bad request
                # is told so at once, never queued behind the model's work.
                parsed = await self._parse(request, _served(model).task)
                parsed_at = time.perf_counter()  # the request's stages: parsed, then the runtime's (stages/timing.py)
                try:
                    answered = await call_runtime(served, "answer", parsed, request_id, explain)
                except SERVING_ERRORS as error:
                    raise unwrap_worker_error(error) from None
                answered_at = time.perf_counter()
                extra = response_headers(self._inner, served, request_id)
        # One policy for every protocol: MLServer's CloudEvents headers, and the request id as X-Request-ID.
        headers = {**extra, "x-request-id": request_id}
        return Answer(answered, request_id, name, served.version, headers, parsed_at, answered_at)


def _encoded_bytes(request: Request) -> int:
    """The bytes of the request's images as sent: base64 to decode, or files to check."""
    return sum(
        len(value.data if isinstance(value, ImageFile) else value)
        for tensor in request.inputs
        for value in tensor.data[:1]
        if isinstance(value, (str, bytes, ImageFile))
    )


@dataclass(frozen=True)
class Served:
    """What a served model is, as its settings say: its class's name, task type, and whether it explains."""

    name: str
    task: TaskType
    explains: bool


def _served(model: Any) -> Served:
    extra = model.settings.parameters.extra
    return Served(extra["model_class"].rpartition(":")[2], TaskType(extra["task_type"]), bool(extra.get("explains")))
