"""The reference tables of the engine's docs/ that the code writes (dev/reference.py) are what the code says now:
every setting with its default and what it takes, every MLServer variable the engine changes, every REST route and
gRPC method the engine serves, and every environment variable the engine's files name on the settings page."""

import re
from pathlib import Path

import pytest

from chariot_support.dev import reference
from chariot_support.rest.inference import route_of, route_template
from chariot_support.server.server import ENGINE_DEFAULTS
from chariot_support.settings import EngineSettings
from template_paths import ENGINE_TEMPLATE

DOCS = ENGINE_TEMPLATE / "docs"
REGENERATE = f"PYTHONPATH='{ENGINE_TEMPLATE.name}/src' .venv/bin/python -m chariot_support.dev.reference"
ROW = re.compile(r"^\| `(?P<name>[A-Z_]+)` \| (?P<default>[^|]+) \|")
# Names in the engine's files that look like variables and are not: the chariot-v2 protocol's constant.
NOT_VARIABLES = {"CHARIOT_V2"}


def generated(page: str, name: str) -> str:
    """The table between `name`'s markers on `page`, as the page holds it."""
    text = (DOCS / page).read_text()
    return text.split(reference.begin(name) + "\n", 1)[1].split("\n" + reference.end(name), 1)[0]


@pytest.fixture
def served(released_metrics):
    """What the engine serves, read once a process from the demo server (its MLServer metrics are taken out of the
    registry again after the test that built it)."""
    return reference.served()


def test_the_settings_pages_tables_are_what_the_code_writes():
    assert generated("settings.md", "settings") == reference.settings_table(), f"run {REGENERATE}"
    assert generated("settings.md", "mlserver") == reference.mlserver_table(), f"run {REGENERATE}"


def test_the_protocol_pages_tables_are_what_the_engine_serves(served):
    rest, metrics, methods = served
    assert generated("protocol.md", "routes") == reference.routes_table(rest, metrics), f"run {REGENERATE}"
    assert generated("protocol.md", "grpc") == reference.grpc_table(methods), f"run {REGENERATE}"


def test_every_route_described_is_served_and_every_route_served_is_described(served):
    rest, metrics, methods = served
    assert set(reference.ROUTES) == set(rest + metrics)
    assert set(reference.GRPC) == set(methods)
    assert len(rest) == len(set(rest)), "a route is listed twice"


@pytest.mark.parametrize("template", reference.INFERENCE_ROUTES)
def test_each_inference_route_listed_is_one_the_front_answers(template):
    path = template.format(model_name="m-demo", model_version="1", path="m-demo:predict")
    kind, match = route_of(path)
    assert route_template(kind, match).replace("{path:path}", "{path}") == template


def test_a_setting_without_a_doc_is_refused_by_the_generator(monkeypatch):
    first = next(iter(EngineSettings.__dataclass_fields__.values()))
    monkeypatch.setattr(first, "metadata", {**first.metadata, "doc": ""})
    with pytest.raises(ValueError, match="MODEL_DIR has no doc in settings.py"):
        reference.settings_table()


def page_variables() -> dict[str, str]:
    rows = (ROW.match(line) for line in generated("settings.md", "settings").splitlines())
    return {m["name"]: m["default"].strip() for m in rows if m}


def test_the_page_lists_every_setting_and_no_other():
    assert set(page_variables()) == set(EngineSettings.variables())


@pytest.mark.parametrize("name", sorted(EngineSettings.variables()))
def test_the_page_gives_each_settings_default(name):
    default, shown = EngineSettings.variables()[name], page_variables()[name]
    if isinstance(default, bool):
        assert shown == ("on" if default else "off")
    elif shown.startswith("`"):
        literal = shown[1 : shown.index("`", 1)]
        assert type(default)(literal) == default if not isinstance(default, Path) else Path(literal) == default
    else:  # unset
        assert default == "" and shown == "(unset)", f"{name}'s default {default!r} is shown as {shown}"


def test_every_default_the_engine_gives_mlserver_is_on_the_page():
    named = {name for name, *_ in reference.MLSERVER}
    assert {f"MLSERVER_{key.upper()}" for key in ENGINE_DEFAULTS} <= named
    table = generated("settings.md", "mlserver")
    for key, value in ENGINE_DEFAULTS.items():
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        assert f"| `MLSERVER_{key.upper()}` | `{shown}` |" in table


def test_every_variable_the_engines_files_name_is_on_the_settings_page():
    """CHARIOT_* and MLSERVER_* names in the support package, the examples, the Dockerfile and the manifests."""
    files = [*(ENGINE_TEMPLATE / "src").rglob("*.py"), *(ENGINE_TEMPLATE / "_tasks").rglob("*.py")]
    files += [ENGINE_TEMPLATE / "Dockerfile", *(ENGINE_TEMPLATE / "deploy").rglob("*.yaml")]
    named = {n for f in files for n in re.findall(r"\b(?:CHARIOT|MLSERVER)_[A-Z0-9_]*[A-Z0-9]\b", f.read_text())}
    named |= {"MODEL_DIR", "MODEL_DEVICE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}
    page = (DOCS / "settings.md").read_text()
    assert named - NOT_VARIABLES, "no variable was found: the search itself is wrong"
    missing = sorted(n for n in named - NOT_VARIABLES if f"`{n}`" not in page)
    assert not missing, f"docs/settings.md does not document {missing}"


def test_the_command_rewrites_a_stale_table_and_the_check_names_it(tmp_path, served, capsys):
    for page in ("settings.md", "protocol.md"):
        (tmp_path / page).write_text((DOCS / page).read_text())
    stale = (tmp_path / "settings.md").read_text().replace("| `CHARIOT_THREADS` | `0` |", "| `CHARIOT_THREADS` | `4` |")
    (tmp_path / "settings.md").write_text(stale)
    assert reference.main(["--docs", str(tmp_path), "--check"]) == 1
    assert "out of date: settings.md (settings)" in capsys.readouterr().err
    assert (tmp_path / "settings.md").read_text() == stale, "--check changed the page"
    assert reference.main(["--docs", str(tmp_path)]) == 0
    assert (tmp_path / "settings.md").read_text() == (DOCS / "settings.md").read_text()
    assert reference.main(["--docs", str(tmp_path), "--check"]) == 0
