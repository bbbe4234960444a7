"""The tables of the engine's reference pages that the code can write: the settings (docs/settings.md) from
EngineSettings and the MLServer settings the engine changes, the REST routes and gRPC methods (docs/protocol.md)
from the server the engine builds.

`python -m chariot_support.dev.reference` writes each table into its page, between the page's markers;
`--check` changes nothing and exits 1 naming the tables that are out of date. The template's tests run the check.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from chariot_support.settings import FALSE, TRUE, EngineSettings

DOCS = Path(__file__).resolve().parents[3] / "docs"  # the engine's docs/, beside src/
COMMAND = "python -m chariot_support.dev.reference"

# MLServer's settings that an engine gives another default, reads, or documents: (variable, default where the engine
# sets none, what it takes, what it does). The defaults the engine sets come from server.ENGINE_DEFAULTS.
MLSERVER = (
    ("MLSERVER_HOST", None, "an IP address", "the address REST, gRPC and metrics listen on: `0.0.0.0` is every"
     " interface (gRPC then listens on IPv6 too); `127.0.0.1` keeps the engine on loopback"),
    ("MLSERVER_HTTP_PORT", None, "a port", "the REST port, where Chariot sends inference"),
    ("MLSERVER_GRPC_PORT", None, "a port", "the gRPC port"),
    ("MLSERVER_METRICS_PORT", None, "a port", "the Prometheus metrics port (`GET /metrics`)"),
    ("MLSERVER_PARALLEL_WORKERS", None, "a whole number, at least 0", "worker processes for predict, each loading"
     " and warming the model (with several GPUs, each gets its share: see [GPUs](gpus.md)); `0` runs predict in"
     " this process's threads"),
    ("MLSERVER_DEBUG", None, "`true` or `false`", "MLServer's access log and debug logging, off for throughput"),
    ("MLSERVER_GZIP_ENABLED", None, "`true` or `false`", "gzip replies (inference too) for clients that accept it;"
     " off because compressing costs far more CPU than it saves on a LAN"),
    ("MLSERVER_GRPC_MAX_MESSAGE_LENGTH", "`CHARIOT_MAX_REQUEST_MB`", "bytes", "bytes a gRPC message may hold, when"
     " gRPC needs another limit than REST bodies"),
    ("MLSERVER_LOGGING_SETTINGS", "(unset: the engine's JSON lines)", "a file", "a `logging.config.dictConfig` file"
     " (JSON) to log your own way instead, in every process; `print`, stderr and what native code writes are then"
     " left alone (see [Logs](logs.md))"),
    ("MLSERVER_CORS_SETTINGS", "(unset)", "JSON", "CORS for browser clients, e.g."
     ' `{"allow_origins": ["https://app.example"]}`; applies to inference answers too'),
    ("MLSERVER_CACHE_ENABLED", "`false`", "`false`", "`true` is refused at start-up: every request is answered by"
     " the model (put a cache in front of the engine if repeats are common)"),
)  # fmt: skip

# What each REST route is for; a route the engine serves without a line here fails the check.
ROUTES = {
    ("POST", "/v2/models/{model_name}/infer"): "Chariot inference: chariot-v2-kserve, the Open Inference Protocol's"
    " V2 JSON (and its binary tensor data); `…/infer/`, with the slash Chariot writes, is answered the same, with no"
    " redirect",
    ("POST", "/v2/models/{model_name}/versions/{model_version}/infer"): "the same, for the engine's version"
    " (`CHARIOT_MODEL_VERSION`); 404 for another",
    ("POST", "/infer"): "the same inference at the root, and [chariot-v2](#chariot-v2-at-infer), as Chariot's own"
    " engines serve them (`/infer/` too)",
    ("POST", "/v1/models/{path}"): "[KServe V1 and TensorFlow Serving](#kserve-v1-and-tensorflow-serving):"
    " `:predict`, `:explain`, `:classify`",
    ("GET", "/v2/health/live"): 'V2 liveness: 200 `{"live": true}` (KServe\'s clients read the body)',
    ("GET", "/v2/health/ready"): 'V2 readiness: 200 `{"ready": true}` once the model is loaded and warmed, 503 with'
    " `Retry-After` before",
    ("GET", "/ready"): 'readiness at the root: 200 `{"status": "ready"}`, 503 before',
    ("GET", "/v2/models/{model_name}/ready"): "model readiness: 200 with an empty body, 503 before",
    ("GET", "/v2/models/{model_name}/versions/{model_version}/ready"): "the same, for the engine's version",
    ("GET", "/v2"): "server metadata: name, version and the extensions served, and only those: `parameters`,"
    " `binary_tensor_data`, `statistics`, `model_configuration`, and `model_repository` with"
    " `CHARIOT_REPOSITORY_API` on",
    ("GET", "/v2/models/{model_name}"): "model metadata: platform `chariot-v2-kserve_<task>`, inputs and outputs",
    ("GET", "/v2/models/{model_name}/versions/{model_version}"): "the same, for the engine's version",
    ("GET", "/v2/models/stats"): "[Triton's statistics](stages.md#tritons-statistics) of every model served (an"
    " engine serves one) since the engine started: requests answered and failed, their queue and compute times,"
    " per batch size",
    ("GET", "/v2/models/{model_name}/stats"): "the same, for the model named",
    ("GET", "/v2/models/{model_name}/versions/{model_version}/stats"): "the same, for the engine's version",
    ("GET", "/v2/models/{model_name}/config"): "[Triton's model configuration](stages.md#tritons-model-configuration):"
    " inputs and outputs, `max_batch_size`, `dynamic_batching`, `instance_group`",
    ("GET", "/v2/models/{model_name}/versions/{model_version}/config"): "the same, for the engine's version",
    ("POST", "/v2/repository/index"): "the model repository: the model and its state",
    ("POST", "/v2/repository/models/{model_name}/load"): "reload the model: only with `CHARIOT_REPOSITORY_API`"
    " on, 403 otherwise",
    ("POST", "/v2/repository/models/{model_name}/unload"): "unload the model: only with `CHARIOT_REPOSITORY_API`"
    " on, 403 otherwise",
    ("POST", "/v2/models/{model_name}/infer_stream"): '501 `{"error"}`: the engine does not stream',
    ("POST", "/v2/models/{model_name}/versions/{model_version}/infer_stream"): "the same",
    ("GET", "/v1/models"): '[KServe V1](#kserve-v1-and-tensorflow-serving): `{"models": ["m-<id>"]}`',
    ("GET", "/v1/models/{path}"): "[KServe V1 and TensorFlow Serving](#kserve-v1-and-tensorflow-serving): a"
    " model's status and metadata",
    ("GET", "/"): "the [page to try the model](page.md) in a browser; with `CHARIOT_PAGE` off, a 404 as any unknown"
    " path",
    ("GET", "/metrics"): "Prometheus metrics, on the metrics port (see [Metrics](logs.md#metrics))",
}
# The inference routes, answered in front of MLServer's app (rest/inference.py), as their paths are written.
INFERENCE_ROUTES = (
    "/v2/models/{model_name}/infer",
    "/v2/models/{model_name}/versions/{model_version}/infer",
    "/infer",
    "/v1/models/{path}",
)
# What each gRPC method of `inference.GRPCInferenceService` does.
GRPC = {
    "ServerLive": "liveness, as `GET /v2/health/live`",
    "ServerReady": "readiness, as `GET /v2/health/ready`",
    "ModelReady": "model readiness, as `GET /v2/models/m-<id>/ready`",
    "ServerMetadata": "server metadata, as `GET /v2`",
    "ModelMetadata": "model metadata, as `GET /v2/models/m-<id>`",
    "ModelConfig": "Triton's model configuration, as `GET /v2/models/m-<id>/config`",
    "ModelStatistics": "Triton's statistics, as `GET /v2/models/m-<id>/stats` (every model's, as"
    " `GET /v2/models/stats`, when the name is empty)",
    "ModelInfer": "inference, as `POST /v2/models/m-<id>/infer` (see [Over gRPC](#over-grpc))",
    "ModelStreamInfer": "`UNIMPLEMENTED`: the engine does not stream",
    "RepositoryIndex": "the model repository, as `POST /v2/repository/index`",
    "RepositoryModelLoad": "reload the model: only with `CHARIOT_REPOSITORY_API` on",
    "RepositoryModelUnload": "unload the model: only with `CHARIOT_REPOSITORY_API` on",
}


def cell(text: str) -> str:
    """`text` as one cell of a GitHub and GitLab table: a pipe would end the cell."""
    return text.replace("|", "\\|")


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = [f"| {' | '.join(header)} |", f"| {' | '.join('---' for _ in header)} |"]
    lines += [f"| {' | '.join(cell(c) for c in row)} |" for row in rows]
    return "\n".join(lines)


def shown_default(default: Any) -> str:
    if isinstance(default, bool):
        return "on" if default else "off"
    if default == "":
        return "(unset)"
    if isinstance(default, float):
        return f"`{default:g}`"
    return f"`{default}`"


def allowed_values(metadata: dict, kind: type) -> str:
    if metadata["allowed"]:
        return metadata["allowed"]
    if kind is bool:
        return "on: " + ", ".join(f"`{w}`" for w in TRUE) + "; off: " + ", ".join(f"`{w}`" for w in FALSE)
    if metadata["choices"]:
        return ", ".join(f"`{c}`" for c in metadata["choices"])
    least = f"{metadata['minimum']:g}"
    if kind is float:
        return f"a number of {metadata['unit']}, {'more than' if metadata['above'] else 'at least'} {least}"
    return f"a whole number, at least {least}"


def settings_table() -> str:
    rows = []
    for each in fields(EngineSettings):
        metadata = dict(each.metadata)
        if not metadata["doc"]:
            raise ValueError(f"{metadata['env']} has no doc in settings.py: say there what it does")
        rows.append(
            (
                f"`{metadata['env']}`",
                shown_default(each.default),
                allowed_values(metadata, type(each.default)),
                metadata["doc"],
            )
        )
    return table(("Variable", "Default", "Takes", "What it does"), rows)


def mlserver_table() -> str:
    from chariot_support.server.server import ENGINE_DEFAULTS

    rows = []
    for name, default, takes, doc in MLSERVER:
        key = name.removeprefix("MLSERVER_").lower()
        if default is None:
            value = ENGINE_DEFAULTS[key]
            default = f"`{str(value).lower() if isinstance(value, bool) else value}`"
        rows.append((f"`{name}`", default, takes, doc))
    return table(("Variable", "Default in an engine", "Takes", "What it does"), rows)


@functools.cache
def served() -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[str]]:
    """(method, path) of each route of the REST port, of the metrics port, and the gRPC methods, as the engine builds
    them for the demo model."""
    from mlserver.grpc import dataplane_pb2

    from chariot_support.grpc.service import SERVICE, ChariotInferenceServicer
    from chariot_support.model.demo import DEMO_MODELS
    from chariot_support.model.tasks import TaskType
    from chariot_support.server.server import ChariotServer, engine_settings, model_settings

    class Recorded(ChariotServer):
        def install_routes(self, rest_app, metrics_app) -> None:
            super().install_routes(rest_app, metrics_app)
            self.apps = rest_app, metrics_app

    async def build() -> Recorded:  # on an event loop, as the engine builds its server: MLServer needs one
        engine = EngineSettings()
        model = model_settings(DEMO_MODELS[TaskType.OBJECT_DETECTION], "demo", engine)
        return Recorded(engine_settings(engine), model=model, engine=engine)

    server = asyncio.run(build())
    rest_app, metrics_app = server.apps

    def routes(app) -> list[tuple[str, str]]:
        found = []
        for route in app.router.routes:
            path = route.path.replace("{path:path}", "{path}")
            found += [(method, path) for method in sorted(route.methods or ()) if method != "HEAD"]
        return found

    rest = [("POST", path) for path in INFERENCE_ROUTES] + routes(rest_app)
    # gRPC: every method of MLServer's V2 service (its servicer is registered for each), then each call of the
    # engine's servicer that a handler the engine adds beside it serves (Triton's extensions), asked of those
    # handlers as gRPC asks them.
    methods = [method.name for method in dataplane_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods]
    handlers = server.grpc_handlers()
    for name in vars(ChariotInferenceServicer):
        call = SimpleNamespace(method=f"/{SERVICE}/{name}", invocation_metadata=())
        if name not in methods and any(handler.service(call) is not None for handler in handlers):
            methods.append(name)
    return rest, routes(metrics_app), methods


def routes_table(rest: list[tuple[str, str]], metrics: list[tuple[str, str]]) -> str:
    missing = [f"{m} {p}" for m, p in rest + metrics if (m, p) not in ROUTES]
    if missing:
        raise ValueError(f"say what these routes are for in dev/reference.py's ROUTES: {', '.join(missing)}")
    rows = [(method, f"`{path}`", "REST", ROUTES[method, path]) for method, path in rest]
    rows += [(method, f"`{path}`", "metrics", ROUTES[method, path]) for method, path in metrics]
    return table(("Method", "Path", "Port", "What"), rows)


def grpc_table(methods: list[str]) -> str:
    missing = [m for m in methods if m not in GRPC]
    if missing:
        raise ValueError(f"say what these gRPC methods do in dev/reference.py's GRPC: {', '.join(missing)}")
    return table(("Method", "What"), [(f"`{m}`", GRPC[m]) for m in methods])


def tables() -> dict[str, dict[str, Callable[[], str]]]:
    """Each page's generated tables, by marker name."""

    def routes() -> str:
        rest, metrics, _ = served()
        return routes_table(rest, metrics)

    return {
        "settings.md": {"settings": settings_table, "mlserver": mlserver_table},
        "protocol.md": {"routes": routes, "grpc": lambda: grpc_table(served()[2])},
    }


def begin(name: str) -> str:
    return f"<!-- {name}: generated from the code by `{COMMAND}`; edit the code, not this table -->"


def end(name: str) -> str:
    return f"<!-- end of {name} -->"


def rewrite(text: str, name: str, generated: str) -> str:
    """`text` with the table between `name`'s markers replaced by `generated`."""
    opening, closing = begin(name), end(name)
    if text.count(opening) != 1 or text.count(closing) != 1:
        raise ValueError(f"the page needs the markers {opening!r} and {closing!r}, once each")
    before, rest = text.split(opening)
    _, after = rest.split(closing)
    return f"{before}{opening}\n{generated}\n{closing}{after}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=DOCS, help=f"the docs folder (default {DOCS})")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is out of date")
    args = parser.parse_args(argv)
    stale = []
    for page, generators in tables().items():
        path = args.docs / page
        text = new = path.read_text()
        for name, generate in generators.items():
            updated = rewrite(new, name, generate())
            stale += [f"{page} ({name})"] * (updated != new)
            new = updated
        if new != text and not args.check:
            path.write_text(new)
    if stale:
        print(("out of date: " if args.check else "rewrote ") + ", ".join(stale), file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
