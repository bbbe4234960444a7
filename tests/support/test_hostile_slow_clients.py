"""Slow clients: heads and bodies that trickle in get a 408 within their read deadline, and a connection table full
of them makes room for a health probe rather than refusing it. With the engine's default settings but for the read
deadlines, which are shorter here so that the tests do not wait out the default 10 s (test_settings.py checks the
defaults)."""

import json
import selectors
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
from hostile import HERE, HealthProbe, RSSGuard, healthy_and_reset, peak_rss_mib, rss_mib, wait_until

from chariot_support.dev.testing import chariot_request, image_input, run_engine
from chariot_support.settings import EngineSettings

pytestmark = pytest.mark.hostile

DEFAULTS = EngineSettings()
# Seconds of CHARIOT_HEADER_TIMEOUT and CHARIOT_BODY_TIMEOUT for the trickling clients. The body's stays past
# CHARIOT_ADMISSION_WAIT (2 s), as the default does: bodies waiting for room in the body budget get their 503 first.
DEADLINES = {"head": 2, "body": 4}
SHORT_DEADLINES = {"CHARIOT_HEADER_TIMEOUT": str(DEADLINES["head"]), "CHARIOT_BODY_TIMEOUT": str(DEADLINES["body"])}
SLACK = 3.0  # seconds a deadline may be late by on a loaded 2-core machine
RSS_LIMIT_MIB = 1536
INFER = "/v2/models/m-faulty/infer"
PIXELS = np.zeros((32, 48, 3), np.uint8)
# The head of a 1 MB inference request, whose body is then sent a byte at a time.
TRICKLED_BODY_HEAD = (
    f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {1 << 20}\r\n\r\n"
).encode()


def connect_all(engine, count: int, first_bytes: bytes) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", engine.http_port), timeout=5)
        sock.sendall(first_bytes)
        sockets.append(sock)
    return sockets


def answers_by(sockets: list[socket.socket], deadline: float, trickle: float | None = None) -> dict:
    """Read every socket until the engine closes it or `deadline` (monotonic) passes, sending one more body byte
    to each open one every `trickle` seconds; each socket's answer and the time it was closed."""
    selector = selectors.DefaultSelector()
    answers = {sock: [b"", None] for sock in sockets}
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    next_byte = time.monotonic() + (trickle or 0)
    while answers and time.monotonic() < deadline and selector.get_map():
        if trickle and time.monotonic() >= next_byte:
            for key in list(selector.get_map().values()):
                try:
                    key.fileobj.send(b"{")
                except OSError:
                    pass
            next_byte += trickle
        for key, _ in selector.select(timeout=0.2):
            try:
                chunk = key.fileobj.recv(65536)
            except OSError:
                chunk = b""
            answers[key.fileobj][0] += chunk
            if not chunk:
                answers[key.fileobj][1] = time.monotonic()
                selector.unregister(key.fileobj)
    selector.close()
    return answers


def status_and_error(answer: bytes) -> tuple[int, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]


@pytest.fixture(scope="module")
def short_deadlines():
    """An engine with default settings but SHORT_DEADLINES, shared by the trickling clients' tests."""
    with run_engine("faulty_engine", src=HERE, env=SHORT_DEADLINES) as running:
        yield running


@pytest.fixture(scope="module")
def four_connections():
    """An engine of four connections at most and four threads (so that four slow predicts run at once rather than
    two after two), shared by the tests of a full connection table."""
    env = {
        "CHARIOT_MAX_CONNECTIONS": "4",
        "FAULTY_THREAD_SAFE": "1",
        "CHARIOT_THREADS": "4",
        "CHARIOT_KEEP_ALIVE": "30",
    }
    with run_engine("faulty_engine", src=HERE, env=env) as running:
        yield running


def slow_clients(engine, first_bytes: bytes, deadline: float, trickle: float | None = None) -> list[tuple[int, str]]:
    """CHARIOT_MAX_CONNECTIONS connections send `first_bytes` (then a byte every `trickle` seconds) to an engine
    with default settings but SHORT_DEADLINES: each is answered and closed within `deadline` seconds, with a 408 or
    a 503 that says why (closed sooner to make room for a health probe, or a body past the body budget);
    health from a new connection answers in under a second throughout; RSS stays under RSS_LIMIT_MIB and comes back;
    the engine serves afterwards. Returns the 408s' (status, error)."""
    healthy_and_reset(engine)
    with RSSGuard(engine.process, RSS_LIMIT_MIB) as guard:
        before = rss_mib(engine.process.pid)
        with HealthProbe(engine) as probe:
            started = time.monotonic()
            sockets = connect_all(engine, DEFAULTS.max_connections, first_bytes)
            answers = answers_by(sockets, started + deadline + SLACK, trickle)
            for sock in sockets:
                sock.close()
        late = sum(closed is None for _, closed in answers.values())
        assert not late, f"{late} connections still open {deadline + SLACK} s after their first bytes"
        refused = [status_and_error(answer) for answer, _ in answers.values()]
        # 503s: closed to make room, or (a body) past the memory budget for bodies in flight
        unavailable = [error for status, error in refused if status == 503]
        assert all("CHARIOT_MAX_CONNECTIONS" in e or "CHARIOT_BODY_BUDGET_MB" in e for e in unavailable), unavailable
        assert not probe.failures and probe.worst < 1.0, (probe.worst, probe.failures[:5])
        assert not guard.tripped and peak_rss_mib(engine.process.pid) < RSS_LIMIT_MIB
        assert wait_until(lambda: rss_mib(engine.process.pid) < before + 64, 10), (before, rss_mib(engine.process.pid))
        body = json.dumps(chariot_request(image_input("image", PIXELS)))
        assert requests.post(engine.url + INFER, data=body, timeout=10).status_code == 200
    timed_out = [each for each in refused if each[0] != 503]
    assert timed_out and {status for status, _ in timed_out} == {408}, refused[:3]
    return timed_out


def test_connections_that_send_one_byte_get_408_at_the_header_timeout_while_health_answers(short_deadlines):
    """512 connections (all CHARIOT_MAX_CONNECTIONS) send `G` and nothing more: 408 at CHARIOT_HEADER_TIMEOUT, and
    health answers throughout."""
    timed_out = slow_clients(short_deadlines, b"G", DEADLINES["head"])
    head = f"the request's head (request line and headers) did not arrive within {DEADLINES['head']} s"
    for _, error in timed_out:
        assert error.startswith(head), error
        assert "CHARIOT_HEADER_TIMEOUT" in error


def test_bodies_sent_one_byte_a_second_get_408_at_the_body_timeout_while_health_answers(short_deadlines):
    """512 connections send the head of a 1 MB inference request, then one body byte a second: 408 naming
    CHARIOT_MIN_BODY_RATE when the first CHARIOT_BODY_TIMEOUT window ends, and health answers throughout."""
    logged = len(short_deadlines.log())
    timed_out = slow_clients(short_deadlines, TRICKLED_BODY_HEAD, DEADLINES["body"], trickle=1.0)
    for _, error in timed_out:
        assert error.startswith("the request body came too slowly") and "CHARIOT_MIN_BODY_RATE" in error, error
    # Each cut request's log line says what its client was answered (written once it is answered: wait for them).

    def statuses() -> list:
        log = short_deadlines.log()[logged:]
        return [json.loads(line).get("status") for line in log.splitlines() if '"method": "POST"' in line]

    wait_until(lambda: statuses().count(408) >= len(timed_out), 10)
    assert statuses().count(408) == len(timed_out) and 499 not in statuses(), statuses()[:10]


def test_a_body_that_keeps_the_minimum_rate_is_read_whole():
    """A client at twice CHARIOT_MIN_BODY_RATE, over more than two CHARIOT_BODY_TIMEOUT windows, is not cut."""
    env = {"CHARIOT_BODY_TIMEOUT": "1", "CHARIOT_MIN_BODY_RATE": "16"}
    body = json.dumps(chariot_request(image_input("image", PIXELS))).encode()
    body += b" " * ((80 << 10) - len(body))  # 80 KiB in 32 KiB/s steps: 2.5 s, over two windows
    with run_engine("faulty_engine", src=HERE, env=env) as engine:
        with socket.create_connection(("127.0.0.1", engine.http_port), timeout=10) as sock:
            sock.sendall(
                f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
            )
            for start in range(0, len(body), 8 << 10):
                sock.sendall(body[start : start + (8 << 10)])
                time.sleep(0.25)
            answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:300]


def test_a_full_table_closes_the_connection_idle_longest_never_a_request_in_flight(four_connections):
    """With CHARIOT_MAX_CONNECTIONS connections open, a new one closes the one idle longest; a request being
    predicted is never closed; when every connection has a request in flight, the new one is refused."""
    engine = healthy_and_reset(four_connections)
    # Each slow predict takes 2 s; the checks made while they run are over within a second.
    slow = json.dumps(chariot_request(image_input("image", PIXELS, fault="sleep", seconds=2)))
    with ThreadPoolExecutor(4) as pool:
        in_flight = pool.submit(requests.post, engine.url + INFER, data=slow, timeout=30)
        time.sleep(0.5)
        idle = connect_all(engine, 3, b"")
        time.sleep(0.2)
        assert requests.get(f"{engine.url}/v2/health/live", timeout=5).status_code == 200
        idle[0].settimeout(5)
        assert idle[0].recv(1) == b"", "the connection idle longest was not the one closed"
        idle[1].sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        idle[1].settimeout(5)
        assert idle[1].recv(65536).startswith(b"HTTP/1.1 200"), "a newer idle connection was closed instead"
        assert in_flight.result().status_code == 200

        busy = [pool.submit(requests.post, engine.url + INFER, data=slow, timeout=30) for _ in range(4)]
        for sock in idle:
            sock.close()
        time.sleep(0.5)
        try:
            refused = requests.get(f"{engine.url}/v2/health/live", timeout=5).status_code
        except requests.ConnectionError:
            refused = "closed"
        assert refused == "closed"
        assert [each.result().status_code for each in busy] == [200] * 4


def test_requests_past_the_cap_in_flight_get_a_503_that_says_so(four_connections):
    """Clients that leave leave their predicts running: past CHARIOT_MAX_CONNECTIONS requests in flight, a new
    request gets a JSON 503 with Retry-After (a health check is still answered), and is served once they end."""
    engine = healthy_and_reset(four_connections)
    slow = json.dumps(chariot_request(image_input("image", PIXELS, fault="sleep", seconds=3))).encode()
    head = f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(slow)}\r\n\r\n"
    for sock in connect_all(engine, 4, head.encode() + slow):
        sock.close()  # the client leaves; its predict runs on
    time.sleep(0.5)
    refused = requests.get(f"{engine.url}/v2/models/m-faulty", timeout=5)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1", refused.text
    assert "CHARIOT_MAX_CONNECTIONS" in refused.json()["error"]
    assert requests.get(f"{engine.url}/v2/health/live", timeout=5).status_code == 200
    assert wait_until(lambda: requests.get(f"{engine.url}/v2/models/m-faulty", timeout=5).status_code == 200, 15)
