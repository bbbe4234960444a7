"""The support package keeps the layout that shows its architecture: a handful of modules at its top, the rest in
sub-packages that each say what they own, layers that depend one way, and no module so long that it holds two
concerns."""

import ast
import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import chariot_support
from template_paths import SUPPORT_SRC

PACKAGE = SUPPORT_SRC / "chariot_support"
MOST_AT_THE_TOP = 8
MOST_LINES = 400

# The layers of the support package, lowest first: a module imports only from its own sub-package (or top module) and
# from layers below its own, never from one beside it or above it. Each entry is a sub-package or a module at the top.
LAYERS = (
    ("errors", "settings", "model_id"),  # what every layer needs: the error types, the settings, the model-id rule
    # The `{"error"}` writer, the work after answers, refusals counted, a request's stages (their times and histograms).
    ("error_bodies", "after_answer", "refusals", "stages"),
    ("model", "seams"),  # what an author's model.py sees; every use of MLServer's, uvicorn's and gRPC's internals
    ("__init__", "protocols", "logs"),  # the public surface; the wire formats; the log lines and request ids
    ("memory",),  # the budgets of request bodies and decoded pixels
    ("triton",),  # Triton's statistics and model configuration, which the pipeline counts and the transports serve
    ("pipeline", "runtime"),  # the one way to the model; the model's side of it (threads, copies, batching)
    ("rest", "grpc"),  # the transports
    ("server",),  # the transports and the pipeline assembled, start-up and shutdown
    ("client",),  # the command-line client, which sends requests as Chariot does
    ("__main__", "dev"),  # a task's demo engine; a developer's helpers (tests send requests as the client does)
    ("evaluate",),  # scoring an engine on a dataset, with the client and the developer's helpers
)
LAYER = {part: index for index, parts in enumerate(LAYERS) for part in parts}
DOTTED = re.compile(r"chariot_support(\.\w+)+(:\w+)?")  # a module named in a string (MLServer's implementation)


def test_few_modules_at_the_top_and_each_sub_package_says_what_it_owns():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MOST_AT_THE_TOP, top
    for folder in sorted(p for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"):
        init = folder / "__init__.py"
        assert init.is_file(), f"{folder.name}/ is not a package"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{folder.name}/__init__.py does not say what it owns"


def test_no_module_is_longer_than_a_concern_needs():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MOST_LINES
    }
    assert not long, f"split these by concern: {long}"


def test_what_a_models_file_imports_is_the_packages_own_surface():
    assert set(chariot_support.__all__) >= {"ChariotModel", "Image", "TaskType", "Detection", "BadRequest"}
    for name in chariot_support.__all__:
        assert getattr(chariot_support, name) is not None, name


def part_of(module: str) -> str:
    """The sub-package or top module that `module` (chariot_support.x.y) belongs to; `__init__` for the package."""
    name = module.split(".")[1] if "." in module else "__init__"
    return name if (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file() else "__init__"


def imports_of(path: Path) -> Iterator[tuple[int, str]]:
    """Every support-package module `path` imports, with its line: at the top or inside a function, absolute or
    relative, and modules named in strings (MLServer loads the runtime by its dotted name)."""
    here = ["chariot_support", *path.relative_to(PACKAGE).with_suffix("").parts]
    package = here[:-1]  # what a relative import starts from; a package's __init__ is in it
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module == "chariot_support":  # `from chariot_support import model_id`: the module, or the surface
                yield from ((node.lineno, f"{module}.{alias.name}") for alias in node.names)
            else:
                yield node.lineno, module
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.fullmatch(node.value):
            module = node.value.partition(":")[0]
            if part_of(module) != "__init__":  # not a logger's name, such as chariot_support.requests
                yield node.lineno, module


def layering_problems() -> list[str]:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        own = part_of(".".join(["chariot_support", *path.relative_to(PACKAGE).with_suffix("").parts]))
        if own not in LAYER:
            problems.append(f"{where} is in {own!r}, which has no layer: add it to LAYERS in {Path(__file__).name}")
            continue
        for line, module in imports_of(path):
            if not module.startswith("chariot_support"):
                continue
            other = part_of(module)
            if other == own:
                continue
            if other not in LAYER:
                problems.append(f"{where}:{line} imports {module}, in {other!r}, which has no layer")
            elif LAYER[other] >= LAYER[own]:
                kind = "beside" if LAYER[other] == LAYER[own] else "above"
                problems.append(
                    f"{where}:{line} imports {module}: {other!r} is {kind} {own!r} in the layers"
                    f" ({' < '.join('/'.join(parts) for parts in LAYERS)}); move the code it needs down, or hand it in"
                )
    return problems


def test_the_layers_depend_one_way():
    """No sub-package imports one beside or above it, so no two import each other: what every layer needs sits below
    them all, the framework's seams low, the pipeline in the middle, the transports above it, the server on top."""
    assert not layering_problems(), "\n".join(layering_problems())


def test_a_back_edge_is_named(tmp_path, monkeypatch):
    """The check reads imports inside functions, relative ones, and names in strings: the ways an edge hides."""
    fake = tmp_path / "chariot_support"
    for name, text in {
        "__init__.py": "",
        "errors.py": "",
        "seams/__init__.py": "",
        "seams/mlserver.py": "def later():\n    from ..rest import app\n",
        "rest/__init__.py": "",
        "rest/app.py": "from chariot_support.seams import mlserver\n",
        "server/__init__.py": "",
        "server/server.py": "RUNTIME = 'chariot_support.runtime.runtime.ChariotRuntime'\n",
        "runtime/__init__.py": "",
        "runtime/runtime.py": "from chariot_support.server.server import RUNTIME\n",
    }.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    problems = layering_problems()
    assert [p.split(" imports ")[0] for p in problems] == ["runtime/runtime.py:1", "seams/mlserver.py:2"], problems
    assert "'rest' is above 'seams'" in problems[1]


@pytest.mark.parametrize("old, new", sorted(chariot_support.MOVED.items()))
def test_an_old_module_name_is_the_new_module_itself_with_a_warning(old, new, monkeypatch):
    """An author's file that imports a module by its name in the flat layout gets that very module (a monkeypatch
    through the old name reaches the code that uses the new one), and a warning saying where it went."""
    monkeypatch.delitem(sys.modules, f"chariot_support.{old}", raising=False)
    monkeypatch.delattr(chariot_support, old, raising=False)
    with pytest.warns(FutureWarning, match=rf"chariot_support\.{old} is now chariot_support\.{new} "):
        moved = importlib.import_module(f"chariot_support.{old}")
    module = importlib.import_module(f"chariot_support.{new}")
    assert moved is module and getattr(chariot_support, old) is module
    assert module.__spec__.name == f"chariot_support.{new}", "the old name's import left its spec on the module"
    monkeypatch.setattr(moved, "written_through_the_old_name", True, raising=False)
    assert module.written_through_the_old_name


@pytest.mark.parametrize("old", ["tasks", "images", "drawing", "decoding"])
def test_names_no_authors_file_imported_are_gone(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"chariot_support.{old}")
