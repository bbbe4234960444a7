"""The client examples of a baked engine's docs/clients.md, run as written against that engine: tritonclient over
HTTP (in this environment) and KServe's SDK over REST and gRPC (in .venv-kserve, as test_kserve_sdk.py runs it). Each
must print the results a plain REST request gets."""

import ast
import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from test_kserve_sdk import KSERVE_PYTHON


def example(root: Path, marker: str) -> str:
    """docs/clients.md's Python block that contains `marker`."""
    page = (root / "docs" / "clients.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", page, re.S) if marker in b]
    assert len(blocks) == 1, f"docs/clients.md should have one Python example with {marker!r}, has {len(blocks)}"
    return blocks[0]


def run_example(python: str, code: str, root: Path, engine) -> list[str]:
    code = code.replace("http://localhost:8080", engine.url).replace("localhost:8080", engine.url[len("http://") :])
    code = code.replace("localhost:8081", engine.grpc_address)
    result = subprocess.run([python, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


def plain_results(engine, root: Path, model: str, parameters: dict) -> list:
    image = base64.b64encode((root / "samples" / "scene.png").read_bytes()).decode()
    inputs = [{"name": "image-0", "shape": [1], "datatype": "BYTES", "data": [image], "parameters": parameters}]
    reply = requests.post(f"{engine.url}/v2/models/{model}/infer", json={"inputs": inputs}, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()["outputs"][0]["data"][0]


@pytest.mark.parametrize("task", ["Object Detection", "Image Text to Text"])
def test_the_client_examples_print_the_engines_results(baked, baked_engine, task):
    """The examples ask for m-demo, which every engine answers to, without prompts, which an Image Text to Text
    engine answers with one answer about the picture."""
    assert KSERVE_PYTHON.exists(), f"{KSERVE_PYTHON} is missing: scripts/test makes it"
    root = Path(baked(task))
    engine = baked_engine(task)
    triton = run_example(sys.executable, example(root, "import tritonclient"), root, engine)
    expected = plain_results(engine, root, "m-demo", {})
    assert expected, "the demo should find something in the sample scene"
    assert [ast.literal_eval(line) for line in triton] == [expected]

    kserve = run_example(str(KSERVE_PYTHON), example(root, "from kserve import"), root, engine)
    thresholded = plain_results(engine, root, "m-demo", {"score_threshold": 0.5})
    assert kserve[0] == "True True"
    assert [json.loads(line) for line in kserve[1:]] == [thresholded, thresholded]


def answers(text: str) -> list:
    """The JSON values `text` holds one after the other, as curl prints several answers."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
        at += len(text[at:]) - len(text[at:].lstrip())
    return values


def results_of(answer: dict) -> list:
    """The first image's results in a V2, chariot-v2 or KServe V1 answer."""
    if "outputs" in answer:
        return answer["outputs"][0]["data"][0]
    return answer["output"] if "output" in answer else answer["predictions"][0]


@pytest.mark.parametrize("task", ["Object Detection", "Image Text to Text"])
def test_the_curl_commands_of_the_readme_and_the_protocol_page_answer_with_results(baked, baked_engine, task):
    """Every bash block of the README and docs/protocol.md that calls the engine with curl, run as written from the
    engine's folder (the port aside): each answer is results, none an error."""
    root = Path(baked(task))
    engine = baked_engine(task)
    blocks = [
        block
        for page in (root / "README.md", root / "docs" / "protocol.md")
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(), re.S)
        if "curl -s localhost:8080" in block and "/health/" not in block
    ]
    assert len(blocks) == 3, blocks  # the README's V2 request, chariot-v2's three, KServe V1's
    for block in blocks:
        script = block.replace("localhost:8080", engine.url[len("http://") :])
        ran = subprocess.run(["bash", "-c", script], cwd=root, capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0 and ran.stdout, ran.stderr
        for answer in answers(ran.stdout):
            assert "error" not in answer, f"{script}: {answer}"
            assert results_of(answer), f"{script}: no results in {answer}"
