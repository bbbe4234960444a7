"""Shared setup for the template's own tests.

The support package is plain Python that every baked engine carries unchanged, so it is imported straight
from the template folder (pytest.ini puts it on the path) and tested without baking. Engines the tests start
need it on their path too.
"""

import os

from template_paths import SUPPORT_SRC

os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SUPPORT_SRC), os.environ.get("PYTHONPATH")]))
