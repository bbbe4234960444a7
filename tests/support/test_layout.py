"""The support package keeps the layout that shows its architecture: a handful of modules at its top, the rest in
sub-packages that each say what they own, and no module so long that it holds two concerns."""

import ast

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
