"""The client examples of the baked README, run as written against a baked engine: tritonclient over HTTP (in this
environment) and KServe's SDK over REST and gRPC (in .venv-kserve, as test_kserve_sdk.py runs it). Each must
print the results a plain REST request gets."""

import ast
import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from baking import model_name
from test_kserve_sdk import KSERVE_PYTHON

PROMPTS = ["What colours are in the picture?"]


def example(root: Path, marker: str) -> str:
    """The README's Python block that contains `marker`."""
    blocks = [b for b in re.findall(r"```python\n(.*?)```", (root / "README.md").read_text(), re.S) if marker in b]
    assert len(blocks) == 1, f"the README should have one Python example with {marker!r}, has {len(blocks)}"
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
def test_the_readme_client_examples_print_the_engines_results(baked, baked_engine, task):
    assert KSERVE_PYTHON.exists(), f"{KSERVE_PYTHON} is missing: scripts/test makes it"
    root = Path(baked(task))
    model = model_name(task)
    engine = baked_engine(task)
    triton = run_example(sys.executable, example(root, "import tritonclient"), root, engine)
    expected = plain_results(engine, root, model, {"prompts": PROMPTS} if task == "Image Text to Text" else {})
    assert expected, "the demo should find something in the sample scene"
    assert [ast.literal_eval(line) for line in triton] == [expected]

    kserve = run_example(str(KSERVE_PYTHON), example(root, "from kserve import"), root, engine)
    thresholded = plain_results(
        engine, root, model, {"prompts": PROMPTS} if task == "Image Text to Text" else {"score_threshold": 0.5}
    )
    assert kserve[0] == "True True"
    assert [json.loads(line) for line in kserve[1:]] == [thresholded, thresholded]
