"""The engine's settings: one typed object, read from the environment once per process.

Each field names its environment variable and says, in `doc`, what it does: the engine's docs/settings.md table is
written from these fields (`python -m chariot_support.dev.reference`), and a template test fails while the page and
this object disagree. MLServer's own MLSERVER_* variables are MLServer's, read by MLServer.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
PROTOCOLS = ("auto", "chariot-v2-kserve", "chariot-v2")
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


def _setting(
    env: str,
    default: Any,
    *,
    doc: str = "",
    allowed: str = "",
    minimum: float = 1,
    above: bool = False,
    choices: tuple[str, ...] = (),
    unit: str = "seconds",
) -> Any:
    """A field read from `env`: numbers at least `minimum` (more than it, when `above`) in `unit`, strings among
    `choices`. `doc` says what it does, in the settings page's Markdown; `allowed` says what a string may be, where
    its type and `choices` do not."""
    metadata = {"env": env, "minimum": minimum, "above": above, "choices": choices, "unit": unit}
    return field(default=default, metadata={**metadata, "doc": doc, "allowed": allowed})


@dataclass(frozen=True)
class EngineSettings:
    """What an engine can be told through its environment; the defaults fit a pod of 2-4 GiB."""

    # The model
    model_dir: Path = _setting(
        "MODEL_DIR", Path("/mnt/models"), doc="where `load` reads the model's files", allowed="a folder"
    )
    model_id: str = _setting(
        "CHARIOT_MODEL_ID",
        "",  # empty: any m-<id> name reaches the model
        doc="pins the model id the engine answers to: only `m-<that id>` reaches the model, other names get 404;"
        " unset, any `m-<id>` does (see [the model id](protocol.md#the-model-id))",
        allowed="a model id: lowercase letters, digits and dashes, at most 63",
    )
    model_version: str = _setting(
        "CHARIOT_MODEL_VERSION",
        "1",
        doc="the `model_version` reported in responses and metadata",
        allowed="any text",
    )
    # KServe's manifest sets the InferenceService's name here.
    model_alias: str = _setting(
        "CHARIOT_MODEL_ALIAS",
        "",
        doc="one more name the model answers to, beside `m-<id>`: on KServe, the InferenceService's name (see"
        " [the model id](protocol.md#the-model-id))",
        allowed="a Kubernetes name: lowercase letters, digits and dashes, at most 63",
    )
    model_copies: str = _setting(
        "CHARIOT_MODEL_COPIES",
        "",  # empty: the model's own `copies`
        doc="for a model that is not thread-safe: independent copies loaded, each running one predict at a time;"
        " `threads` loads one per `CHARIOT_THREADS`; unset, the model's `copies` (1)",
        allowed="a whole number, at least 1, or `threads`",
    )
    threads: int = _setting(
        "CHARIOT_THREADS",
        0,
        minimum=0,
        doc="threads that decode images and run predict; `0` starts one per CPU the machine reports (see"
        " [Scaling](scaling.md#threads))",
    )
    # Decode and predict on the event loop, one request at a time, with no hop to a worker thread: for models that
    # answer in well under a millisecond. CHARIOT_PREDICT_TIMEOUT then cannot stop a predict, and nothing else
    # (health included) is answered while one runs.
    predict_inline: bool = _setting(
        "CHARIOT_PREDICT_INLINE",
        False,
        doc="on, decodes and predicts on the event loop, one request at a time, with no hop to a thread: for models"
        " that answer in well under a millisecond; `CHARIOT_PREDICT_TIMEOUT` can then not stop a predict (see"
        " [Scaling](scaling.md#tiny-fast-models))",
    )
    log_level: str = _setting(
        "CHARIOT_LOG_LEVEL",
        "INFO",
        choices=LOG_LEVELS,
        doc="the least severe log line written, for every logger, the model's and its libraries' too (see"
        " [Logs](logs.md))",
    )
    server_timing: bool = _setting(
        "CHARIOT_SERVER_TIMING",
        True,
        doc="each REST inference answer's stages (read, admission, parse, queue, decode, predict, results) and"
        " their total in a `Server-Timing` header, which browsers' developer tools show; off, answers go without"
        " it (see [Stages](stages.md))",
    )
    # The pictures are those in CHARIOT_WARMUP_IMAGES (a folder) when set, else what the model's `warmup` gives, else
    # the engine's samples/ when it runs beside them, else synthetic pictures.
    warmup: bool = _setting(
        "CHARIOT_WARMUP",
        True,
        doc="before the engine says ready, each copy of the model (in each worker) predicts on warm-up pictures at"
        " batch size 1 and `CHARIOT_MAX_BATCH_SIZE`, so the first request does not pay for the model's first call;"
        " off starts without (see [Warm-up](scaling.md#warm-up))",
    )
    warmup_images: str = _setting(
        "CHARIOT_WARMUP_IMAGES",
        "",
        doc="a folder of pictures (up to 16) to warm the model with, in place of the model's `warmup()`, the"
        " engine's `samples/` or a synthetic picture",
        allowed="a folder",
    )
    inference_protocol: str = _setting(
        "CHARIOT_INFERENCE_PROTOCOL",
        "auto",
        choices=PROTOCOLS,
        doc="what the root `/infer` speaks: `auto` tells chariot-v2-kserve and chariot-v2 apart by the request;"
        " the others pin it to one (see [chariot-v2](protocol.md#chariot-v2-at-infer))",
    )
    # Requests
    max_request_mb: int = _setting(
        "CHARIOT_MAX_REQUEST_MB",
        64,  # eight 12-megapixel JPEGs in base64, with room
        doc="largest request, in MiB: the REST body limit (413 above it) and gRPC's message limit"
        " (`RESOURCE_EXHAUSTED`) alike; gRPC's usual 4 MiB would refuse ordinary photos",
    )
    predict_timeout: float = _setting(
        "CHARIOT_PREDICT_TIMEOUT",
        60.0,
        minimum=0,
        above=True,
        doc="seconds a request may take to decode and predict, its waits for a model copy or a batch included,"
        " before it gets a 504",
    )
    max_inputs: int = _setting(
        "CHARIOT_MAX_INPUTS", 64, doc="most inputs one request may carry (lines, for chariot-v2 JSONL); 400 above it"
    )
    max_image_pixels: int = _setting(
        "CHARIOT_MAX_IMAGE_PIXELS",
        100_000_000,
        doc="largest image (width × height) accepted, read from its header before decoding; 400 above it",
    )
    max_elements: int = _setting(
        "CHARIOT_MAX_ELEMENTS",
        1_000_000,
        doc="most JSON values (tensor elements, pixel-list numbers) one request may carry; counted before parsing"
        " (413 above it)",
    )
    # Four 12-megapixel photos fit many times over.
    max_request_pixels: int = _setting(
        "CHARIOT_MAX_REQUEST_PIXELS",
        200_000_000,
        doc="most pixels all images of one request may decode to, read from their headers (413 above it)",
    )
    body_budget_mb: int = _setting(
        "CHARIOT_BODY_BUDGET_MB",
        256,
        doc="MiB of request bodies all requests in flight may hold, REST and gRPC together, counted before a body"
        " is buffered; a body that does not fit waits up to `CHARIOT_ADMISSION_WAIT`, then gets 503 with"
        " `Retry-After`; at least `CHARIOT_MAX_REQUEST_MB`",
    )
    decode_budget_mb: int = _setting(
        "CHARIOT_DECODE_BUDGET_MB",
        1024,
        doc="MiB of decoded pixels all requests in flight may hold, counting the working copy OpenCV makes of the"
        " largest image of each; a request that does not fit waits up to `CHARIOT_ADMISSION_WAIT`, then gets 503"
        " with `Retry-After`",
    )
    admission_wait: float = _setting(
        "CHARIOT_ADMISSION_WAIT",
        2.0,
        minimum=0,
        doc="seconds a request waits for room in the body or decode budget, and a gRPC call for its turn to be"
        " read, before its 503 (`UNAVAILABLE`)",
    )
    max_stuck_threads: int = _setting(
        "CHARIOT_MAX_STUCK_THREADS",
        8,
        doc="threads still inside predicts that overran `CHARIOT_PREDICT_TIMEOUT`; at the cap the engine is not"
        " ready and answers 503 until one returns",
    )
    repository_api: bool = _setting(
        "CHARIOT_REPOSITORY_API",
        False,
        doc="on, opens the model repository's load and unload (403 otherwise: anyone who reaches the port could"
        " unload the model)",
    )
    api_docs: bool = _setting(
        "CHARIOT_API_DOCS", False, doc="on, serves `/openapi.json` and the `/v2/docs` pages (MLServer's API docs)"
    )
    # The page calls only the engine's own inference route; off, every other route is the same.
    page: bool = _setting(
        "CHARIOT_PAGE",
        True,
        doc="the [page to try the model](page.md) in a browser at `GET /`; off, `GET /` is a 404 as any unknown"
        " path is, and every other route is the same",
    )
    # The table of connections closes the idlest when full, so long keep-alives do not lock out new clients.
    max_connections: int = _setting(
        "CHARIOT_MAX_CONNECTIONS",
        512,
        doc="most connections and requests at once: a new connection past it closes the one that has waited"
        " longest on its client (idle, slow or stalled; a request there gets 503), and is itself closed only when"
        " every connection has a request in flight; requests past it in flight get 503 with `Retry-After` (health"
        " checks are still answered)",
    )
    # Longer than the proxies in front keep idle pooled connections (nginx 60 s), so that they close them first and
    # never send a request on a connection the engine is closing (it would be lost).
    keep_alive: float = _setting(
        "CHARIOT_KEEP_ALIVE",
        75.0,
        doc="seconds an idle connection (before or between requests) stays open: longer than the proxies in front"
        " of an engine keep idle pooled connections, so they close them first (see"
        " [Behind a proxy](reliability.md#behind-a-proxy))",
    )
    # Deadlines that free the connections of clients too slow to send or to read (see seams/uvicorn.py).
    header_timeout: float = _setting(
        "CHARIOT_HEADER_TIMEOUT",
        10.0,
        minimum=0,
        above=True,
        doc="seconds from a request's first byte to the end of its head (request line and headers); past it, 408"
        " and the connection is closed",
    )
    body_timeout: float = _setting(
        "CHARIOT_BODY_TIMEOUT",
        10.0,
        minimum=0,
        above=True,
        doc="seconds over which a body's arrival is measured: a window that brings less than"
        " `CHARIOT_MIN_BODY_RATE` gets 408 and the connection is closed; also the longest a client may leave its"
        " answer unread before the connection is cut",
    )
    min_body_rate: int = _setting(
        "CHARIOT_MIN_BODY_RATE",
        1,
        minimum=0,
        doc="KiB a second a body must average over each `CHARIOT_BODY_TIMEOUT` window while it arrives; `0` cuts"
        " only a window that brings nothing",
    )
    max_batch_size: int = _setting(
        "CHARIOT_MAX_BATCH_SIZE",
        1,
        doc="above 1 turns on batching across requests: most images in one `predict` call, gathered from"
        " concurrent requests (for GPU models; see [Batching](scaling.md#batching-across-requests-gpu-models)); 1 is"
        " off",
    )
    max_batch_wait_ms: float = _setting(
        "CHARIOT_MAX_BATCH_WAIT_MS",
        5.0,
        minimum=0,
        above=True,
        unit="milliseconds",
        doc="with batching on: milliseconds a batch waits for more requests before it goes to the model",
    )
    grpc_grace: float = _setting(
        "CHARIOT_GRPC_GRACE", 30.0, minimum=0, doc="seconds gRPC calls in flight get to finish on SIGTERM"
    )
    grpc_max_calls: int = _setting(
        "CHARIOT_GRPC_MAX_CALLS",
        64,
        doc="most gRPC calls served at once, each until its answer is sent (health and metadata calls are not"
        " counted); more get `RESOURCE_EXHAUSTED` before their message is read, counted in the metric"
        " `chariot_grpc_refused_total` and the log",
    )
    grpc_read_timeout: float = _setting(
        "CHARIOT_GRPC_READ_TIMEOUT",
        10.0,
        minimum=0,
        above=True,
        doc="seconds a gRPC call's request message may take to arrive; past it the call gets `DEADLINE_EXCEEDED`",
    )

    # Fixed, not settings: the deepest JSON nesting accepted (a request is a few levels deep, a pixel list six),
    # and the longest error message sent back.
    max_json_depth = 64
    max_error_chars = 1000

    def __post_init__(self) -> None:
        if not self.threads:  # 0: one per CPU
            object.__setattr__(self, "threads", os.cpu_count() or 1)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EngineSettings:
        """Read every setting from `environ` (the process environment by default); a value that cannot be used is
        a ValueError naming the variable and what it takes."""
        environ = os.environ if environ is None else environ
        values = {}
        for each in fields(cls):
            raw = environ.get(each.metadata["env"], "").strip()
            if raw:
                values[each.name] = _read(each.metadata, type(each.default), raw)
        settings = cls(**values)
        if settings.predict_inline and settings.max_batch_size > 1:
            raise ValueError(
                "CHARIOT_PREDICT_INLINE runs one predict at a time on the event loop, so no request could wait for"
                " others to batch with: set CHARIOT_MAX_BATCH_SIZE=1, or turn CHARIOT_PREDICT_INLINE off"
            )
        copies = settings.model_copies
        if copies and copies != "threads" and not (copies.isdigit() and int(copies) >= 1):
            raise ValueError(
                f"environment variable CHARIOT_MODEL_COPIES must be a whole number of at least 1, or 'threads',"
                f" got {copies!r}"
            )
        if settings.body_budget_mb < settings.max_request_mb:
            raise ValueError(
                f"CHARIOT_BODY_BUDGET_MB ({settings.body_budget_mb}) is smaller than CHARIOT_MAX_REQUEST_MB"
                f" ({settings.max_request_mb}), so the largest request allowed could never be read: raise the budget"
            )
        return settings

    def to_json(self) -> dict[str, Any]:
        """The settings as JSON values, to travel with the model's settings to its runtime (in this process or a
        parallel worker): the runtime is handed the settings the engine started with, never reads them again."""
        return {f.name: str(v) if isinstance(v, Path) else v for f in fields(self) for v in [getattr(self, f.name)]}

    @classmethod
    def from_json(cls, values: Mapping[str, Any]) -> EngineSettings:
        known = {f.name: f for f in fields(cls)}
        return cls(**{k: Path(v) if k == "model_dir" else v for k, v in values.items() if k in known})

    @classmethod
    def variables(cls) -> dict[str, Any]:
        """Each environment variable and its default."""
        return {each.metadata["env"]: each.default for each in fields(cls)}


def _read(metadata: Mapping[str, Any], kind: type, raw: str) -> Any:
    name, minimum, choices = metadata["env"], metadata["minimum"], metadata["choices"]
    if kind is bool:
        value = raw.lower()
        if value not in TRUE + FALSE:
            raise ValueError(f"environment variable {name} must be one of {', '.join(TRUE + FALSE)}, got {raw!r}")
        return value in TRUE
    if issubclass(kind, Path):
        return Path(raw)
    if kind is str:
        if choices:
            value = raw.upper() if choices == LOG_LEVELS else raw.lower()
            if value not in choices:
                raise ValueError(f"environment variable {name} must be one of {', '.join(choices)}, got {value!r}")
            return value
        return raw
    if kind is float:
        unit = metadata["unit"]
        wanted = f"a positive number of {unit}" if metadata["above"] else f"a number of {unit}, at least {minimum:g}"
    else:
        wanted = f"a whole number, at least {minimum:g}"
    try:
        number = kind(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be {wanted}, got {raw!r}") from None
    low_enough = number > minimum if metadata["above"] else number >= minimum
    if not (low_enough and number < float("inf")):
        raise ValueError(f"environment variable {name} must be {wanted}, got {raw!r}")
    return number


# What one request may ask of the engine when no settings are given (the parsers' tests and tools): the defaults.
DEFAULTS = EngineSettings()


@functools.cache
def config() -> EngineSettings:
    """The engine's settings, read from the environment once, by the process that starts the engine (server/server)
    and by the log setup; every other part is handed them."""
    return EngineSettings.from_env()
