"""Shared fixtures for the template's own tests.

The support package is plain Python that every baked engine carries unchanged, so it is
imported straight from the template folder and tested without baking.
"""

import sys
from pathlib import Path

TEMPLATE_ROOT = Path(__file__).resolve().parents[1]
ENGINE_TEMPLATE = TEMPLATE_ROOT / "{{cookiecutter.engine_name}}"
sys.path.insert(0, str(ENGINE_TEMPLATE / "src"))
