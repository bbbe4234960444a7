"""Canaries for the parts of uvicorn's httptools protocol that chariot_support.seams.uvicorn relies on. Each drives
uvicorn's own protocol over a stand-in transport and, on a uvicorn where an assumption no longer holds, says in
plain words what changed. Then the engine's protocol over the same transport, with its deadlines shortened."""

import ast
import asyncio
import json
import sys
from pathlib import Path

import httptools
import pytest
from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from chariot_support.seams import uvicorn as connections
from chariot_support.seams.uvicorn import IdleLimitedProtocol
from chariot_support.settings import EngineSettings


class Transport(asyncio.Transport):
    """What a protocol writes, and whether it closed, aborted or paused reading."""

    def __init__(self):
        super().__init__()
        self.written = bytearray()
        self.closed = self.aborted = self.reading_paused = False

    def write(self, data) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        self.reading_paused = False

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 40000)}.get(name, default)


class Recorder(HttpToolsProtocol):
    """uvicorn's protocol, noting which parser callbacks it got."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def on_message_begin(self):
        self.calls.append("begin")
        super().on_message_begin()

    def on_headers_complete(self):
        self.calls.append("headers")
        self.target = self.url
        super().on_headers_complete()

    def on_body(self, body):
        self.calls.append("body")
        super().on_body(body)

    def on_message_complete(self):
        self.calls.append("complete")
        super().on_message_complete()

    def on_response_complete(self):
        self.calls.append("response")
        super().on_response_complete()


def serve(app, kind=Recorder, state: ServerState | None = None, **options):
    """A protocol of `kind` for `app` on a new stand-in transport, inside the running event loop."""
    config = Config(app=app, log_config=None, **options)
    config.load()
    protocol = kind(config=config, server_state=state or ServerState(), app_state={})
    protocol.connection_made(Transport())
    return protocol


async def answer(scope, receive, send):
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def never_read(scope, receive, send):
    await asyncio.sleep(3600)


def run(test):
    return asyncio.run(test())


def test_connections_are_the_server_states_set_joined_and_left_by_the_protocol():
    async def check():
        state = ServerState()
        protocol = serve(answer, state=state)
        assert protocol.connections is state.connections and protocol.server_state is state, (
            "uvicorn's protocol no longer keeps the server's open connections as `connections` (server_state's set):"
            " the connection table cannot count or close them"
        )
        assert protocol in state.connections, "uvicorn's connection_made no longer adds the protocol to `connections`"
        protocol.connection_lost(None)
        assert protocol not in state.connections, "uvicorn's connection_lost no longer removes it from `connections`"

    run(check)


def test_the_parser_calls_back_at_a_heads_first_byte_its_end_each_body_chunk_and_the_response():
    async def check():
        protocol = serve(answer)
        protocol.data_received(b"P")
        assert protocol.calls == ["begin"], (
            "uvicorn's httptools protocol no longer calls on_message_begin at a request's first byte: the head"
            f" deadline would not start (callbacks: {protocol.calls})"
        )
        protocol.data_received(b"OST /v2/health/live?x=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
        assert protocol.calls == ["begin", "headers", "body"], (
            "uvicorn's httptools protocol no longer calls on_headers_complete at a head's end and on_body per body"
            f" chunk: body deadlines would not start or count (callbacks: {protocol.calls})"
        )
        assert protocol.target == b"/v2/health/live?x=1", (
            "uvicorn's protocol no longer holds the request target in `url` when the head ends: health checks past"
            f" CHARIOT_MAX_CONNECTIONS requests in flight would not be told apart ({protocol.target!r})"
        )
        protocol.data_received(b"cd")
        await asyncio.sleep(0.01)
        assert protocol.calls == ["begin", "headers", "body", "body", "complete", "response"], (
            "uvicorn's httptools protocol no longer calls on_message_complete at a body's end and"
            f" on_response_complete after the answer (callbacks: {protocol.calls})"
        )
        assert protocol.transport.written.startswith(b"HTTP/1.1 200")

    run(check)


def test_keep_alive_is_a_timer_the_protocol_arms_and_any_data_cancels():
    async def check():
        protocol = serve(answer, timeout_keep_alive=7)
        assert protocol.timeout_keep_alive == 7, (
            "uvicorn's protocol no longer keeps its keep-alive as timeout_keep_alive"
        )
        protocol.timeout_keep_alive_task = protocol.loop.call_later(60, protocol.timeout_keep_alive_handler)
        protocol.data_received(b"G")
        assert protocol.timeout_keep_alive_task is None, (
            "uvicorn's data_received no longer cancels and clears timeout_keep_alive_task: the timer the engine arms"
            " for a new connection would close it mid-request"
        )
        protocol.timeout_keep_alive_handler()
        assert protocol.transport.closed, "uvicorn's timeout_keep_alive_handler no longer closes the connection"

    run(check)


def test_a_request_cycle_marked_disconnected_ends_the_apps_receive_and_writes_nothing_more():
    got = []

    scopes = []

    async def waits_for_body(scope, receive, send):
        scopes.append(scope)
        got.append(await receive())
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def check():
        protocol = serve(waits_for_body)
        protocol.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
        await asyncio.sleep(0.01)
        cycle = protocol.cycle
        assert scopes == [cycle.scope], "uvicorn's request cycle no longer holds the scope its app was called with"
        assert (cycle.response_started, cycle.response_complete, cycle.waiting_for_100_continue) == (
            False,
            False,
            False,
        ), "uvicorn's request cycle no longer says response_started / response_complete / waiting_for_100_continue"
        cycle.disconnected = True
        cycle.message_event.set()
        await asyncio.sleep(0.01)
        assert got == [{"type": "http.disconnect"}], (
            "setting disconnected and message_event on uvicorn's request cycle no longer gives the app's receive()"
            f" a disconnect ({got}): an app waiting for a cut-off body would wait for ever"
        )
        assert protocol.transport.written == b"", (
            "uvicorn's request cycle marked disconnected still writes what the app sends: it would follow the 408"
        )

    async def check_100_continue():
        protocol = serve(never_read)
        protocol.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n")
        assert protocol.cycle.waiting_for_100_continue, (
            "uvicorn's request cycle no longer says waiting_for_100_continue before it asks for the body: a client"
            " waiting to be asked would be cut for a slow body"
        )

    run(check)
    run(check_100_continue)


def test_flow_control_says_when_the_engine_holds_a_body_back_or_the_client_reads_nothing():
    async def check():
        protocol = serve(never_read)
        size = HIGH_WATER_LIMIT * 2
        protocol.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size)
        protocol.data_received(b"a" * (HIGH_WATER_LIMIT + 1))
        assert protocol.flow.read_paused and protocol.transport.reading_paused, (
            "uvicorn no longer pauses reading (flow.read_paused) once an unread body passes its buffer: a body the"
            " app has not asked for would count against the client's rate"
        )
        protocol.pause_writing()
        assert protocol.flow.write_paused, "uvicorn's flow control no longer says write_paused while writes are paused"
        protocol.resume_writing()
        assert not protocol.flow.write_paused, "uvicorn's flow control no longer clears write_paused on resume_writing"
        protocol.connection_lost(None)  # ends the app's task, whose 500 would otherwise wait for writes to resume

    run(check)


def test_requests_run_as_tasks_in_the_servers_set_and_get_the_app_the_protocol_holds_at_their_heads_end():
    release = asyncio.Event()

    async def holds(scope, receive, send):
        await release.wait()
        await answer(scope, receive, send)

    async def other(scope, receive, send):
        await send({"type": "http.response.start", "status": 418, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    async def check():
        state = ServerState()
        protocol = serve(holds, state=state)
        protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(0.01)
        assert protocol.tasks is state.tasks and len(state.tasks) == 1, (
            "uvicorn no longer keeps each running request's task in `tasks` (server_state's set): the engine counts"
            " requests in flight there"
        )
        release.set()
        await asyncio.sleep(0.01)
        assert not state.tasks, "uvicorn no longer takes a finished request's task out of `tasks`"
        swapped = serve(holds, state=state)
        swapped.app = other
        swapped.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(0.01)
        assert swapped.transport.written.startswith(b"HTTP/1.1 418"), (
            "uvicorn's on_headers_complete no longer starts the request with the protocol's `app`: requests past"
            " CHARIOT_MAX_CONNECTIONS in flight would reach the app instead of their 503"
        )

    run(check)


@pytest.fixture
def short_deadlines():
    """The engine's protocol, bound to deadlines of 50 ms for a head and for a body's window."""
    return IdleLimitedProtocol.bound(EngineSettings(header_timeout=0.05, body_timeout=0.05))


def test_a_body_the_engine_has_not_asked_for_is_not_cut_until_it_is_asked(short_deadlines):
    """With `Expect: 100-continue`, the client waits for the engine's go-ahead: windows that end before the app asks
    for the body do not count; once asked, a silent client gets its 408, and the app's receive() a disconnect."""
    asked = asyncio.Event()
    got = []

    async def reads_later(scope, receive, send):
        await asked.wait()
        got.append(await receive())
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def check():
        protocol = serve(reads_later, kind=short_deadlines)
        protocol.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n")
        await asyncio.sleep(0.2)  # four windows
        assert not protocol.transport.closed and protocol.transport.written == b""
        asked.set()
        await asyncio.sleep(0.2)
        written = bytes(protocol.transport.written)
        assert written.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 408 Request Timeout\r\n"), written
        error = json.loads(written.split(b"\r\n\r\n", 2)[2])["error"]  # nothing the app sent after it
        assert error.startswith("the request body came too slowly: 0 bytes in the last 0.05 s"), error
        assert protocol.transport.closed and got == [{"type": "http.disconnect"}]
        protocol.connection_lost(None)

    run(check)


def test_a_client_that_leaves_its_answer_unread_is_cut_after_the_body_timeout(short_deadlines):
    async def check():
        reading = serve(answer, kind=short_deadlines)
        reading.pause_writing()
        await asyncio.sleep(0.02)
        reading.resume_writing()  # it read some before the deadline
        unread = serve(answer, kind=short_deadlines)
        unread.pause_writing()
        await asyncio.sleep(0.2)
        assert unread.transport.aborted and unread not in unread.connections
        assert not reading.transport.closed and reading in reading.connections

    run(check)


def test_a_late_head_gets_408_and_is_counted_in_one_log_line_and_the_metrics(short_deadlines, monkeypatch, caplog):
    from prometheus_client import REGISTRY

    monkeypatch.setattr(connections, "LOG_EVERY", 0.1)
    connections.refused_connections()  # made, as the engine makes it on its first refusal
    counted = REGISTRY.get_sample_value("chariot_rest_refused_total", {"reason": "head_late"}) or 0

    async def check():
        state = ServerState()
        late = [serve(answer, kind=short_deadlines, state=state) for _ in range(3)]
        for protocol in late:
            protocol.data_received(b"GET / HTT")
        await asyncio.sleep(0.3)
        for protocol in late:
            head, _, body = bytes(protocol.transport.written).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408 Request Timeout\r\n") and b"connection: close" in head
            assert "CHARIOT_HEADER_TIMEOUT is 0.05 s" in json.loads(body)["error"]
            assert protocol.transport.closed and protocol not in protocol.connections

    with caplog.at_level("WARNING", logger="chariot_support"):
        run(check)
    lines = [r for r in caplog.records if "closed 3 connections" in r.getMessage()]
    assert len(lines) == 1 and lines[0].fields == {"closed_connections": {"head_late": 3}}, caplog.text
    assert REGISTRY.get_sample_value("chariot_rest_refused_total", {"reason": "head_late"}) == counted + 3


def test_the_engines_protocol_builds_on_uvicorns(short_deadlines):
    async def check():
        protocol = serve(answer, kind=short_deadlines)
        protocol.data_received(b"G")
        await asyncio.sleep(0)
        assert protocol._in_head and protocol._timer is not None, "a head's first byte no longer starts its deadline"
        protocol.data_received(b"ET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(0.01)
        assert protocol.transport.written.startswith(b"HTTP/1.1 200") and protocol._timer is None

    run(check)


class ParserErrors(HttpToolsProtocol):
    """uvicorn's protocol, noting each send_400_response and the error being handled when it was called."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.refusals = []

    def send_400_response(self, msg):
        self.refusals.append(sys.exc_info()[1])
        super().send_400_response(msg)


def test_bytes_that_are_not_http_reach_send_400_response_while_the_parsers_error_is_handled():
    async def check():
        for data in (b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nBad Header\r\n\r\n"):
            protocol = serve(answer, kind=ParserErrors)
            protocol.data_received(data)
            refusals = protocol.refusals
            assert len(refusals) == 1, (
                f"uvicorn's protocol no longer answers {data!r} through send_400_response ({len(refusals)} calls):"
                " the engine's JSON answer to a malformed request would not be written"
            )
            assert isinstance(refusals[0], httptools.HttpParserError), (
                "uvicorn no longer calls send_400_response while it handles httptools' HttpParserError: the engine's"
                f" answer would not name what was wrong (it saw {refusals[0]!r})"
            )

    run(check)


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"GARBAGE\r\n\r\n", "Invalid method encountered"),
        (b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", "Invalid header token"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n", "Invalid character in chunk size"),
    ],
)
def test_a_malformed_request_is_answered_with_the_engines_json_error(short_deadlines, data, reason):
    async def check():
        protocol = serve(answer, kind=short_deadlines)
        protocol.data_received(data)
        await asyncio.sleep(0.01)
        head, _, body = bytes(protocol.transport.written).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n"), head
        assert b"content-type: application/json" in head and b"connection: close" in head, head
        error = json.loads(body)["error"]
        assert error.startswith(f"the request is not valid HTTP/1.1 ({reason})"), error
        assert protocol.transport.closed and protocol not in protocol.connections

    run(check)


def uvicorn_uses() -> set[str]:
    """What the engine's protocol (seams/uvicorn.py) uses of uvicorn's HttpToolsProtocol: each method it overrides
    (`name()`), each attribute of uvicorn's it reads or sets on itself, and each attribute of uvicorn's objects it
    reads through those (`flow.read_paused`)."""

    async def made():  # uvicorn's protocol once it has read a request, with every attribute that sets
        protocol = serve(answer, kind=HttpToolsProtocol)
        protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(0.01)
        return protocol

    theirs = set(dir(HttpToolsProtocol)) | set(vars(asyncio.run(made())))
    tree = ast.parse(Path(connections.__file__).read_text())
    engine = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "IdleLimitedProtocol")
    used = {f"{n.name}()" for n in engine.body if isinstance(n, ast.FunctionDef) and n.name in theirs}
    for node in ast.walk(engine):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            if node.attr in theirs and not node.attr.startswith("__"):
                used.add(node.attr)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            inner = node.value
            if isinstance(inner.value, ast.Name) and inner.value.id == "self" and inner.attr in ("flow", "cycle"):
                used.add(f"{inner.attr}.{node.attr}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "cycle":
            used.add(f"cycle.{node.attr}")  # `cycle = self.cycle`, then read
    return used - {f"{n}()" for n in ("__init__",)}


def test_every_use_of_uvicorns_protocol_has_a_canary():
    """A part of uvicorn's protocol the engine's starts to use fails here until a canary for it is named in
    UVICORN_CANARIES; one it stops using fails until its entry goes."""
    used = uvicorn_uses()
    missing = sorted(used - set(UVICORN_CANARIES))
    assert not missing, f"seams/uvicorn.py uses these without a canary: {missing}; add one each to UVICORN_CANARIES"
    stale = sorted(set(UVICORN_CANARIES) - used)
    assert not stale, f"UVICORN_CANARIES lists what seams/uvicorn.py no longer uses: {stale}; take them out"
    tests = {name for name, value in globals().items() if name.startswith("test_") and callable(value)}
    for name, canaries in UVICORN_CANARIES.items():
        for canary in canaries:
            assert canary.__name__ in tests, f"the canary for {name}, {canary.__name__}, is not a test here"


# Each part of uvicorn's protocol the engine's relies on, and the canaries that check it still holds.
_PARSER = (test_the_parser_calls_back_at_a_heads_first_byte_its_end_each_body_chunk_and_the_response,)
_KEEP_ALIVE = (test_keep_alive_is_a_timer_the_protocol_arms_and_any_data_cancels,)
_CONNECTIONS = (test_connections_are_the_server_states_set_joined_and_left_by_the_protocol,)
_CYCLE = (test_a_request_cycle_marked_disconnected_ends_the_apps_receive_and_writes_nothing_more,)
_FLOW = (test_flow_control_says_when_the_engine_holds_a_body_back_or_the_client_reads_nothing,)
_TASKS = (test_requests_run_as_tasks_in_the_servers_set_and_get_the_app_the_protocol_holds_at_their_heads_end,)
_ENGINE = (test_the_engines_protocol_builds_on_uvicorns,)
_NOT_HTTP = (test_bytes_that_are_not_http_reach_send_400_response_while_the_parsers_error_is_handled,)
UVICORN_CANARIES = {
    "connection_made()": (*_CONNECTIONS, *_KEEP_ALIVE),
    "connection_lost()": _CONNECTIONS,
    "data_received()": (*_PARSER, *_ENGINE),
    "on_message_begin()": _PARSER,
    "on_headers_complete()": (*_PARSER, *_TASKS),
    "on_body()": _PARSER,
    "on_response_complete()": _PARSER,
    "loop": (*_KEEP_ALIVE, *_ENGINE),
    "transport": _ENGINE,
    "server_state": _CONNECTIONS,
    "connections": _CONNECTIONS,
    "tasks": _TASKS,
    "app": _TASKS,
    "url": _PARSER,
    "cycle": _CYCLE,
    "flow": _FLOW,
    "timeout_keep_alive": _KEEP_ALIVE,
    "timeout_keep_alive_task": _KEEP_ALIVE,
    "timeout_keep_alive_handler": _KEEP_ALIVE,
    "flow.read_paused": _FLOW,
    "flow.write_paused": _FLOW,
    "on_message_complete()": _PARSER,
    "pause_writing()": (*_FLOW, test_a_client_that_leaves_its_answer_unread_is_cut_after_the_body_timeout),
    "resume_writing()": _FLOW,
    "send_400_response()": _NOT_HTTP,
    "cycle.waiting_for_100_continue": _CYCLE,
    "cycle.response_complete": _CYCLE,
    "cycle.response_started": _CYCLE,
    "cycle.disconnected": _CYCLE,
    "cycle.message_event": _CYCLE,
    "cycle.scope": _CYCLE,
}
