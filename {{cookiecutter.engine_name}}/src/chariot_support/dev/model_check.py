"""What every engine's own tests hold its author's model to, through the real server, whatever the model finds: it
answers each sample picture with valid results of its task type over REST and gRPC, gives the same answers to
concurrent requests when it says it is thread-safe, and explains (or says it cannot) on the V1 `:explain` route.

Each check raises AssertionError with a sentence naming the picture and what was wrong.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from chariot_support.client.send import image_input
from chariot_support.errors import InvalidResult
from chariot_support.model.tasks import TaskType, validate_results

PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff")
# Image Text to Text answers prompts: the check asks each picture two, so their order is checked too.
PROMPTS = ("Describe the picture.", "What is in the picture?")


def sample_pictures(folder: Path) -> list[Path]:
    pictures = sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in PICTURE_SUFFIXES)
    if not pictures:
        raise AssertionError(f"{folder} holds no pictures ({', '.join(PICTURE_SUFFIXES)}): put a few of yours there")
    return pictures


def picture_input(name: str, picture: Path, task: TaskType) -> dict:
    """One chariot-v2-kserve image input carrying the picture's file as Chariot sends it (client/send.image_input)."""
    prompts = {"prompts": list(PROMPTS)} if task is TaskType.IMAGE_TEXT_TO_TEXT else {}
    return image_input(name, Path(picture).read_bytes(), prompts)


def post_json(url: str, body: dict, timeout: float = 120.0) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def check_results(task: TaskType, results: Any, where: str, prompts: Sequence[str] = PROMPTS) -> list[dict]:
    """The result list the engine answered for one picture, held to the task's Chariot result format (for Image Text
    to Text, one answer to each of `prompts` in order, or one with the empty prompt when there were none)."""
    if not isinstance(results, list):
        raise AssertionError(f"{where}: the engine answered {type(results).__name__}, not a list of results")
    try:
        (checked,) = validate_results(task, [results], [where])
    except InvalidResult as error:
        raise AssertionError(f"{where}: not a valid {task.value} result: {error}") from None
    if task is TaskType.IMAGE_TEXT_TO_TEXT:
        answered = [r.prompt for r in checked]  # type: ignore[attr-defined]
        if answered != (list(prompts) or [""]):
            raise AssertionError(f"{where}: asked {list(prompts)}, answered {answered}")
    return results


class ServedModel:
    """The author's model behind a running engine, asked about the sample pictures."""

    def __init__(self, url: str, model_name: str, task: TaskType, pictures: Sequence[Path]):
        self.url = url
        self.model_name = model_name
        self.task = task
        self.pictures = list(pictures)

    def infer(self, pictures: Sequence[Path] | None = None) -> list[list[dict]]:
        """Each picture's results, all pictures in one request, each checked against the task's format."""
        pictures = self.pictures if pictures is None else list(pictures)
        names = [f"image-{i}" for i in range(len(pictures))]
        body = {"inputs": [picture_input(n, p, self.task) for n, p in zip(names, pictures, strict=True)]}
        status, answer = post_json(f"{self.url}/v2/models/{self.model_name}/infer", body)
        shown = ", ".join(p.name for p in pictures)
        if status != 200:
            raise AssertionError(f"{shown}: the engine answered {status}: {answer}")
        outputs = answer.get("outputs") or []
        if [o.get("name") for o in outputs] != names:
            raise AssertionError(f"{shown}: expected outputs {names}, got {[o.get('name') for o in outputs]}")
        results = []
        for picture, output in zip(pictures, outputs, strict=True):
            if output.get("datatype") != "BYTES" or output.get("shape") != [1] or len(output.get("data", [])) != 1:
                raise AssertionError(f"{picture.name}: an output must be BYTES of shape [1], got {output}")
            results.append(check_results(self.task, output["data"][0], picture.name))
        return results

    def infer_concurrently(self, copies: int = 4) -> list[list[list[dict]]]:
        """The answers to `copies` requests for every picture, sent at once: with four, calls overlap on every thread
        of a machine with up to four cores, and a slow model's suite does not pay for more."""
        with ThreadPoolExecutor(copies) as pool:
            return list(pool.map(lambda _: self.infer(), range(copies)))

    def check_without_prompts(self) -> None:
        """Image Text to Text: each picture sent without prompts, as Chariot may send it, gets one answer about the
        picture itself (its prompt the empty string), or a 400 in which the model says it needs a prompt. Other task
        types take no prompts: nothing to check."""
        if self.task is not TaskType.IMAGE_TEXT_TO_TEXT:
            return
        for picture in self.pictures:
            tensor = picture_input("image-0", picture, self.task)
            tensor.pop("parameters", None)
            status, answer = post_json(f"{self.url}/v2/models/{self.model_name}/infer", {"inputs": [tensor]})
            where = f"{picture.name} without prompts"
            if status == 400 and isinstance(answer, dict) and answer.get("error"):
                continue  # the model refused it (BadRequest), saying why
            if status != 200:
                raise AssertionError(f"{where}: the engine answered {status}: {answer}")
            check_results(self.task, answer["outputs"][0]["data"][0], where, prompts=())

    def explain(self) -> tuple[int, Any]:
        """The V1 :explain answer for every picture."""
        instances = [{"b64": base64.b64encode(p.read_bytes()).decode("ascii")} for p in self.pictures]
        body: dict[str, Any] = {"instances": instances}
        if self.task is TaskType.IMAGE_TEXT_TO_TEXT:
            body["parameters"] = {"prompts": list(PROMPTS)}
        return post_json(f"{self.url}/v1/models/{self.model_name}:explain", body)


def same_answers(a: Any, b: Any, tolerance: float = 1e-4) -> bool:
    """Whether two answers are the same but for float rounding (threads may sum in another order)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_answers(a[k], b[k], tolerance) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_answers(x, y, tolerance) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, float | int) and isinstance(b, float | int):
        return abs(a - b) <= tolerance * max(1.0, abs(a), abs(b))
    return a == b


def check_explanations(answer: Any, predictions: list[list[dict]]) -> None:
    if not isinstance(answer, dict) or not same_answers(answer.get("predictions"), predictions):
        raise AssertionError(f"explain must answer the same predictions as infer; got {answer}")
    explanations = answer.get("explanations")
    if not isinstance(explanations, list) or len(explanations) != len(predictions):
        raise AssertionError(f"explain must give one explanation per picture ({len(predictions)}); got {explanations}")


def start_failure(model_dir: Path, log: str) -> str:
    """Why the engine did not start, for a person: the variable and folder when those are the likely cause."""
    hint = ""
    if not Path(model_dir).is_dir():
        hint = (
            f"MODEL_DIR is {model_dir}, which does not exist. If your model reads files, set MODEL_DIR to the folder"
            " that holds them (for example `MODEL_DIR=./my-model pytest`). "
        )
    lines = log.strip().splitlines()[-40:]
    return f"the engine did not start with your model. {hint}The engine's log ends:\n" + "\n".join(lines)
