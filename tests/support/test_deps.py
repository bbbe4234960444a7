"""Dependencies of an engine: a second OpenCV beside the headless one is found and named with what brought it, and
a dependency is added to pyproject.toml without disturbing the file."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chariot_support.dev.deps import CONFLICT, add_dependency, opencv_conflicts, pip_failure, read_pins
from template_paths import SUPPORT_SRC


def fake_distribution(folder: Path, name: str, requires: tuple[str, ...] = ()) -> None:
    """An installed distribution as importlib.metadata finds it on sys.path: a dist-info folder."""
    info = folder / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0", *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


@pytest.fixture
def site(tmp_path) -> Path:
    fake_distribution(tmp_path, "opencv-python-headless")
    fake_distribution(tmp_path, "numpy")
    return tmp_path


def distributions(folder: Path):
    import importlib.metadata

    return importlib.metadata.distributions(path=[str(folder)])


def test_the_headless_opencv_alone_is_fine(site):
    assert opencv_conflicts(distributions(site)) == []


def test_a_second_opencv_is_named_with_what_required_it(site):
    fake_distribution(site, "opencv-python")
    fake_distribution(site, "fancy-ocr", ("opencv-python>=4", "numpy"))
    fake_distribution(site, "plotting", ("opencv-python; extra == 'gui'",))
    (problem,) = opencv_conflicts(distributions(site))
    assert problem.startswith("opencv-python is installed beside opencv-python-headless, required by fancy-ocr:")
    assert "libGL" in problem and "install fancy-ocr with `pip install --no-deps`" in problem
    fake_distribution(site, "opencv-contrib-python")
    assert len(opencv_conflicts(distributions(site))) == 2


def test_check_exits_1_with_the_sentence(site):
    fake_distribution(site, "opencv-python")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(SUPPORT_SRC)])}
    check = subprocess.run(
        [sys.executable, "-m", "chariot_support.dev.deps", "check"], env=env, capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 1 and "opencv-python is installed beside opencv-python-headless" in check.stderr
    fine = subprocess.run([sys.executable, "-m", "chariot_support.dev.deps", "check"], capture_output=True, timeout=60)
    assert fine.returncode == 0, fine.stderr


PYPROJECT = """[project]
name = "road-damage"
dependencies = [
    "mlserver==1.7.1",
    # a comment the file keeps
    "numpy>=2.4,<2.5",
    # The template's dependencies end here. Your model's go below this comment.
]

[project.optional-dependencies]
test = ["pytest==9.2.0"]
"""


def test_dependencies_are_added_below_the_templates_in_order(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PYPROJECT)
    assert add_dependency(pyproject, "onnxruntime==1.32.0")
    assert add_dependency(pyproject, "six==1.17.0")
    ours = '    "onnxruntime==1.32.0",\n    "six==1.17.0",\n'
    assert pyproject.read_text() == PYPROJECT.replace("below this comment.\n]", f"below this comment.\n{ours}]")
    assert not add_dependency(pyproject, "ONNXRuntime>=1"), "already there, whatever its spelling"


def test_pip_failure_names_the_conflict_and_the_pin_to_release():
    output = "\n".join(
        [
            "Collecting mlserver==1.7.1",
            "ERROR: Cannot install road-sign because these package versions have conflicting dependencies.",
            "",
            CONFLICT,
            "    mlserver 1.7.1 depends on protobuf<7.0.0 and >=5.27.2",
            "    mediapipe 0.10.14 depends on protobuf<5 and >=4.25.3",
            "    The user requested (constraint) protobuf==6.33.6",
            "",
            "To fix this you could try to:",
            "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io",
        ]
    )
    said = pip_failure(output).splitlines()
    assert said[:4] == [
        CONFLICT,
        "    mlserver 1.7.1 depends on protobuf<7.0.0 and >=5.27.2",
        "    mediapipe 0.10.14 depends on protobuf<5 and >=4.25.3",
        "    The user requested (constraint) protobuf==6.33.6",
    ]
    assert said[4].startswith("constraints.txt pins protobuf==6.33.6:") and "`--release protobuf`" in said[4]


def test_pip_failure_without_a_conflict_keeps_every_error_line_whole():
    output = "Collecting nothing-here\nWARNING: a warning\nERROR: No matching distribution found for nothing-here==9\n"
    assert pip_failure(output) == "ERROR: No matching distribution found for nothing-here==9"


def test_pins_are_read_from_constraints(tmp_path):
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("# header\nnumpy==2.4.6\nPyYAML==6.0.3  # a comment\n\n")
    assert read_pins(constraints) == {"numpy": "numpy==2.4.6", "pyyaml": "PyYAML==6.0.3"}
