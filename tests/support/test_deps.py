"""Dependencies of an engine: a second OpenCV beside the headless one is found and named with what brought it, in an
environment and in a resolution; a dependency is added to pyproject.toml, a package left out of every install, an
over-tight pin overridden (the engine's ranges kept) and torch routed to its CPU index and back, without disturbing
the file; the image's Python and platform are read from the Dockerfile; uv's output is read for pins, what requires
them and the pins in a conflict's way."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from chariot_support.dev.deps import (
    PYTORCH_CPU_INDEX,
    Resolution,
    add_dependency,
    exclude,
    excluded,
    image_target,
    main,
    opencv_conflicts,
    overridden,
    override,
    parse_resolution,
    pins_in_the_way,
    read_pins,
    route_torch,
    second_opencvs,
    template_dependencies,
    torch_index,
)
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
    assert "libGL" in problem and "`python -m chariot_support.dev.deps lock --without opencv-python`" in problem
    assert "`uv pip install -c constraints.txt -e '.[test]'`" in problem and "pip does not read" in problem
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
    "six==1.17.0",
]

[project.optional-dependencies]
test = ["pytest==9.2.0"]
"""


def test_dependencies_are_added_below_the_templates_in_order(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PYPROJECT)
    assert add_dependency(pyproject, "onnxruntime==1.32.0")
    assert add_dependency(pyproject, "torch==2.9.1")
    ours = '    "onnxruntime==1.32.0",\n    "torch==2.9.1",\n'
    assert pyproject.read_text() == PYPROJECT.replace('"six==1.17.0",\n]', f'"six==1.17.0",\n{ours}]')
    assert not add_dependency(pyproject, "ONNXRuntime>=1"), "already there, whatever its spelling"
    assert template_dependencies(pyproject) == ["mlserver==1.7.1", "numpy>=2.4,<2.5"], (
        "the user's are not the template's"
    )


def test_packages_are_left_out_in_the_tool_uv_table_keeping_the_file(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    table = '[tool.uv]\n# why\nexclude-dependencies = []\n\n[tool.cruft]\nskip = ["a"]\n'
    pyproject.write_text(PYPROJECT + "\n" + table)
    assert exclude(pyproject, ["opencv-python"]) == ["opencv-python"]
    assert exclude(pyproject, ["OpenCV_Python", "opencv-contrib-python"]) == ["opencv-contrib-python"]
    listed = 'exclude-dependencies = ["opencv-contrib-python", "opencv-python"]'
    assert pyproject.read_text() == PYPROJECT + "\n" + table.replace("exclude-dependencies = []", listed)
    assert excluded(pyproject) == ["opencv-contrib-python", "opencv-python"]


def test_the_tool_uv_table_is_made_when_missing(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PYPROJECT)
    assert excluded(pyproject) == []
    exclude(pyproject, ["opencv-python"])
    assert pyproject.read_text() == PYPROJECT + '\n[tool.uv]\nexclude-dependencies = ["opencv-python"]\n'
    pyproject.write_text(PYPROJECT + '\n[tool.uv]\nindex-strategy = "first-index"\n')
    exclude(pyproject, ["opencv-python"])
    assert excluded(pyproject) == ["opencv-python"] and 'index-strategy = "first-index"' in pyproject.read_text()


@pytest.mark.parametrize(
    ("without", "said"),
    [("numpy", "pyproject.toml requires numpy itself"), ("opencv-python>=4", "takes a package's name")],
)
def test_without_refuses_what_the_engine_requires_and_what_is_not_a_name(tmp_path, monkeypatch, capsys, without, said):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["lock", "--without", without])
    assert exited.value.code == 2 and said in capsys.readouterr().err
    assert (tmp_path / "pyproject.toml").read_text() == PYPROJECT


COMPILED = """\
numpy==2.4.6              # via mlserver, opencv-python, -c /tmp/lock-x/held.txt, road-damage (pyproject.toml)
opencv-python==5.0.0.93   # via fancy-ocr
opencv-python-headless==5.0.0.93  # via -c /tmp/lock-x/held.txt, road-damage (pyproject.toml)
fancy-ocr==1.0            # via road-damage (pyproject.toml)
PyYAML==6.0.3
"""


def test_a_resolution_is_read_with_what_requires_each_package():
    resolution = parse_resolution(COMPILED)
    assert resolution.pins == {
        "numpy": "numpy==2.4.6",
        "opencv-python": "opencv-python==5.0.0.93",
        "opencv-python-headless": "opencv-python-headless==5.0.0.93",
        "fancy-ocr": "fancy-ocr==1.0",
        "pyyaml": "PyYAML==6.0.3",
    }
    assert resolution.required_by["numpy"] == ["mlserver", "opencv-python"]
    assert resolution.required_by["fancy-ocr"] == [] and resolution.required_by["pyyaml"] == []


def test_a_second_opencv_in_a_resolution_is_refused_with_the_way_to_leave_it_out():
    (problem,) = second_opencvs(parse_resolution(COMPILED))
    assert problem.startswith(
        "fancy-ocr requires opencv-python, which would be installed beside opencv-python-headless"
    )
    assert "Run the command again with `--without opencv-python`" in problem
    direct = Resolution(
        pins={"opencv-python-headless": "opencv-python-headless==5.0.0.93", "opencv-python": "opencv-python==5.0.0.93"}
    )
    (problem,) = second_opencvs(direct)
    assert problem.startswith("pyproject.toml requires opencv-python,") and problem.endswith(
        "Remove it: opencv-python-headless provides cv2."
    )
    assert second_opencvs(Resolution(pins={"opencv-python": "opencv-python==5.0.0.93"})) == []


def test_the_pins_in_a_conflicts_way_are_those_uv_names_that_would_move():
    reason = (
        "Because grpcio-tools==1.66.0 depends on protobuf>=5.26.1,<6.0.dev0 and mlserver==1.7.1 depends on"
        " protobuf==6.33.6, we can conclude that grpcio-tools==1.66.0 and mlserver==1.7.1 are incompatible."
    )
    held = {"mlserver": "mlserver==1.7.1", "protobuf": "protobuf==6.33.6", "six": "six==1.17.0", "rich": "rich==14.0"}
    free = Resolution(
        pins={"mlserver": "mlserver==1.7.1", "protobuf": "protobuf==5.29.6", "six": "six==1.17.0", "rich": "rich==14.1"}
    )
    assert pins_in_the_way(reason, held, free) == ["protobuf==6.33.6"]
    assert pins_in_the_way("no pins named", held, free) == ["protobuf==6.33.6", "rich==14.0"]


def test_pins_are_read_from_constraints(tmp_path):
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("# header\nnumpy==2.4.6\nPyYAML==6.0.3  # a comment\n\n")
    assert read_pins(constraints) == {"numpy": "numpy==2.4.6", "pyyaml": "PyYAML==6.0.3"}


def test_the_old_module_name_runs_the_command_and_names_the_new_one():
    env = {**os.environ, "PYTHONPATH": str(SUPPORT_SRC)}
    old = subprocess.run(
        [sys.executable, "-m", "chariot_support.deps", "bogus"], env=env, capture_output=True, text=True, timeout=60
    )
    assert old.returncode == 2 and "Traceback" not in old.stderr, old.stderr
    assert old.stderr.startswith("chariot_support.deps is now chariot_support.dev.deps: run `python -m")
    assert "invalid choice: 'bogus'" in old.stderr, "the new command ran, with the arguments given"


def test_an_override_keeps_the_engines_own_ranges_beside_it(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(PYPROJECT + "\n[tool.uv]\nexclude-dependencies = []\noverride-dependencies = []\n")
    mlservers = ["protobuf (>=5.27.2,<7.0.0)", "numpy", 'uvloop ; sys_platform != "win32"']
    written = override(pyproject, ["numpy", "torch>=2.5", "protobuf<6"], mlservers)
    assert written == ["numpy>=2.4,<2.5", "torch>=2.5", "protobuf<6,>=5.27.2,<7.0.0"]
    assert override(pyproject, ["Torch>=2.6"], mlservers) == ["torch>=2.6"], "a second override of torch replaces it"
    assert overridden(pyproject) == ["numpy>=2.4,<2.5", "protobuf<6,>=5.27.2,<7.0.0", "torch>=2.6"]
    assert pyproject.read_text().startswith(PYPROJECT + "\n[tool.uv]\nexclude-dependencies = []\noverride-dependencies")


def test_torch_is_routed_to_the_cpu_index_and_back_leaving_the_rest_of_the_file(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    original = PYPROJECT + '\n[tool.uv]\nexclude-dependencies = []\n\n[tool.cruft]\nskip = ["a"]\n'
    pyproject.write_text(original)
    assert torch_index(pyproject) is None
    route_torch(pyproject, PYTORCH_CPU_INDEX)
    route_torch(pyproject, "http://127.0.0.1:9/simple")  # again: replaced, not repeated
    uv = tomllib.loads(pyproject.read_text())["tool"]["uv"]
    assert uv["index"] == [{"name": "pytorch-cpu", "url": "http://127.0.0.1:9/simple", "explicit": True}]
    assert uv["sources"] == {name: {"index": "pytorch-cpu"} for name in ("torch", "torchvision", "torchaudio")}
    assert torch_index(pyproject) == "http://127.0.0.1:9/simple" and uv["exclude-dependencies"] == []
    route_torch(pyproject, None)
    assert pyproject.read_text() == original and torch_index(pyproject) is None
    pyproject.write_text(original + '\n[tool.uv.sources]\nsix = { path = "six" }\n')
    with pytest.raises(SystemExit, match=r"has a \[tool.uv.sources\] table of its own"):
        route_torch(pyproject, PYTORCH_CPU_INDEX)


@pytest.mark.parametrize(
    ("base", "python", "platform"),
    [
        ("FROM python:3.12-slim-bookworm AS build", "3.12", "x86_64-manylinux_2_36"),
        ("FROM docker.io/library/python:3.11.9-slim-bullseye", "3.11", "x86_64-manylinux_2_31"),
        ("FROM --platform=linux/amd64 python:3.13-slim-trixie", "3.13", "x86_64-manylinux_2_40"),
    ],
)
def test_the_image_python_and_platform_come_from_the_dockerfiles_base(tmp_path, base, python, platform):
    (tmp_path / "Dockerfile").write_text(f"# the image\n{base}\nRUN true\n")
    target = image_target(tmp_path)
    assert (target.python, target.platform) == (python, platform)
    assert target.described.startswith(f"linux x86_64 (manylinux_2_{platform[-2:]}), Python {python}: the image's")


def test_without_a_python_base_the_lock_says_it_resolves_for_this_python(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04\n")
    target = image_target(tmp_path)
    assert target.python == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert "the Dockerfile names no python:X.Y-slim-<release> base" in target.described
