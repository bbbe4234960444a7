"""The files the template README's own commands write land where git ignores them, so trying the README leaves
the checkout clean; the podman commands the READMEs and docs/ give carry the options these hosts need; and what the
engine's docs/model.md says of its OpenCV holds."""

import re
import subprocess

from template_paths import ENGINE_TEMPLATE, TEMPLATE_ROOT

README = TEMPLATE_ROOT / "README.md"
# Files the commands in the README write: cv2.imwrite('<file>', ...) and the client's --draw <file>.
WRITES = re.compile(r"imwrite\('([^']+)'|--draw (\S+)")


def written_files() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.DOTALL)
    return [a or b for block in blocks for a, b in WRITES.findall(block)]


def test_the_readme_writes_red_png_and_found_png():
    names = [name.rsplit("/", 1)[-1] for name in written_files()]
    assert "red.png" in names and "found.png" in names


def test_every_file_the_readme_writes_is_ignored_by_git():
    for name in written_files():
        result = subprocess.run(["git", "check-ignore", "-q", "--no-index", name], cwd=TEMPLATE_ROOT)
        assert result.returncode == 0, f"{name}, written by a README command, would show as an untracked file"


def test_every_podman_run_in_the_docs_has_the_options_the_image_test_runs_with():
    """The image test runs podman with the runtime and limits these hosts need; a README command without them
    fails with `error setting rlimit type 7`."""
    script = (TEMPLATE_ROOT / "scripts" / "test-image").read_text()
    options = re.search(r"^RUN_OPTIONS=\((.*?)\)", script, re.M).group(1)
    assert "--runtime runc" in options and "--ulimit nofile=" in options
    for root in (TEMPLATE_ROOT, ENGINE_TEMPLATE):
        pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
        commands = [(p, c) for p in pages for c in re.findall(r"^\s*podman run .*$", p.read_text(), re.M)]
        assert commands, f"neither {root.name}'s README nor its docs/ show a podman run command"
        for page, command in commands:
            assert f"podman run --rm {options} " in command, f"{page}: {command.strip()} lacks {options}"


def test_the_engine_docs_opencv_note_holds_for_the_pinned_opencv():
    """What docs/model.md says OpenCV 5 lacks, and what it offers instead, for the OpenCV the engine pins."""
    import os

    import cv2

    page = (ENGINE_TEMPLATE / "docs" / "model.md").read_text()
    assert "`cv2.CascadeClassifier` (Haar and LBP cascades) and `cv2.HOGDescriptor` are gone" in page
    assert cv2.__version__.startswith("5.")
    assert not hasattr(cv2, "CascadeClassifier") and not hasattr(cv2, "HOGDescriptor")
    assert not [f for f in os.listdir(cv2.data.haarcascades) if f.endswith(".xml")]
    assert hasattr(cv2, "FaceDetectorYN") and hasattr(cv2, "dnn")
