"""The support package keeps the layout that shows its architecture: a handful of modules at its top, the rest in
sub-packages that each say what they own, and no module so long that it holds two concerns."""

import ast
import importlib
import sys

import pytest

import chariot_support
from template_paths import SUPPORT_SRC

PACKAGE = SUPPORT_SRC / "chariot_support"
MOST_AT_THE_TOP = 8
MOST_LINES = 400


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
