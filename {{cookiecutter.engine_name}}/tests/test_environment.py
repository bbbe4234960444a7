"""The engine's dependencies hold one OpenCV, the headless one its image can run, in uv.lock and in the environment:
a package that brings opencv-python or opencv-contrib-python would overwrite its cv2 and fail at start in the image
(no libGL there). And the engine's files hold nothing a template update (`cruft update`) left unresolved."""

from pathlib import Path

from chariot_support.dev.opencv import locked_opencvs, opencv_conflicts
from chariot_support.dev.update_check import leftovers, report

ROOT = Path(__file__).resolve().parents[1]


def test_one_opencv_the_headless_one():
    problems = locked_opencvs(ROOT / "uv.lock") + opencv_conflicts()
    assert not problems, "\n".join(problems)


def test_nothing_left_from_a_template_update():
    # The same as `python -m chariot_support.dev.update_check`: conflict markers and .rej files, by file and line.
    found = leftovers(ROOT)
    assert not found, report(found)
