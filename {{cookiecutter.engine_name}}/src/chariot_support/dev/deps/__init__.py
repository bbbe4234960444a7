"""An engine's dependencies: add one and lock every version for the image, and check that no second OpenCV got in.

    python -m chariot_support.dev.deps add 'onnxruntime==1.32.0'   # add to pyproject.toml, then lock
    python -m chariot_support.dev.deps add 'rapidocr-onnxruntime==1.4.4' --without opencv-python
                                                                   # the same, leaving out the OpenCV it asks for
    python -m chariot_support.dev.deps add 'torch==2.9.1' --torch cpu
                                                                   # torch's CPU-only build, from PyTorch's index
    python -m chariot_support.dev.deps lock                        # resolve pyproject.toml again into constraints.txt
    python -m chariot_support.dev.deps lock --release protobuf     # the same, letting protobuf's pin move
    python -m chariot_support.dev.deps lock --override 'numpy'     # override a dependency's over-tight numpy pin
    python -m chariot_support.dev.deps check                       # this environment has one OpenCV, the headless one

Run it from the engine's folder. `add` and `lock` need Python and uv, not the engine: with `PYTHONPATH=src` they run
in a fresh clone before anything else is installed. Locking resolves pyproject.toml with every extra (test, eval)
with uv for the image's platform and Python (linux x86_64, the Python of the Dockerfile's base), wherever it runs,
holding every version constraints.txt already pins and leaving out the packages listed under pyproject.toml's
[tool.uv] exclude-dependencies, and writes every package of the resolution, exactly pinned, into constraints.txt.
`uv pip install -c constraints.txt` run in the engine's folder (the README's install and the Dockerfile's) installs
those versions, leaves out the same packages and takes torch from where pyproject.toml says. When uv cannot
resolve, the command says why, names the pins of constraints.txt that are in the way and, for `add`, every
requirement of the new dependency the engine refuses and the newest version of it that fits, and leaves
pyproject.toml and constraints.txt as they were.
"""

from chariot_support.dev.deps.cli import main
from chariot_support.dev.deps.lock import HEADER, changes, explain, lock, pins_in_the_way
from chariot_support.dev.deps.opencv import HEADLESS, OTHER_OPENCVS, opencv_conflicts, second_opencvs
from chariot_support.dev.deps.pyproject import (
    PYTORCH_CPU_INDEX,
    add_dependency,
    exclude,
    excluded,
    overridden,
    override,
    route_torch,
    template_dependencies,
    torch_index,
)
from chariot_support.dev.deps.uv import (
    INSTALL_UV,
    REINSTALL,
    Resolution,
    Target,
    find_uv,
    image_target,
    parse_resolution,
    read_pins,
    resolve,
)

__all__ = [
    "HEADER",
    "HEADLESS",
    "INSTALL_UV",
    "OTHER_OPENCVS",
    "PYTORCH_CPU_INDEX",
    "REINSTALL",
    "Resolution",
    "Target",
    "add_dependency",
    "changes",
    "exclude",
    "excluded",
    "explain",
    "find_uv",
    "image_target",
    "lock",
    "main",
    "opencv_conflicts",
    "override",
    "overridden",
    "parse_resolution",
    "pins_in_the_way",
    "read_pins",
    "resolve",
    "route_torch",
    "second_opencvs",
    "template_dependencies",
    "torch_index",
]
