"""The environment the engine runs in has one OpenCV, the headless one its image can run: a dependency that brings
opencv-python would overwrite it here and fail at start in the image (no libGL there)."""

from chariot_support.dev.deps import opencv_conflicts


def test_one_opencv_the_headless_one():
    problems = opencv_conflicts()
    assert not problems, "\n".join(problems)
