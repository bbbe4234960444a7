"""Helpers for an engine's tests: draw and encode images, build Chariot requests, run the real engine on free
loopback ports and stop it by its process id."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from chariot_support.client import send

# The gRPC helpers' home before grpc_client.py: a test of an engine's author that imports them from here still works.
from chariot_support.dev.grpc_client import grpc_request as grpc_request
from chariot_support.dev.grpc_client import grpc_results as grpc_results
from chariot_support.errors import ChariotError
from chariot_support.model.image import Image


@dataclass(frozen=True)
class Scene:
    """What was drawn, in pixels: a red rectangle, a green disc and a blue rectangle turned 30 degrees clockwise."""

    pixels: np.ndarray
    red_box: tuple[int, int, int, int] = (20, 30, 100, 90)  # xmin, ymin, xmax, ymax (max exclusive)
    green_centre: tuple[int, int] = (250, 60)
    green_radius: int = 30
    blue_centre: tuple[float, float] = (160.0, 170.0)
    blue_size: tuple[float, float] = (100.0, 40.0)
    blue_degrees: float = 30.0

    @property
    def width(self) -> int:
        return self.pixels.shape[1]

    @property
    def height(self) -> int:
        return self.pixels.shape[0]


def draw_scene() -> Scene:
    """The test scene (RGB): what samples/scene.png holds and the demo models find."""
    scene = Scene(pixels=np.zeros((240, 320, 3), np.uint8))
    xmin, ymin, xmax, ymax = scene.red_box
    cv2.rectangle(scene.pixels, (xmin, ymin), (xmax - 1, ymax - 1), (255, 0, 0), -1)
    cv2.circle(scene.pixels, scene.green_centre, scene.green_radius, (0, 255, 0), -1)
    corners = cv2.boxPoints((scene.blue_centre, scene.blue_size, scene.blue_degrees))
    cv2.fillPoly(scene.pixels, [np.round(corners).astype(np.int32)], (0, 0, 255))
    return scene


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` different free ports on 127.0.0.1: each is held until all are chosen, so none comes up twice (a gRPC
    server shares a port it binds, and would answer HTTP requests meant for the REST server on it)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def image_file(rgb: np.ndarray, extension: str = ".png") -> bytes:
    """`rgb` (H x W x 3, RGB order) encoded as an image file."""
    ok, encoded = cv2.imencode(extension, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    if not ok:
        raise ValueError(f"OpenCV could not encode a {rgb.shape} image as {extension}")
    return encoded.tobytes()


def encode_image(rgb: np.ndarray, extension: str = ".png") -> str:
    """Base64 of `rgb` (H x W x 3, RGB order) encoded as an image file, as Chariot sends images."""
    return base64.b64encode(image_file(rgb, extension)).decode("ascii")


def as_image(
    pixels: np.ndarray,
    *,
    name: str = "image",
    action: str = "predict",
    prompts: Sequence[str] = (),
    score_threshold: float | None = None,
) -> Image:
    """An Image as predict receives it, for calling a model directly in a test."""
    return Image(
        name=name, pixels=pixels, action=action, score_threshold=score_threshold, prompts=tuple(prompts), parameters={}
    )


def read_picture(path: Path, **settings: Any) -> Image:
    """The picture in the file at `path` as predict receives it (decoded as the engine decodes it), with the
    request settings `as_image` takes."""
    from chariot_support.protocols.images import decode_image

    return as_image(decode_image(Path(path).read_bytes(), str(path)), name=Path(path).name, **settings)


def answer(model: Any, image: Image) -> list:
    """What the engine answers for `image` from `model.predict`: the results checked against the task's format and
    kept inside the picture, then `score_threshold`, `action` and prompt order applied."""
    from chariot_support.model.clipping import inside_image
    from chariot_support.model.tasks import select, validate_results

    task = model.task_type
    (checked,) = validate_results(task, model.predict([image], {}), [image.name])
    inside = inside_image(task, checked, image.width, image.height)
    return select(task, inside, action=image.action, score_threshold=image.score_threshold, prompts=image.prompts)


# What test_task.py's EXPECTED says of a picture in which a detector or segmenter must find nothing at all. An empty
# set means the same: "at least these labels" with none listed would hold for any answer, so it is read as "none".
NOTHING: frozenset[str] = frozenset()


def check_found(picture: str, expected: Set[str], results: Sequence[Any], where: str = "found") -> None:
    """That `results` (a model's results, or the engine's answer as dicts) hold every label in `expected`, or, when
    `expected` is NOTHING (empty), no result at all; an AssertionError naming the picture and what was found if not."""

    def field(result: Any, name: str) -> Any:
        return result[name] if isinstance(result, dict) else getattr(result, name)

    found = [(field(r, "label"), field(r, "score")) for r in results]
    listed = ", ".join(f"{label} ({score:.2f})" for label, score in found) or "nothing"
    if not expected:
        if found:
            raise AssertionError(f"{picture}: expected nothing, {where} {len(found)}: {listed}")
        return
    missing = sorted(set(expected) - {label for label, _ in found})
    if missing:
        raise AssertionError(f"{picture}: expected {sorted(expected)}, {where} {listed}; missing {missing}")


def image_input(name: str, rgb: np.ndarray, **parameters: Any) -> dict:
    """One Chariot image input holding `rgb` as a PNG file (client/send.image_input)."""
    return send.image_input(name, image_file(rgb), parameters)


def chariot_request(*inputs: dict, **parameters: Any) -> dict:
    body: dict = {"inputs": list(inputs)}
    if parameters:
        body["parameters"] = parameters
    return body


def chariot_metadata(**extended: Any) -> str:
    """Chariot's metadata parameter: a JSON-encoded string with standard and extended sections."""
    return json.dumps(
        {
            "standard_metadata": {},
            "extended_metadata": [
                {
                    "key": key,
                    "type": type(value).__name__ if isinstance(value, (int, float)) else "str",
                    "value": str(value),
                }
                for key, value in extended.items()
            ],
        }
    )


def expect_error(call, error_type: type[ChariotError], *fragments: str) -> str:
    """Call `call`, which must raise `error_type` with its usual status and a message holding every fragment."""
    try:
        call()
    except error_type as error:
        message = str(error)
        assert error.status_code == error_type.status_code_default, (error.status_code, message)
        missing = [f for f in fragments if f not in message]
        assert not missing, f"{missing} not in {message!r}"
        return message
    raise AssertionError(f"expected {error_type.__name__}, nothing was raised")


def same_corners(a: np.ndarray, b: np.ndarray, tolerance: float) -> bool:
    """Whether every corner in `a` lies within `tolerance` of some corner in `b` (boxes' corner order varies)."""
    return all(np.linalg.norm(np.asarray(b) - corner, axis=1).min() <= tolerance for corner in np.asarray(a))


def changed_near(before: np.ndarray, after: np.ndarray, x: float, y: float, radius: int = 2) -> bool:
    """Whether any pixel within `radius` of (x, y) differs between two images of the same size."""
    x, y = int(round(x)), int(round(y))
    window = (slice(max(y - radius, 0), y + radius + 1), slice(max(x - radius, 0), x + radius + 1))
    return bool((before[window] != after[window]).any())


def engine_package(src: Path) -> str:
    """The engine's own package: the one in `src` beside chariot_support."""
    packages = [p.name for p in src.iterdir() if (p / "__main__.py").is_file() and p.name != "chariot_support"]
    if len(packages) != 1:
        raise LookupError(f"expected one engine package with a __main__.py in {src}, found {packages}")
    return packages[0]


@dataclass
class RunningEngine:
    process: subprocess.Popen
    http_port: int
    grpc_port: int
    metrics_port: int
    log_path: Path
    kept_log: str | None = None  # the log as it was when the engine was stopped and its file removed

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def log(self) -> str:
        """Everything the engine has written to stdout and stderr so far (all of it, once it was stopped)."""
        if self.kept_log is not None:
            return self.kept_log
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 10.0) -> str:
        """The log once it holds `text`: a request's log line is written just after its reply is sent."""
        deadline = time.monotonic() + timeout
        while text not in (log := self.log()):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{text!r} did not reach the engine's log in {timeout:g} s; it ends:\n{log[-3000:]}"
                )
            time.sleep(0.05)
        return log

    def alive(self) -> bool:
        return self.process.poll() is None


class EngineDidNotStart(RuntimeError):
    """The engine exited, or was not ready in time; `log` is everything it wrote."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


def _ready(url: str, *, answering: bool = False) -> bool:
    """Whether the engine at `url` is ready; with `answering`, whether its REST server answers at all."""
    try:
        with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=2) as response:
            return response.status == 200
    except urllib.error.HTTPError:
        return answering  # it answers, not ready
    except (urllib.error.URLError, http.client.HTTPException, OSError):
        return False  # not listening yet, or something other than the engine's REST server answered


@contextlib.contextmanager
def run_engine(
    package: str,
    *,
    src: Path | None = None,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
    timeout: float = 90.0,
    args: Sequence[str] = (),
    loading: bool = False,
    unset: Sequence[str] = (),
    **popen: Any,
) -> Iterator[RunningEngine]:
    """Start `python -m package *args` on free 127.0.0.1 ports, wait until it is ready (with `loading`, only until
    its REST server answers, while the model may still load), and stop it afterwards. The engine inherits this
    process's environment, less the variables named in `unset`, with `env` over it. `popen` goes to
    subprocess.Popen (cwd, user, group...)."""
    ports = free_ports(3)
    environment = {
        **{key: value for key, value in os.environ.items() if key not in unset},
        "MLSERVER_HOST": "127.0.0.1",
        "MLSERVER_HTTP_PORT": str(ports[0]),
        "MLSERVER_GRPC_PORT": str(ports[1]),
        "MLSERVER_METRICS_PORT": str(ports[2]),
        **(env or {}),
    }
    if src is not None:
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), environment.get("PYTHONPATH")]))
    log_file = tempfile.NamedTemporaryFile(prefix=f"{package}-", suffix=".log", delete=False)
    process = subprocess.Popen(
        [python, "-m", package, *args], env=environment, stdout=log_file, stderr=subprocess.STDOUT, **popen
    )
    engine = RunningEngine(process, *ports, Path(log_file.name))
    try:
        deadline = time.monotonic() + timeout
        while not _ready(engine.url, answering=loading):
            if not engine.alive() or time.monotonic() > deadline:
                log = engine.log()
                raise EngineDidNotStart(f"engine {package} did not become ready; its log:\n{log[-4000:]}", log)
            time.sleep(0.05)  # a refused connection costs next to nothing; a start is found 0.1 s sooner on average
        yield engine
    finally:
        stop(engine)
        log_file.close()
        # The log file goes with the engine; what it held stays readable from `engine.log()`.
        engine.kept_log = engine.log()
        engine.log_path.unlink(missing_ok=True)


def stop(engine: RunningEngine, timeout: float = 20.0) -> int:
    """SIGTERM the engine's process (and only it), then SIGKILL if it will not go; returns its exit code."""
    if engine.alive():
        engine.process.send_signal(signal.SIGTERM)
        try:
            engine.process.wait(timeout)
        except subprocess.TimeoutExpired:
            engine.process.kill()
            engine.process.wait(timeout)
    return engine.process.returncode


def run_demo_engine(task: str, **options: Any):
    """run_engine for the demo model of `task` (a TaskType or its name), served by the support package itself."""
    return run_engine("chariot_support", args=[getattr(task, "value", task)], **options)
