"""Connections: idle sockets are closed and cannot use up the file descriptors, ambiguous framing is refused,
and an error message does not send back the request it quotes."""

import json
import resource
import socket
import time

import numpy as np
import pytest
import requests
from hostile import HERE, healthy_and_reset, rss_mib

from chariot_support.dev.testing import chariot_request, image_input, run_engine

pytestmark = pytest.mark.hostile

PIXELS = np.zeros((32, 48, 3), np.uint8)


@pytest.fixture
def engine(faulty_engine):
    """The session's faulty engine with default settings, checked live before each test sends it its attack."""
    return healthy_and_reset(faulty_engine)


def few_files():
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_idle_connections_cannot_lock_out_other_clients():
    env = {"CHARIOT_KEEP_ALIVE": "1", "CHARIOT_MAX_CONNECTIONS": "100"}
    with run_engine("faulty_engine", src=HERE, env=env, preexec_fn=few_files) as engine:
        idle = []
        try:
            for _ in range(300):  # more than the engine's 256 file descriptors
                try:
                    idle.append(socket.create_connection(("127.0.0.1", engine.http_port), timeout=2))
                except OSError:
                    break
            time.sleep(2)
            body = json.dumps(chariot_request(image_input("image", PIXELS)))
            response = requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=body, timeout=10)
            assert response.status_code == 200
        finally:
            for sock in idle:
                sock.close()


def test_content_length_with_transfer_encoding_is_refused(engine):
    with socket.create_connection(("127.0.0.1", engine.http_port), timeout=5) as sock:
        sock.sendall(
            b"POST /v2/models/m-faulty/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
        )
        reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]


def test_error_messages_do_not_echo_the_request(engine):
    body = chariot_request(image_input("x" * 100_000, PIXELS, action="explode"))
    response = requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=json.dumps(body), timeout=10)
    assert response.status_code == 400
    assert len(response.json()["error"]) < 1200
    assert "more characters" in response.json()["error"]


def test_headers_that_never_end_get_431_and_are_not_held(engine):
    """A client that sends a header without end: the engine serves others while it arrives, holds at most 64 KiB
    of it, then answers 431 and closes the connection."""
    before = rss_mib(engine.process.pid)
    body = json.dumps(chariot_request(image_input("image", PIXELS)))
    with socket.create_connection(("127.0.0.1", engine.http_port), timeout=10) as sock:
        sock.sendall(b"POST /v2/models/m-faulty/infer HTTP/1.1\r\nHost: x\r\nX-Endless: " + b"a" * (32 << 10))
        # Half the head is in and the connection open: another client is answered meanwhile.
        meanwhile = requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=body, timeout=10)
        assert meanwhile.status_code == 200, meanwhile.text
        sent = 0
        try:
            while sent < 200:  # up to 200 MiB, bounded
                sock.sendall(b"a" * (1 << 20))
                sent += 1
        except (BrokenPipeError, ConnectionResetError):
            pass  # the engine closed the connection, as it must
        except TimeoutError:
            pytest.fail("the engine stopped reading the header but kept the connection open")
        answer = b""
        try:
            while chunk := sock.recv(4096):
                answer += chunk
        except ConnectionResetError:
            pass  # the close came after the answer, which is already read
        except TimeoutError:
            pytest.fail(f"the engine answered {answer[:100]!r} but kept the connection open")
    assert sent < 200, "the engine read 200 MiB of one header"
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {"error": "the request's headers pass 65,536 bytes"}
    assert rss_mib(engine.process.pid) - before < 64
    assert requests.post(f"{engine.url}/v2/models/m-faulty/infer", data=body, timeout=10).status_code == 200
