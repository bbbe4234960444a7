"""The engine's settings are one typed object read once (their page, docs/settings.md, is held to it in
test_reference.py); MLSERVER_HOST keeps every port on loopback, and CHARIOT_PAGE=0 takes GET / away and nothing else,
as that page says."""

import asyncio
import json
import re
from pathlib import Path

import pytest
from faulty_engine.model import FaultyModel

from chariot_support.server.server import build_server
from chariot_support.settings import EngineSettings


def test_the_engine_is_built_from_the_settings_it_was_handed_whatever_the_environment_says(
    monkeypatch, released_metrics
):
    """The engine reads its settings once, where it starts (server/server.py), and hands that object to every part:
    a part that read the environment again would serve by other settings than the ones the engine logged."""
    handed = EngineSettings.from_env(
        {
            "CHARIOT_MODEL_VERSION": "4",
            "CHARIOT_MAX_INPUTS": "7",
            "CHARIOT_BODY_BUDGET_MB": "300",
            "CHARIOT_GRPC_MAX_CALLS": "5",
            "CHARIOT_GRPC_READ_TIMEOUT": "3",
        }
    )
    for name, value in {
        "CHARIOT_MODEL_VERSION": "9",
        "CHARIOT_MAX_INPUTS": "2",
        "CHARIOT_BODY_BUDGET_MB": "900",
        "CHARIOT_GRPC_MAX_CALLS": "50",
        "CHARIOT_GRPC_READ_TIMEOUT": "30",
    }.items():
        monkeypatch.setenv(name, value)

    async def build():  # on an event loop, as the engine builds its server: MLServer sets signal handlers on it
        return build_server(FaultyModel, "faulty", handed)

    server = asyncio.run(build())
    assert server.engine is handed
    # The runtime gets them with the model's settings, in this process or a parallel worker.
    assert EngineSettings.from_json(server.model.parameters.extra["engine_settings"]) == handed
    assert server.model.versions == ["4"]
    assert server.body_budget.capacity == 300 << 20
    limits, _ = server.grpc_limits(server.settings)
    assert (limits.max_calls, limits.read_timeout) == (5, 3.0)


def test_defaults_and_values_read_from_the_environment():
    defaults = EngineSettings.from_env({})
    assert defaults.predict_timeout == 60.0 and defaults.repository_api is False and defaults.threads >= 1
    # The slow-client tests run with shorter read deadlines; these are the ones an engine starts with.
    assert (defaults.header_timeout, defaults.body_timeout, defaults.min_body_rate) == (10.0, 10.0, 1)
    chosen = EngineSettings.from_env(
        {"CHARIOT_PREDICT_TIMEOUT": "2.5", "CHARIOT_REPOSITORY_API": "1", "CHARIOT_THREADS": "3", "MODEL_DIR": "/m"}
    )
    assert (chosen.predict_timeout, chosen.repository_api, chosen.threads, chosen.model_dir) == (
        2.5,
        True,
        3,
        Path("/m"),
    )


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("CHARIOT_THREADS", "many", "CHARIOT_THREADS must be a whole number, at least 0, got 'many'"),
        ("CHARIOT_THREADS", "-1", "CHARIOT_THREADS must be a whole number, at least 0, got '-1'"),
        ("CHARIOT_MAX_INPUTS", "many", "CHARIOT_MAX_INPUTS must be a whole number"),
        (
            "CHARIOT_MAX_BATCH_WAIT_MS",
            "0",
            "CHARIOT_MAX_BATCH_WAIT_MS must be a positive number of milliseconds, got '0'",
        ),
        ("CHARIOT_REPOSITORY_API", "ture", "CHARIOT_REPOSITORY_API must be one of 1, true, yes, on, 0, false, no, off"),
        ("CHARIOT_PREDICT_INLINE", "enabled", "CHARIOT_PREDICT_INLINE must be one of 1, true, yes, on, 0, false, no"),
        ("CHARIOT_PREDICT_TIMEOUT", "0", "CHARIOT_PREDICT_TIMEOUT must be a positive number of seconds, got '0'"),
        ("CHARIOT_PREDICT_TIMEOUT", "inf", "CHARIOT_PREDICT_TIMEOUT must be a positive number of seconds"),
        ("CHARIOT_PREDICT_TIMEOUT", "soon", "CHARIOT_PREDICT_TIMEOUT must be a positive number of seconds, got 'soon'"),
        ("CHARIOT_GRPC_GRACE", "-1", "CHARIOT_GRPC_GRACE must be a number of seconds, at least 0, got '-1'"),
        ("CHARIOT_INFERENCE_PROTOCOL", "v3", "must be one of auto, chariot-v2-kserve, chariot-v2, got 'v3'"),
    ],
)
def test_a_value_that_cannot_be_used_names_the_variable(name, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        EngineSettings.from_env({name: value})


def test_the_defaults_written_out_are_accepted():
    """Every default, set explicitly, reads back as the default: CHARIOT_THREADS=0 means one per CPU."""
    explicit = {name: ("off" if value is False else str(value)) for name, value in EngineSettings.variables().items()}
    assert EngineSettings.from_env(explicit) == EngineSettings.from_env({})


@pytest.mark.parametrize("word, value", [("off", False), ("No", False), ("0", False), ("TRUE", True), ("on", True)])
def test_booleans_take_the_usual_words(word, value):
    assert EngineSettings.from_env({"CHARIOT_API_DOCS": word}).api_docs is value


def listening(port: int) -> set[str]:
    """The addresses sockets listen on at `port`, as the kernel lists them (/proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def test_mlserver_host_keeps_rest_grpc_and_metrics_on_loopback(demo_engine):
    """Started with MLSERVER_HOST=127.0.0.1 (as every test engine is), the engine listens on loopback alone on all
    three ports: 127.0.0.1, or its IPv4-mapped IPv6 form for gRPC."""
    engine = demo_engine("Object Detection")
    loopback = {"0100007F", "0000000000000000FFFF00000100007F"}
    for port in (engine.http_port, engine.grpc_port, engine.metrics_port):
        assert listening(port) and listening(port) <= loopback, f"port {port} listens on {listening(port)}"


def test_with_the_page_off_get_root_is_a_404_and_every_other_route_is_the_same(released_metrics):
    """CHARIOT_PAGE=0 takes the page at GET / away (tests/support/test_page.py tries it in a browser) and nothing else."""

    async def routes(page: bool) -> tuple[set, int, bytes]:
        # MLServer's REST app, with the engine's routes (test_internals.py holds MLServer to keeping it there).
        app = build_server(FaultyModel, "faulty", EngineSettings(page=page))._rest_server._app
        found = {(getattr(r, "path", ""), frozenset(getattr(r, "methods", None) or ())) for r in app.router.routes}
        answered: dict = {}

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            answered.setdefault("status", message.get("status"))
            answered["body"] = answered.get("body", b"") + message.get("body", b"")

        request = {"method": "GET", "path": "/", "raw_path": b"/", "query_string": b"", "headers": [], "root_path": ""}
        connection = {"type": "http", "http_version": "1.1", "scheme": "http", "client": ("127.0.0.1", 1)}
        await app({**request, **connection, "server": ("127.0.0.1", 80)}, receive, send)
        return found, answered["status"], answered["body"]

    on, on_status, _ = asyncio.run(routes(True))
    released_metrics()  # MLServer's metrics, registered once a process
    off, off_status, off_body = asyncio.run(routes(False))
    assert on - off == {("/", frozenset({"GET", "HEAD"}))} and off < on
    assert (on_status, off_status, json.loads(off_body)) == (200, 404, {"error": "no route for GET /"})
