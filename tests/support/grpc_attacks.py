"""Hostile gRPC clients for the hostile tests and scripts/hostile_figures.py: many calls at once, large messages,
answers never read (a raw HTTP/2 client with a receive window of 0), messages never sent, and the health of the
engine meanwhile, each probe from a new connection."""

import base64
import multiprocessing
import re
import socket
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import grpc
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import requests
from hostile import HealthProbe, black_png
from mlserver.grpc import dataplane_pb2 as pb
from mlserver.grpc.dataplane_pb2_grpc import GRPCInferenceServiceStub

MODEL = "m-faulty"
INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"
LIVE_METHOD = "/inference.GRPCInferenceService/ServerLive"
BIG = [("grpc.max_send_message_length", 1 << 28), ("grpc.max_receive_message_length", 1 << 28)]


def infer_message(*, padding: int = 0, request_id: str = "", side: int = 16, **parameters: str) -> pb.ModelInferRequest:
    """A ModelInfer request for the faulty engine: one black PNG, a second input of `padding` bytes that starts as a
    PNG and holds no image (the request is refused as a bad input once read), and the request id and parameters
    given."""
    message = pb.ModelInferRequest(model_name=MODEL, id=request_id)
    image = message.inputs.add(name="image-0", datatype="BYTES", shape=[1])
    image.contents.bytes_contents.append(base64.b64decode(black_png(side)))
    for key, value in parameters.items():
        image.parameters[key].string_param = value
    if padding:
        extra = message.inputs.add(name="image-1", datatype="BYTES", shape=[1])
        extra.contents.bytes_contents.append(b"\x89PNG\r\n\x1a\n" + b"\0" * (padding - 8))
    return message


def _infer(channel: grpc.Channel):
    """ModelInfer taking the message already serialized, so that a test's client threads spend no time on it."""
    return channel.unary_unary(INFER_METHOD)


def call_all(engine, messages, *, channels: int = 1, timeout: float = 120) -> Counter:
    """Send every message at once, spread over `channels` connections; count the answers by (status, details)."""
    opened = [grpc.insecure_channel(engine.grpc_address, options=BIG) for _ in range(channels)]
    messages = [m.SerializeToString() for m in messages]
    try:
        calls = [_infer(channel) for channel in opened]
        futures = [calls[i % channels].future(m, timeout=timeout) for i, m in enumerate(messages)]
        answers = Counter()
        for future in futures:
            try:
                future.result()
                answers["OK", ""] += 1
            except grpc.RpcError as error:
                answers[error.code().name, error.details() or ""] += 1
        return answers
    finally:
        for channel in opened:
            channel.close()


def call_in_threads(address: str, messages, *, timeout: float = 120, method: str = INFER_METHOD) -> Counter:
    """Each message on its own connection to `address`, all at once: for large messages, which one connection
    would send one after another."""
    messages = [m if isinstance(m, bytes) else m.SerializeToString() for m in messages]

    def one(message: bytes) -> tuple[str, str]:
        with grpc.insecure_channel(address, options=BIG) as channel:
            try:
                channel.unary_unary(method)(message, timeout=timeout)
                return "OK", ""
            except grpc.RpcError as error:
                return error.code().name, error.details() or ""

    with ThreadPoolExecutor(len(messages)) as pool:
        return Counter(pool.map(one, messages))


def _calls(address: str, count: int, parameters: dict) -> Counter:
    return call_in_threads(address, [infer_message(**parameters)] * count)


def call_apart(engine, count: int, **parameters) -> Counter:
    """call_in_threads with `count` copies of infer_message(**parameters), from a process of its own: a client
    pushing gigabytes keeps its own process's gRPC busy, which would slow this process's health probes."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_calls, engine.grpc_address, count, parameters).result()


def padded_live_request(padding: int) -> bytes:
    """A ServerLiveRequest carrying `padding` bytes in an unknown field (15), which protobuf keeps and skips."""
    length, varint = padding, b""
    while True:
        varint += bytes([(length & 0x7F) | (0x80 if length > 0x7F else 0)])
        length >>= 7
        if not length:
            break
    return bytes([15 << 3 | 2]) + varint + b"\0" * padding


def _live_calls(address: str, count: int, padding: int) -> Counter:
    return call_in_threads(address, [padded_live_request(padding)] * count, method=LIVE_METHOD)


def live_calls_apart(engine, count: int, padding: int) -> Counter:
    """`count` ServerLive calls at once, each with `padding` bytes, from a process of its own (see call_apart)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_live_calls, engine.grpc_address, count, padding).result()


class BothHealthProbe(HealthProbe):
    """hostile.HealthProbe over gRPC as well: ServerLive from a new channel after each REST probe. `worst_rest` and
    `worst_grpc` are each protocol's slowest answer, `worst` the slower of them, and `slowest` names its protocol."""

    def __init__(self, engine):
        super().__init__(engine)
        self.worst_rest = self.worst_grpc = 0.0
        self.slowest = "REST"

    def _check(self) -> bool:
        failures, started = len(self.failures), time.monotonic()
        super()._check()
        rest = 10.0 if len(self.failures) > failures else time.monotonic() - started
        started = time.monotonic()
        try:
            with grpc.insecure_channel(self.engine.grpc_address) as channel:
                if not GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest(), timeout=10).live:
                    self.failures.append("ServerLive answered not live")
            took = time.monotonic() - started
        except grpc.RpcError as error:
            self.failures.append(f"ServerLive: {error.code().name}: {error.details()}")
            took = 10.0
        self.worst_rest, self.worst_grpc = max(self.worst_rest, rest), max(self.worst_grpc, took)
        self.worst = max(self.worst_rest, self.worst_grpc)
        self.slowest = "gRPC" if self.worst_grpc > self.worst_rest else "REST"
        return False


def _grpc_frame(message: bytes) -> bytes:
    return b"\0" + len(message).to_bytes(4, "big") + message


def _headers(engine) -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", INFER_METHOD),
        (":authority", engine.grpc_address),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]


class RawCalls:
    """ModelInfer calls over one HTTP/2 connection of a client that never reads an answer: its receive window is 0,
    so the engine can send headers and trailers, never the answer's message. `statuses` holds each stream's
    grpc-status (and message) as they come; `closed` the streams the engine reset."""

    def __init__(self, engine):
        self.sock = socket.create_connection(("127.0.0.1", engine.grpc_port), timeout=10)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        self.sock.sendall(self.conn.data_to_send())
        self.engine = engine
        self.statuses: dict[int, tuple[str, str]] = {}
        self.closed: set[int] = set()

    def call(self, message: bytes | None, *, headers_only: bool = False) -> int:
        stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream, _headers(self.engine), end_stream=False)
        self.sock.sendall(self.conn.data_to_send())
        if not headers_only:
            data = _grpc_frame(message)
            for at in range(0, len(data), 16384):
                try:
                    while self.conn.local_flow_control_window(stream) < min(16384, len(data) - at):
                        self.read(1.0)
                    self.conn.send_data(stream, data[at : at + 16384], end_stream=at + 16384 >= len(data))
                except h2.exceptions.StreamClosedError:
                    break  # the engine answered (refused) the call before its message was all sent
                self.sock.sendall(self.conn.data_to_send())
        return stream

    def read(self, seconds: float) -> None:
        """Take what the engine sent for `seconds` (settings, window updates, headers, trailers, resets)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 16)
            except TimeoutError:
                return
            if not data:
                return
            for event in self.conn.receive_data(data):
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    fields = dict(event.headers)
                    if "grpc-status" in fields:
                        self.statuses[event.stream_id] = (fields["grpc-status"], fields.get("grpc-message", ""))
                elif isinstance(event, h2.events.StreamReset):
                    self.closed.add(event.stream_id)
            self.sock.sendall(self.conn.data_to_send())

    def close(self) -> None:
        self.sock.close()


def refused_count(engine, reason: str) -> float:
    """chariot_grpc_refused_total for `reason`, from the engine's metrics server."""
    text = requests.get(f"http://127.0.0.1:{engine.metrics_port}/metrics", timeout=5).text
    found = re.search(rf'^chariot_grpc_refused_total{{reason="{reason}"}} (\S+)$', text, re.M)
    return float(found[1]) if found else 0.0
