"""One OpenCV, the headless one: a second beside it, in an environment or in uv.lock, is named with what requires it
and what to do; the headless build alone, or a lock without a second, is fine."""

import importlib.metadata
from pathlib import Path

import pytest

from chariot_support.dev.opencv import locked_opencvs, opencv_conflicts


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
    return importlib.metadata.distributions(path=[str(folder)])


def test_the_headless_opencv_alone_is_fine(site):
    assert opencv_conflicts(distributions(site)) == []


def test_a_second_opencv_installed_is_named_with_what_required_it(site):
    fake_distribution(site, "opencv-python")
    fake_distribution(site, "fancy-ocr", ("opencv-python>=4", "numpy"))
    fake_distribution(site, "plotting", ("opencv-python; extra == 'gui'",))
    (problem,) = opencv_conflicts(distributions(site))
    assert problem.startswith("opencv-python is installed beside opencv-python-headless, required by fancy-ocr:")
    assert "libGL" in problem and "`uv sync` installs what uv.lock holds and removes the rest" in problem
    assert "pip does not read pyproject.toml's [tool.uv] exclude-dependencies" in problem
    fake_distribution(site, "opencv-contrib-python")
    assert len(opencv_conflicts(distributions(site))) == 2


def lock(path: Path, *packages: tuple[str, list[str]]) -> Path:
    """A uv.lock holding these packages, each with the names of its dependencies."""
    blocks = []
    for name, dependencies in packages:
        listed = "".join(f'    {{ name = "{d}" }},\n' for d in dependencies)
        blocks.append(f'[[package]]\nname = "{name}"\nversion = "1.0"\ndependencies = [\n{listed}]\n')
    path.write_text('version = 1\nrevision = 3\nrequires-python = ">=3.11"\n\n' + "\n".join(blocks))
    return path


def test_a_second_opencv_in_the_lock_is_named_with_what_requires_it(tmp_path):
    fine = lock(tmp_path / "uv.lock", ("opencv-python-headless", ["numpy"]), ("numpy", []), ("engine", ["numpy"]))
    assert locked_opencvs(fine) == []
    contrib = lock(
        tmp_path / "uv.lock",
        ("opencv-python-headless", ["numpy"]),
        ("opencv-contrib-python", ["numpy"]),
        ("marker-reader", ["opencv-contrib-python", "numpy"]),
    )
    (problem,) = locked_opencvs(contrib)
    assert problem.startswith(
        "uv.lock holds opencv-contrib-python beside opencv-python-headless, required by marker-reader: both install"
        " cv2, so one overwrites the other, and opencv-contrib-python needs libGL"
    )
    assert "list opencv-contrib-python under pyproject.toml's [tool.uv] exclude-dependencies and `uv lock`" in problem
    # opencv-python is the template's own exclusion: the lock holds it only when that setting was taken out.
    plain = lock(
        tmp_path / "uv.lock", ("opencv-python-headless", []), ("opencv-python", []), ("ocr", ["opencv-python"])
    )
    (problem,) = locked_opencvs(plain)
    assert "required by ocr" in problem and "should list opencv-python (the template's does): put it back" in problem
