"""Everything Chariot-specific an engine needs, identical in every baked engine; what an author's model.py imports is
this package's own surface (`from chariot_support import ChariotModel, Image, Detection, ...`)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from importlib import import_module
from typing import TYPE_CHECKING, Any

# Loaded on first use, so that the command-line client (chariot_support.client), which needs none of MLServer,
# starts in a fraction of a second instead of importing the whole server first.
_EXPORTS = {
    "BadRequest": "chariot_support.errors",
    "ChariotModel": "chariot_support.model.base",
    "Classification": "chariot_support.model.tasks",
    "Detection": "chariot_support.model.tasks",
    "Image": "chariot_support.model.image",
    "Letterbox": "chariot_support.model.detectors",
    "OrientedDetection": "chariot_support.model.tasks",
    "PromptAnswer": "chariot_support.model.tasks",
    "Segmentation": "chariot_support.model.tasks",
    "TaskType": "chariot_support.model.tasks",
    "contours_from_mask": "chariot_support.model.tasks",
    "corners": "chariot_support.model.detectors",
    "letterbox": "chariot_support.model.detectors",
    "nms": "chariot_support.model.detectors",
    "onnx_session": "chariot_support.model.onnx_session",
    "read_labels": "chariot_support.model.labels",
    "sigmoid": "chariot_support.model.detectors",
    "softmax": "chariot_support.model.detectors",
}
__all__ = [
    "BadRequest",
    "ChariotModel",
    "Classification",
    "Detection",
    "Image",
    "Letterbox",
    "OrientedDetection",
    "PromptAnswer",
    "Segmentation",
    "TaskType",
    "contours_from_mask",
    "corners",
    "letterbox",
    "nms",
    "onnx_session",
    "read_labels",
    "sigmoid",
    "softmax",
]


# Modules of the package's flat layout (before its sub-packages) that an author's own files imported (model.py,
# tests/test_task.py and the engine's tests, which template updates leave to their author), and where each lives
# now: the old name is the very module of the new one (writes and monkeypatches through either reach both), with a
# FutureWarning naming the new place. `deps` is here for the command `python -m chariot_support.deps`, which now says
# what uv command replaces it.
MOVED = {
    "base": "model.base",
    "demo": "model.demo",
    "testing": "dev.testing",
    "model_check": "dev.model_check",
    "deps": "dev.deps",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old name as the module of its new one, put in sys.modules under both names."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        package, _, old = fullname.partition(".")
        if package != __name__ or old not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec) -> types.ModuleType:
        module = import_module(f"{__name__}.{MOVED[spec.name.partition('.')[2]]}")
        spec.loader_state = module.__spec__  # the import system sets the old name's spec on it: put back in exec
        return module

    def exec_module(self, module) -> None:
        spec = module.__spec__
        module.__spec__ = spec.loader_state
        warnings.warn(
            f"{spec.name} is now {module.__name__} (the support package is in sub-packages): import from there",
            FutureWarning,
            stacklevel=2,
        )

    def get_code(self, fullname: str) -> types.CodeType:
        """`python -m chariot_support.deps ...` (runpy asks for the code to run): run the new name, saying it."""
        moved_to = f"{__name__}.{MOVED[fullname.partition('.')[2]]}"
        said = f"{fullname} is now {moved_to}"
        source = f"import runpy, sys\nprint({said!r}, file=sys.stderr)\n"
        source += f"runpy.run_module({moved_to!r}, run_name='__main__', alter_sys=True)\n"
        return compile(source, fullname, "exec")


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:
    from chariot_support.errors import BadRequest
    from chariot_support.model.base import ChariotModel
    from chariot_support.model.detectors import Letterbox, corners, letterbox, nms, sigmoid, softmax
    from chariot_support.model.image import Image
    from chariot_support.model.labels import read_labels
    from chariot_support.model.onnx_session import onnx_session
    from chariot_support.model.tasks import (
        Classification,
        Detection,
        OrientedDetection,
        PromptAnswer,
        Segmentation,
        TaskType,
        contours_from_mask,
    )
