"""Request bodies sent compressed (Content-Encoding gzip or deflate, as tritonclient's request_compression_algorithm
sends them): inflated a step at a time within the request limit, a bomb refused with 413 as soon as it expands past
it, with health answering meanwhile; anything else said plainly."""

import functools
import gzip
import json
import time
import zlib

import numpy as np
import pytest
import requests
from hostile import HERE, HealthProbe, healthy_and_reset

from chariot_support.dev.testing import chariot_request, image_input, run_engine
from chariot_support.errors import BadRequest, ChariotError
from chariot_support.rest.bodies import _SMALL_BODY, INFLATE_STEP, BodyTooLarge, inflate, json_shape

PLAIN = b'{"inputs": []}' * 1000


@pytest.mark.parametrize("size", [200, _SMALL_BODY, _SMALL_BODY + 1, 300_000])
def test_a_body_s_values_and_depth_are_counted_alike_whatever_its_size(size):
    """Small bodies are counted with bytes.count, larger ones with numpy: both give every comma and bracket of the
    JSON, and none of the binary data after it."""
    unit = b'{"a": [1, [2, 3]], "b": "x,y"},'
    body = b"[" + unit * (size // len(unit)) + b"0]"
    opens = body.count(b"[") + body.count(b"{")
    counts = (body.count(b",") + 1, opens if opens <= 64 else 4)  # past 64 opening brackets, the depth itself
    assert json_shape(body) == counts
    assert json_shape(body + b",[{" * 1000, len(body)) == counts  # the tensor bytes after the JSON are not counted


def too_large(size: str) -> str:
    return f"too large: {size}"


@pytest.mark.parametrize(
    "encoding, body",
    [
        ("gzip", gzip.compress(PLAIN)),
        ("x-gzip", gzip.compress(PLAIN)),
        ("deflate", zlib.compress(PLAIN)),
        ("deflate", zlib.compress(PLAIN, wbits=-zlib.MAX_WBITS)),  # raw deflate, as some clients send it
        (" GZip ", gzip.compress(PLAIN)),
        ("identity", PLAIN),
    ],
    # Named, not shown: gzip writes the time into its header, and ids must be the same in every process (xdist).
    ids=["gzip", "x-gzip", "deflate", "raw-deflate", "gzip-spaced", "identity"],
)
def test_a_compressed_body_is_inflated(encoding, body):
    assert inflate(body, encoding, 1 << 20, too_large) == PLAIN


def test_a_body_that_expands_past_the_limit_is_refused_within_a_step_of_it(monkeypatch):
    bomb = gzip.compress(bytes(200 << 20), compresslevel=9)  # 200 MiB of zeros in about 200 KiB
    steps = []
    real = zlib.decompressobj

    class Counting:
        def __init__(self, *args):
            self.inner = real(*args)

        def decompress(self, data, most):
            part = self.inner.decompress(data, most)
            steps.append(len(part))
            return part

        def __getattr__(self, name):
            return getattr(self.inner, name)

    monkeypatch.setattr(zlib, "decompressobj", Counting)
    with pytest.raises(BodyTooLarge, match="too large: over 10,485,760 bytes once decompressed"):
        inflate(bomb, "gzip", 10 << 20, too_large)
    assert sum(steps) <= (10 << 20) + INFLATE_STEP, "the bomb was inflated past a step beyond the limit"


@pytest.mark.parametrize(
    "encoding, body, error, words",
    [
        ("br", b"...", ChariotError, "encoded as 'br'"),
        ("gzip", b"not gzip at all", BadRequest, "not valid gzip data"),
        ("gzip", gzip.compress(PLAIN)[:-20], BadRequest, "ends before its end"),
        ("gzip", gzip.compress(PLAIN) + b"more", BadRequest, "data after the compressed stream"),
        ("deflate", b"\x00\x01\x02", BadRequest, "not valid deflate data"),
    ],
    ids=["br", "not-gzip", "gzip-cut-short", "gzip-then-more", "not-deflate"],
)
def test_a_body_that_is_not_what_its_encoding_says_is_refused_by_name(encoding, body, error, words):
    with pytest.raises(error, match=words) as refused:
        inflate(body, encoding, 1 << 20, too_large)
    assert refused.value.status_code == (415 if encoding == "br" else 400)


@functools.cache
def gzip_bomb() -> bytes:
    """256 MiB of zeros in about 250 KiB of gzip: four times the 64 MiB request limit once inflated. (Compressed once
    for both tests: 1.4 s of CPU; a 1 GiB bomb took 6.4 s to make and is refused at the same 64 MiB.)"""
    return gzip.compress(bytes(256 << 20), compresslevel=9)


@pytest.mark.hostile
def test_a_gzip_bomb_sent_to_the_engine_is_413_while_health_answers(faulty_engine):
    bomb = gzip_bomb()
    good = chariot_request(image_input("image-0", np.zeros((32, 48, 3), np.uint8)))
    engine = healthy_and_reset(faulty_engine)  # the session's, with default settings
    url = f"{engine.url}/v2/models/m-faulty/infer"
    with HealthProbe(engine) as health:
        started = time.monotonic()
        reply = requests.post(url, data=bomb, headers={"Content-Encoding": "gzip"}, timeout=60)
        took = time.monotonic() - started
    assert reply.status_code == 413, reply.text
    assert "once decompressed" in reply.json()["error"] and "CHARIOT_MAX_REQUEST_MB" in reply.json()["error"]
    # Measured here: the 413 in 0.16-0.26 s (64 MiB inflated, then refused), the slowest health answer 8 ms.
    assert took < 0.8, f"the bomb took {took:.2f} s to refuse"
    assert not health.failures and health.worst < 1.0, (health.worst, health.failures)
    plain = requests.post(
        url,
        data=gzip.compress(json.dumps(good).encode()),
        headers={"Content-Encoding": "gzip"},
        timeout=30,
    )
    assert plain.status_code == 200, plain.text


@pytest.mark.hostile
def test_gzip_bombs_sent_at_once_inflate_one_at_a_time_within_the_body_budget():
    """Each compressed body holds the request limit in the body budget while it inflates: with room for one, bombs
    sent at once do not all grow to the limit side by side; those that find no room in time get a 503."""
    from concurrent.futures import ThreadPoolExecutor

    bomb = gzip_bomb()
    env = {"CHARIOT_MAX_REQUEST_MB": "64", "CHARIOT_BODY_BUDGET_MB": "66", "CHARIOT_ADMISSION_WAIT": "0.05"}
    with run_engine("faulty_engine", src=HERE, env=env) as engine:
        url = f"{engine.url}/v2/models/m-faulty/infer"
        with ThreadPoolExecutor(4) as pool:
            replies = list(
                pool.map(
                    lambda _: requests.post(url, data=bomb, headers={"Content-Encoding": "gzip"}, timeout=60), range(4)
                )
            )
        statuses = sorted(r.status_code for r in replies)
        assert set(statuses) <= {413, 503} and 413 in statuses, statuses
        # Inflating one to the 64 MiB limit takes about 0.2 s here, four times the 0.05 s others may wait.
        assert 503 in statuses, f"every bomb inflated at once ({statuses}): none waited for the budget"
        assert requests.get(f"{engine.url}/v2/health/ready", timeout=5).status_code == 200
