"""Where the template and its engine folder are, for the template's tests."""

from pathlib import Path

TEMPLATE_ROOT = Path(__file__).resolve().parents[1]
ENGINE_TEMPLATE = TEMPLATE_ROOT / "{{cookiecutter.engine_name}}"
SUPPORT_SRC = ENGINE_TEMPLATE / "src"


def uv() -> str:
    """The uv the template's tests run: the one requirements-dev.txt pins, installed beside this Python."""
    from uv import find_uv_bin

    return find_uv_bin()
