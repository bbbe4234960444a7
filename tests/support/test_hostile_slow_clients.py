"""Slow clients: heads and bodies that trickle in get a 408 within their read deadline, and a connection table full
of them makes room for a health probe rather than refusing it. With the engine's default settings."""

import json
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import requests
from hostile import HERE, RSSGuard, peak_rss_mib, rss_mib, wait_until

from chariot_support.settings import EngineSettings
from chariot_support.testing import chariot_request, image_input, run_engine

DEFAULTS = EngineSettings()
SLACK = 3.0  # seconds a deadline may be late by on a loaded 2-core machine
RSS_LIMIT_MIB = 1536
INFER = "/v2/models/m-faulty/infer"
PIXELS = np.zeros((32, 48, 3), np.uint8)


class HealthProbe:
    """Asks /v2/health/live from a new connection every 0.1 s, as a liveness probe would, and keeps each answer's
    status and seconds."""

    def __init__(self, engine):
        self.url = f"{engine.url}/v2/health/live"
        self.answers: list[tuple[int, float]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._probe, daemon=True)

    def _probe(self) -> None:
        while not self._done.is_set():
            started = time.monotonic()
            try:
                with requests.Session() as session:  # a new connection for each probe
                    status = session.get(self.url, timeout=5).status_code
            except requests.RequestException as error:
                status = type(error).__name__
            self.answers.append((status, time.monotonic() - started))
            self._done.wait(0.1)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()

    def assert_always_answered(self) -> None:
        assert len(self.answers) >= 10, self.answers
        failed = [answer for answer in self.answers if answer[0] != 200]
        slowest = max(seconds for _, seconds in self.answers)
        assert not failed, f"{len(failed)} of {len(self.answers)} health probes failed: {failed[:5]}"
        assert slowest < 1.0, f"a health probe took {slowest:.2f} s"


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


def test_connections_that_send_one_byte_get_408_at_the_header_timeout_while_health_answers():
    """512 connections (all CHARIOT_MAX_CONNECTIONS) send `G` and nothing more. Each is answered and closed by the
    default CHARIOT_HEADER_TIMEOUT: 408 at the deadline, or 503 if closed sooner to let a health probe in; every
    probe from a new connection answers 200 in under a second throughout."""
    assert DEFAULTS.header_timeout <= 10
    with run_engine("faulty_engine", src=HERE) as engine, RSSGuard(engine.process, RSS_LIMIT_MIB) as guard:
        before = rss_mib(engine.process.pid)
        with HealthProbe(engine) as probe:
            started = time.monotonic()
            sockets = connect_all(engine, DEFAULTS.max_connections, b"G")
            answers = answers_by(sockets, started + DEFAULTS.header_timeout + SLACK)
            for sock in sockets:
                sock.close()
        late = sum(closed is None for _, closed in answers.values())
        assert not late, f"{late} connections still open {DEFAULTS.header_timeout + SLACK} s after their byte"
        statuses = {}
        for answer, _ in answers.values():
            status, error = status_and_error(answer)
            statuses[status] = statuses.get(status, 0) + 1
            assert status in (408, 503), error
            if status == 408:
                assert error.startswith("the request's head (request line and headers) did not arrive within 10 s")
                assert "CHARIOT_HEADER_TIMEOUT" in error
            else:
                assert "CHARIOT_MAX_CONNECTIONS" in error
        assert statuses.get(408, 0) > 0 and sum(statuses.values()) == DEFAULTS.max_connections, statuses
        probe.assert_always_answered()
        assert not guard.tripped and peak_rss_mib(engine.process.pid) < RSS_LIMIT_MIB
        assert wait_until(lambda: rss_mib(engine.process.pid) < before + 64, 10), (before, rss_mib(engine.process.pid))
        body = json.dumps(chariot_request(image_input("image", PIXELS)))
        assert requests.post(engine.url + INFER, data=body, timeout=10).status_code == 200


def test_bodies_sent_one_byte_every_3_s_get_408_at_the_body_timeout_while_health_answers():
    """512 connections send the head of a 1 MB inference request, then one body byte every 3 s: each gets a 408
    naming CHARIOT_MIN_BODY_RATE when its first CHARIOT_BODY_TIMEOUT window ends (or a 503 if closed sooner to
    let a health probe in), and health answers from a new connection throughout."""
    head = f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {1 << 20}\r\n\r\n"
    with run_engine("faulty_engine", src=HERE) as engine, RSSGuard(engine.process, RSS_LIMIT_MIB) as guard:
        before = rss_mib(engine.process.pid)
        with HealthProbe(engine) as probe:
            started = time.monotonic()
            sockets = connect_all(engine, DEFAULTS.max_connections, head.encode())
            answers = answers_by(sockets, started + DEFAULTS.body_timeout + SLACK, trickle=3.0)
            for sock in sockets:
                sock.close()
        late = sum(closed is None for _, closed in answers.values())
        assert not late, f"{late} connections still open {DEFAULTS.body_timeout + SLACK} s after their head"
        statuses = {}
        for answer, _ in answers.values():
            status, error = status_and_error(answer)
            statuses[status] = statuses.get(status, 0) + 1
            assert status in (408, 503), error
            if status == 408:
                assert error.startswith("the request body came too slowly") and "CHARIOT_MIN_BODY_RATE" in error
        assert statuses.get(408, 0) > 0, statuses
        probe.assert_always_answered()
        assert not guard.tripped and peak_rss_mib(engine.process.pid) < RSS_LIMIT_MIB
        assert wait_until(lambda: rss_mib(engine.process.pid) < before + 64, 10), (before, rss_mib(engine.process.pid))
        body = json.dumps(chariot_request(image_input("image", PIXELS)))
        assert requests.post(engine.url + INFER, data=body, timeout=10).status_code == 200


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


def test_a_full_table_closes_the_connection_idle_longest_never_a_request_in_flight():
    """With CHARIOT_MAX_CONNECTIONS connections open, a new one closes the one idle longest; a request being
    predicted is never closed; when every connection has a request in flight, the new one is refused."""
    env = {"CHARIOT_MAX_CONNECTIONS": "4", "FAULTY_THREAD_SAFE": "1", "CHARIOT_KEEP_ALIVE": "30"}
    slow = json.dumps(chariot_request(image_input("image", PIXELS, fault="sleep", seconds=3)))
    with run_engine("faulty_engine", src=HERE, env=env) as engine, ThreadPoolExecutor(4) as pool:
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
        time.sleep(1.0)
        try:
            refused = requests.get(f"{engine.url}/v2/health/live", timeout=5).status_code
        except requests.ConnectionError:
            refused = "closed"
        assert refused == "closed"
        assert [each.result().status_code for each in busy] == [200] * 4
