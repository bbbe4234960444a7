"""The engine's settings: one typed object, read from the environment once per process.

Each field names its environment variable; the engine README's table of variables is checked against this one
(`tests/support/test_settings.py`). MLServer's own MLSERVER_* variables are MLServer's, read by MLServer.
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
    minimum: float = 1,
    above: bool = False,
    choices: tuple[str, ...] = (),
    unit: str = "seconds",
) -> Any:
    """A field read from `env`: numbers at least `minimum` (more than it, when `above`) in `unit`, strings among
    `choices`."""
    return field(
        default=default, metadata={"env": env, "minimum": minimum, "above": above, "choices": choices, "unit": unit}
    )


@dataclass(frozen=True)
class EngineSettings:
    """What an engine can be told through its environment; the defaults fit a pod of 2-4 GiB."""

    # The model
    model_dir: Path = _setting("MODEL_DIR", Path("/mnt/models"))
    model_id: str = _setting("CHARIOT_MODEL_ID", "")  # empty: any m-<id> name reaches the model
    model_version: str = _setting("CHARIOT_MODEL_VERSION", "1")
    # One more name the model answers to, besides m-<id>: KServe's manifest sets the InferenceService's name here.
    model_alias: str = _setting("CHARIOT_MODEL_ALIAS", "")
    model_copies: str = _setting("CHARIOT_MODEL_COPIES", "")  # empty: the model's own `copies`; or a number, `threads`
    threads: int = _setting("CHARIOT_THREADS", 0, minimum=0)  # 0: one per CPU
    # Decode and predict on the event loop, one request at a time, with no hop to a worker thread: for models that
    # answer in well under a millisecond. CHARIOT_PREDICT_TIMEOUT then cannot stop a predict, and nothing else
    # (health included) is answered while one runs.
    predict_inline: bool = _setting("CHARIOT_PREDICT_INLINE", False)
    log_level: str = _setting("CHARIOT_LOG_LEVEL", "INFO", choices=LOG_LEVELS)
    # Each REST inference answer's stages (read, parse, queue, decode, predict...) in a Server-Timing header, which
    # browsers' developer tools show; off, the answer goes without it.
    server_timing: bool = _setting("CHARIOT_SERVER_TIMING", True)
    # Warm-up: before the engine says ready, each copy of the model (in each parallel worker) predicts on warm-up
    # pictures once per batch size batching uses, so that the first request does not pay for the model's first call.
    # The pictures are those in CHARIOT_WARMUP_IMAGES (a folder) when set, else what the model's `warmup` gives, else
    # the engine's samples/ when it runs beside them, else synthetic pictures.
    warmup: bool = _setting("CHARIOT_WARMUP", True)
    warmup_images: str = _setting("CHARIOT_WARMUP_IMAGES", "")
    inference_protocol: str = _setting("CHARIOT_INFERENCE_PROTOCOL", "auto", choices=PROTOCOLS)
    # Requests
    max_request_mb: int = _setting("CHARIOT_MAX_REQUEST_MB", 64)  # eight 12-megapixel JPEGs in base64, with room
    predict_timeout: float = _setting("CHARIOT_PREDICT_TIMEOUT", 60.0, minimum=0, above=True)
    max_inputs: int = _setting("CHARIOT_MAX_INPUTS", 64)
    max_image_pixels: int = _setting("CHARIOT_MAX_IMAGE_PIXELS", 100_000_000)
    max_elements: int = _setting("CHARIOT_MAX_ELEMENTS", 1_000_000)
    # Most pixels the images of one request may decode to: four 12-megapixel photos fit many times over.
    max_request_pixels: int = _setting("CHARIOT_MAX_REQUEST_PIXELS", 200_000_000)
    # Bytes of all request bodies in flight (REST and gRPC), in MiB; a body that does not fit waits, then gets a 503.
    body_budget_mb: int = _setting("CHARIOT_BODY_BUDGET_MB", 256)
    # Decoded bytes of all requests in flight (with the working copy OpenCV makes while it decodes), in MiB; a request
    # that does not fit waits, then gets a 503.
    decode_budget_mb: int = _setting("CHARIOT_DECODE_BUDGET_MB", 1024)
    # Seconds a request waits for room in the decode budget, or for a thread, before its 503.
    admission_wait: float = _setting("CHARIOT_ADMISSION_WAIT", 2.0, minimum=0)
    # Threads still inside a predict past CHARIOT_PREDICT_TIMEOUT; at the cap the engine is not ready and answers 503.
    max_stuck_threads: int = _setting("CHARIOT_MAX_STUCK_THREADS", 8)
    # Off unless turned on: model repository load/unload, and the API docs pages.
    repository_api: bool = _setting("CHARIOT_REPOSITORY_API", False)
    api_docs: bool = _setting("CHARIOT_API_DOCS", False)
    # The page at GET / that tries the model in a browser (it calls only the engine's own routes); off, GET / is a 404
    # as any unknown path is, and every other route is the same either way.
    page: bool = _setting("CHARIOT_PAGE", True)
    # uvicorn: most connections and requests at once (more get a 503), and seconds an idle keep-alive stays open:
    # longer than the proxies in front keep idle pooled connections (nginx 60 s), so that they close them first and
    # never send a request on a connection the engine is closing (it would be lost). The table of connections
    # closes the idlest when full, so long keep-alives do not lock out new clients.
    max_connections: int = _setting("CHARIOT_MAX_CONNECTIONS", 512)
    keep_alive: float = _setting("CHARIOT_KEEP_ALIVE", 75.0)
    # Deadlines that free the connections of clients too slow to send or to read (see seams/uvicorn.py): seconds from
    # a request's first byte to the end of its head, and, while its body arrives, the window in which it must bring
    # at least CHARIOT_MIN_BODY_RATE KiB a second (0: only a window that brings nothing at all is cut), which is also
    # the longest a client may leave its answer unread.
    header_timeout: float = _setting("CHARIOT_HEADER_TIMEOUT", 10.0, minimum=0, above=True)
    body_timeout: float = _setting("CHARIOT_BODY_TIMEOUT", 10.0, minimum=0, above=True)
    min_body_rate: int = _setting("CHARIOT_MIN_BODY_RATE", 1, minimum=0)
    # Batching across requests (off at 1): most images gathered into one predict, and the longest a request waits
    # for others to join it, in milliseconds.
    max_batch_size: int = _setting("CHARIOT_MAX_BATCH_SIZE", 1)
    max_batch_wait_ms: float = _setting("CHARIOT_MAX_BATCH_WAIT_MS", 5.0, minimum=0, above=True, unit="milliseconds")
    # Seconds in-flight gRPC calls get to finish on SIGTERM.
    grpc_grace: float = _setting("CHARIOT_GRPC_GRACE", 30.0, minimum=0)
    # gRPC: most calls served at once, until their answer is sent (health and metadata calls aside; more get
    # RESOURCE_EXHAUSTED), and seconds a call's request message may take to arrive.
    grpc_max_calls: int = _setting("CHARIOT_GRPC_MAX_CALLS", 64)
    grpc_read_timeout: float = _setting("CHARIOT_GRPC_READ_TIMEOUT", 10.0, minimum=0, above=True)

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
