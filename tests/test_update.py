"""The template's command-line paths, run as a user runs them: cookiecutter with answers on the command line and
again from its replay file, and cruft creating an engine and later updating it to a newer template."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from template_paths import ENGINE_TEMPLATE, TEMPLATE_ROOT, uv

pytestmark = pytest.mark.bake

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Engine Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Engine Author",
    "GIT_COMMITTER_EMAIL": "author@example.com",
}
LEFT_BEHIND = shutil.ignore_patterns("__pycache__", ".pytest_cache", ".ruff_cache")


@pytest.fixture
def isolated(tmp_path) -> dict[str, str]:
    """An environment whose home and cookiecutter config are temporary, so the user's own are never touched."""
    home = tmp_path / "home"
    home.mkdir()
    config = tmp_path / "cookiecutter-config.yaml"
    config.write_text(
        f"cookiecutters_dir: {json.dumps(str(tmp_path / 'cookiecutters'))}\n"
        f"replay_dir: {json.dumps(str(tmp_path / 'replay'))}\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COOKIECUTTER_CONFIG")}
    env.update(GIT_IDENTITY, HOME=str(home), COOKIECUTTER_CONFIG=str(config), GIT_CONFIG_NOSYSTEM="1")
    return env


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{args} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts and "__pycache__" not in p.parts
    }


def test_answers_on_the_command_line_then_the_replay_bake_the_same_engine(tmp_path, isolated):
    cli = [sys.executable, "-m", "cookiecutter"]
    first, second = tmp_path / "first", tmp_path / "second"
    run(
        [
            *cli,
            "--no-input",
            str(TEMPLATE_ROOT),
            "engine_name=road-damage",
            "task_type=Image Segmentation",
            "-o",
            str(first),
        ],
        tmp_path,
        isolated,
    )
    engine = first / "road-damage"
    model = (engine / "src" / "road_damage" / "model.py").read_text()
    assert "TaskType.IMAGE_SEGMENTATION" in model
    assert "road-damage" in (engine / "deploy" / "kserve" / "servingruntime.yaml").read_text()

    replays = list((tmp_path / "replay").glob("*.json"))
    assert len(replays) == 1, "the replay went somewhere other than the configured replay_dir"
    assert json.loads(replays[0].read_text())["cookiecutter"]["task_type"] == "Image Segmentation"
    assert not any(Path(isolated["HOME"]).iterdir()), "cookiecutter wrote into the home directory"

    run([*cli, "--replay", str(TEMPLATE_ROOT), "-o", str(second)], tmp_path, isolated)
    assert tree(second / "road-damage") == tree(engine)


def copy_template(destination: Path) -> None:
    destination.mkdir()
    shutil.copy(TEMPLATE_ROOT / "cookiecutter.json", destination)
    shutil.copytree(TEMPLATE_ROOT / "hooks", destination / "hooks", ignore=LEFT_BEHIND)
    shutil.copytree(ENGINE_TEMPLATE, destination / ENGINE_TEMPLATE.name, ignore=LEFT_BEHIND)


def commit(repo: Path, message: str, env: dict[str, str]) -> str:
    run(["git", "add", "-A"], repo, env)
    run(["git", "commit", "-q", "-m", message], repo, env)
    return run(["git", "rev-parse", "HEAD"], repo, env).stdout.strip()


CRUFT = [sys.executable, "-m", "cruft"]


def template_repository(tmp_path: Path, env: dict[str, str]) -> Path:
    """A copy of the template as a git repository of one commit, as cruft reads templates."""
    template = tmp_path / "template"
    copy_template(template)
    run(["git", "init", "-q"], template, env)
    commit(template, "older template", env)
    return template


def cruft_engine(template: Path, answers: dict[str, str], tmp_path: Path, env: dict[str, str]) -> Path:
    """An engine `cruft create` bakes from `template`, committed to a git repository of its own."""
    projects = tmp_path / "projects"
    extra = json.dumps(answers)
    run(
        [*CRUFT, "create", str(template), "--no-input", "--output-dir", str(projects), "--extra-context", extra],
        tmp_path,
        env,
    )
    engine = projects / answers["engine_name"]
    run(["git", "init", "-q"], engine, env)
    commit(engine, "engine as baked", env)
    return engine


def uv_run(engine: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [uv(), *args], cwd=engine, env=env_without_uv(env), capture_output=True, text=True, timeout=300
    )


def locked(engine: Path) -> dict[str, str]:
    return {p["name"]: p["version"] for p in tomllib.loads((engine / "uv.lock").read_text())["package"]}


def test_cruft_update_brings_template_changes_and_keeps_the_users_model_and_dependencies(tmp_path, isolated):
    """The user's model and a dependency `uv add` wrote (below the comment closing the template's dependencies; a
    clashing one refused before it, changing nothing) stay through an update that changes the support package, the
    README, the demo and the template's own dependencies: the two dependency lists merge without a conflict, uv.lock
    is left as the engine had it, and `uv lock` then locks the merged pyproject.toml, moving nothing else."""
    assert importlib.util.find_spec("cruft"), "cruft is not installed here: pip install -r requirements-dev.txt"
    template = template_repository(tmp_path, isolated)
    engine = cruft_engine(template, {"engine_name": "road-sign", "task_type": "Object Detection"}, tmp_path, isolated)
    model_path = engine / "src" / "road_sign" / "model.py"
    assert "TaskType.OBJECT_DETECTION" in model_path.read_text()

    # The user puts their model in, as the README tells them to, and a dependency of it.
    users_model = model_path.read_text().replace('"""', '"""Road signs, found by our own network.\n\n', 1)
    model_path.write_text(users_model)
    # A package whose pins clash with the engine's (facenet-pytorch 2.6.0's pillow<10.3) is refused, naming the
    # clash, and leaves every file as it was.
    files = {name: (engine / name).read_bytes() for name in ("pyproject.toml", "uv.lock")}
    refused = uv_run(engine, isolated, "add", "--no-sync", "facenet-pytorch==2.6.0")
    assert refused.returncode != 0 and "pillow" in refused.stderr, refused.stderr
    assert {name: (engine / name).read_bytes() for name in files} == files, "a refused uv add changed the engine"
    added = uv_run(engine, isolated, "add", "--no-sync", "onnxruntime==1.32.0")
    assert added.returncode == 0, added.stderr
    commit(engine, "our model", isolated)
    ours = (engine / "uv.lock").read_bytes()

    # The template moves on: the support package, the README and the demo model all change.
    support = template / ENGINE_TEMPLATE.name / "src" / "chariot_support" / "__init__.py"
    support.write_text(support.read_text() + '\nTEMPLATE_REVISION = "newer"\n')
    readme = template / ENGINE_TEMPLATE.name / "README.md"
    readme.write_text(readme.read_text() + "\nA paragraph the newer template adds.\n")
    demo = template / ENGINE_TEMPLATE.name / "_tasks" / "object_detection" / "model.py"
    demo.write_text(demo.read_text() + "\n# The newer demo model.\n")
    pyproject = template / ENGINE_TEMPLATE.name / "pyproject.toml"
    text = pyproject.read_text()
    assert '    "uvloop>=0.21,<0.22",\n' in text
    pyproject.write_text(
        text.replace('    "uvloop>=0.21,<0.22",\n', '    "uvloop>=0.21,<0.22",\n    "zstandard==0.25.0",\n')
    )
    newer = commit(template, "newer template", isolated)

    checked = subprocess.run([*CRUFT, "check"], cwd=engine, env=isolated, capture_output=True, text=True, timeout=300)
    assert checked.returncode != 0, "cruft check should report the engine out of date before the update"

    run([*CRUFT, "update", "--skip-apply-ask"], engine, isolated)
    assert 'TEMPLATE_REVISION = "newer"' in (engine / "src" / "chariot_support" / "__init__.py").read_text()
    assert (engine / "README.md").read_text().endswith("A paragraph the newer template adds.\n")
    assert model_path.read_text() == users_model, "the update touched the user's model.py"
    assert not list(engine.rglob("*.rej")), "the update left conflicts"
    assert not (engine / "_tasks").exists()
    merged = (engine / "pyproject.toml").read_text()
    assert "<<<<<<<" not in merged
    dependencies = tomllib.loads(merged)["project"]["dependencies"]
    assert dependencies[-3:] == ["uvloop>=0.21,<0.22", "zstandard==0.25.0", "onnxruntime==1.32.0"], dependencies
    assert json.loads((engine / ".cruft.json").read_text())["commit"] == newer
    assert json.loads((engine / ".cookiecutter.json").read_text())["_template_commit"] == newer
    changed = run(["git", "status", "--porcelain"], engine, isolated).stdout.split("\n")
    assert sorted(line[3:] for line in changed if line) == [
        ".cookiecutter.json",
        ".cruft.json",
        "README.md",
        "pyproject.toml",
        "src/chariot_support/__init__.py",
    ]
    run([*CRUFT, "check"], engine, isolated)
    # uv.lock is the engine's own: never merged; the README's step after an update locks the merged pyproject.toml.
    assert (engine / "uv.lock").read_bytes() == ours
    assert uv_run(engine, isolated, "lock", "--check").returncode == 1, "the lock lacks the template's zstandard"
    before = locked(engine)
    relocked = uv_run(engine, isolated, "lock")
    assert relocked.returncode == 0, relocked.stderr
    after = locked(engine)
    assert after.pop("zstandard") == "0.25.0" and after == before, "locking again moved what it did not need to"


def test_baking_again_over_an_engine_keeps_the_users_model(tmp_path, isolated):
    """`cookiecutter -f -s` fills in files an engine lacks; the hook must not put the demo over the user's model."""
    cli = [sys.executable, "-m", "cookiecutter", "--no-input", str(TEMPLATE_ROOT), "engine_name=road-sign"]
    run([*cli, "-o", str(tmp_path)], tmp_path, isolated)
    engine = tmp_path / "road-sign"
    model_path, test_path = engine / "src" / "road_sign" / "model.py", engine / "tests" / "test_task.py"
    model_path.write_text(model_path.read_text() + "\n# our model\n")
    test_path.write_text(test_path.read_text() + "\n# our tests\n")
    (engine / "README.md").unlink()
    ours = tree(engine)

    run([*cli, "-o", str(tmp_path), "--overwrite-if-exists", "--skip-if-file-exists"], tmp_path, isolated)
    again = tree(engine)
    assert again.pop("README.md"), "the missing README was not baked again"
    assert again == ours
    assert not (engine / "_tasks").exists()


def test_an_engine_baked_with_cookiecutter_links_to_cruft_with_the_answers_it_carries(tmp_path, isolated):
    """The README's `cruft link` records the engine's own answers (from .cookiecutter.json), not the template's
    defaults, so `cruft diff` shows nothing on an engine as baked."""
    template = template_repository(tmp_path, isolated)
    answers = {"engine_name": "road-sign", "task_type": "Image Segmentation", "description": 'Signs, "quoted"'}
    cli = [sys.executable, "-m", "cookiecutter", "--no-input", str(template), "-o", str(tmp_path)]
    run([*cli, *(f"{k}={v}" for k, v in answers.items())], tmp_path, isolated)
    engine = tmp_path / "road-sign"
    carried = json.loads((engine / ".cookiecutter.json").read_text())
    # The template commit it was baked from, read from the template's git checkout by the bake hook.
    assert carried.pop("_template_commit") == run(["git", "rev-parse", "HEAD"], template, isolated).stdout.strip()
    questions = {k for k in json.loads((TEMPLATE_ROOT / "cookiecutter.json").read_text()) if not k.startswith("_")}
    assert set(carried) == questions, "the engine must carry every answer the template asks for"
    assert {k: carried[k] for k in answers} == answers
    run(["git", "init", "-q"], engine, isolated)
    commit(engine, "engine as baked", isolated)
    readme = template / ENGINE_TEMPLATE.name / "README.md"
    readme.write_text(readme.read_text() + "\nA paragraph the newer template adds.\n")
    commit(template, "the template moves on before the engine is linked", isolated)

    # The README's routine: the engine's answers, and the commit it was baked from.
    extra = (engine / ".cookiecutter.json").read_text()
    link = ["link", str(template), "--checkout", json.loads(extra)["_template_commit"], "--no-input"]
    run([*CRUFT, *link, "--extra-context", extra], engine, isolated)
    assert json.loads((engine / ".cruft.json").read_text())["context"]["cookiecutter"]["engine_name"] == "road-sign"
    diff = run([*CRUFT, "diff", "--exit-code"], engine, isolated)
    assert not diff.stdout.strip(), diff.stdout[:3000]
    commit(engine, "linked", isolated)
    run([*CRUFT, "update", "--skip-apply-ask"], engine, isolated)
    assert (engine / "README.md").read_text().endswith("A paragraph the newer template adds.\n")


def test_what_an_update_leaves_unresolved_is_named_by_file_and_line_until_it_is_resolved(tmp_path, isolated):
    """cruft update leaves a clash between the user's change and the template's as conflict markers, and says all is
    well; the update check (and the engine's own suite, which runs it) names each file and line until it is fixed."""
    template = template_repository(tmp_path, isolated)
    engine = cruft_engine(template, {"engine_name": "road-sign", "task_type": "Object Detection"}, tmp_path, isolated)
    readme = engine / "README.md"
    ours = readme.read_text().replace("\nA Chariot inference engine", "\nOur engine finds road signs. A Chariot", 1)
    readme.write_text(ours)
    commit(engine, "our description", isolated)
    template_readme = template / ENGINE_TEMPLATE.name / "README.md"
    text = template_readme.read_text()
    template_readme.write_text(
        text.replace("{{ cookiecutter.description }}\n", "{{ cookiecutter.description }} (New.)\n", 1)
    )
    commit(template, "the description reworded", isolated)

    updated = run([*CRUFT, "update", "--skip-apply-ask"], engine, isolated)
    assert "Good work!" in updated.stdout, "cruft says all is well"
    lines = readme.read_text().splitlines()
    opening = next(i for i, line in enumerate(lines, start=1) if line.startswith("<" * 7))
    assert lines[opening].startswith("Our engine finds road signs."), "ours first, then the template's"
    (engine / "pyproject.toml.rej").write_text("@@ a change git could not place @@\n")  # as `git apply --reject` leaves

    check = [sys.executable, "-m", "chariot_support.dev.update_check"]
    env = {**isolated, "PYTHONPATH": str(engine / "src")}
    found = subprocess.run(check, cwd=engine, env=env, capture_output=True, text=True, timeout=60)
    assert found.returncode == 1, found.stdout + found.stderr
    assert f"  README.md:{opening}: {'<' * 7} ours" in found.stdout
    assert f"  README.md:{opening + 2}: {'=' * 7}" in found.stdout
    assert f"  README.md:{opening + 4}: {'>' * 7} theirs" in found.stdout
    assert "  pyproject.toml.rej: the template's changes to pyproject.toml that could not be applied" in found.stdout
    assert "What to do:" in found.stdout
    suite = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_environment.py"]
    own = subprocess.run(suite, cwd=engine, env=isolated, capture_output=True, text=True, timeout=300)
    assert own.returncode == 1 and f"README.md:{opening}: {'<' * 7} ours" in own.stdout, own.stdout[-3000:]

    resolved = lines[: opening - 1] + [lines[opening]] + lines[opening + 5 :]  # ours kept, the markers gone
    readme.write_text("\n".join(resolved) + "\n")
    (engine / "pyproject.toml.rej").unlink()
    clean = subprocess.run(check, cwd=engine, env=env, capture_output=True, text=True, timeout=60)
    assert clean.returncode == 0 and clean.stdout.startswith("Nothing left from a template update"), clean.stdout


# The last template commit before engines carried their answers in .cookiecutter.json.
BEFORE_ANSWERS = "99a0d2b^"


def template_at(revision: str, folder: Path, env: dict[str, str]) -> Path:
    """The template as it was at `revision` of this repository, as a git repository of one commit."""
    folder.mkdir()
    archive = subprocess.run(
        ["git", "archive", revision], cwd=TEMPLATE_ROOT, capture_output=True, check=True, timeout=60
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True, timeout=60)
    run(["git", "init", "-q"], folder, env)
    commit(folder, f"template at {revision}", env)
    return folder


def move_on(template: Path, env: dict[str, str]) -> str:
    """The template repository brought to this checkout's template, as a new commit."""
    for each in list(template.iterdir()):
        if each.name != ".git":
            shutil.rmtree(each) if each.is_dir() else each.unlink()
    for each in ("cookiecutter.json", "hooks", ENGINE_TEMPLATE.name):
        source = TEMPLATE_ROOT / each
        if source.is_dir():
            shutil.copytree(source, template / each, ignore=LEFT_BEHIND)
        else:
            shutil.copy(source, template / each)
    return commit(template, "this template", env)


def test_an_engine_baked_before_it_carried_its_answers_links_with_answers_written_by_hand(tmp_path, isolated):
    """The README's route for an engine without .cookiecutter.json: its answers written by hand on the command line,
    linked at the commit it was baked from, then updated to this template (which brings .cookiecutter.json) with
    nothing left to resolve."""
    template = template_at(BEFORE_ANSWERS, tmp_path / "template", isolated)
    baked_from = run(["git", "rev-parse", "HEAD"], template, isolated).stdout.strip()
    cli = [sys.executable, "-m", "cookiecutter", "--no-input", str(template), "-o", str(tmp_path)]
    run([*cli, "engine_name=road-sign", "task_type=Image Segmentation"], tmp_path, isolated)
    engine = tmp_path / "road-sign"
    assert not (engine / ".cookiecutter.json").exists()
    run(["git", "init", "-q"], engine, isolated)
    commit(engine, "engine as baked", isolated)

    missing = subprocess.run(
        [*CRUFT, "link", str(template), "--no-input", "--extra-context", ""],  # what $(cat .cookiecutter.json) gives
        cwd=engine,
        env=isolated,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode != 0 and "JSONDecodeError" in missing.stdout + missing.stderr
    defaults = json.loads((ENGINE_TEMPLATE.parent / "cookiecutter.json").read_text())
    answers = {k: v[0] if isinstance(v, list) else v for k, v in defaults.items() if not k.startswith("_")}
    answers |= {"engine_name": "road-sign", "task_type": "Image Segmentation"}
    link = ["link", str(template), "--checkout", baked_from, "--no-input", "--extra-context", json.dumps(answers)]
    run([*CRUFT, *link], engine, isolated)
    diff = run([*CRUFT, "diff", "--exit-code"], engine, isolated)
    assert not diff.stdout.strip(), diff.stdout[:3000]
    commit(engine, "linked", isolated)

    newest = move_on(template, isolated)
    run([*CRUFT, "update", "--skip-apply-ask"], engine, isolated)
    check = [sys.executable, "-m", "chariot_support.dev.update_check"]
    env = {**isolated, "PYTHONPATH": str(engine / "src")}
    left = subprocess.run(check, cwd=engine, env=env, capture_output=True, text=True, timeout=60)
    assert left.returncode == 0, left.stdout
    assert json.loads((engine / ".cookiecutter.json").read_text())["_template_commit"] == newest


# The last template commit of the flat support package: engines baked from it must update to the sub-packages.
FLAT_LAYOUT = "f68957f"


def test_an_engine_baked_from_the_flat_layout_updates_and_its_own_suite_stays_green(tmp_path, isolated):
    """An engine baked before the support package had sub-packages updates with cruft, keeps the model.py and
    test_task.py its author owns (which import the old module names), and passes its own tests."""
    template = template_at(FLAT_LAYOUT, tmp_path / "template", isolated)
    engine = cruft_engine(template, {"engine_name": "road-sign", "task_type": "Object Detection"}, tmp_path, isolated)
    owned = {name: (engine / name).read_text() for name in ("src/road_sign/model.py", "tests/test_task.py")}
    assert "from chariot_support.demo import" in owned["src/road_sign/model.py"]

    move_on(template, isolated)
    run([*CRUFT, "update", "--skip-apply-ask"], engine, isolated)

    assert (engine / "src" / "chariot_support" / "model" / "demo.py").is_file()
    assert not (engine / "src" / "chariot_support" / "demo.py").exists()
    assert {name: (engine / name).read_text() for name in owned} == owned, "the update touched the author's files"
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=engine,
        env=isolated,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert suite.returncode == 0, suite.stdout[-4000:] + suite.stderr[-2000:]
    assert "is now chariot_support.model.demo" in suite.stdout, "the old module name should say where it went"


# The last template commit before engines were uv projects (constraints.txt, and the `deps` commands that wrote it).
BEFORE_UV_LOCK = "49777e4"


def test_an_engine_from_before_uv_lock_moves_to_it_with_the_readmes_step_keeping_its_own_pins(tmp_path, isolated):
    """An engine whose dependency command added a package (to pyproject.toml, below the template's, and to
    constraints.txt) updates to this template: the update cannot place the template's new dependency section beside
    the engine's own lines (pyproject.toml.rej) nor delete the constraints.txt the engine changed, and the update
    check names both. With pyproject.toml resolved as the README says (the template's section, the engine's
    dependency below its closing comment), `git rm constraints.txt && uv lock` locks the engine's pin."""
    template = template_at(BEFORE_UV_LOCK, tmp_path / "template", isolated)
    engine = cruft_engine(template, {"engine_name": "road-sign", "task_type": "Object Detection"}, tmp_path, isolated)
    pyproject = engine / "pyproject.toml"
    closing = "    # puts them there), where template updates (cruft update) do not write.\n"
    assert closing in pyproject.read_text()
    pyproject.write_text(pyproject.read_text().replace(closing, closing + '    "six==1.17.0",\n'))
    with (engine / "constraints.txt").open("a") as constraints:  # what `deps add six==1.17.0` wrote there
        constraints.write("six==1.17.0\n")
    commit(engine, "our dependency", isolated)

    move_on(template, isolated)
    run([*CRUFT, "update", "--skip-apply-ask"], engine, isolated)
    check = [sys.executable, "-m", "chariot_support.dev.update_check"]
    env = {**isolated, "PYTHONPATH": str(engine / "src")}
    left = subprocess.run(check, cwd=engine, env=env, capture_output=True, text=True, timeout=60)
    assert left.returncode == 1, left.stdout
    assert "  constraints.txt: the versions engines kept before they were uv projects" in left.stdout
    assert "  pyproject.toml.rej: the template's changes to pyproject.toml that could not be applied" in left.stdout
    assert "`git rm constraints.txt && uv lock`" in left.stdout

    # Resolved by hand: the template's pyproject.toml for this engine, the engine's own dependency below the comment.
    answers = {"engine_name": "road-sign", "task_type": "Object Detection"}
    fresh = Path(cookiecutter_bake(answers, tmp_path / "fresh")) / "pyproject.toml"
    closing = "    # where template updates (cruft update) do not write.\n"
    pyproject.write_text(fresh.read_text().replace(closing, closing + '    "six==1.17.0",\n'))
    (engine / "pyproject.toml.rej").unlink()
    assert uv_run(engine, isolated, "lock", "--check").returncode == 1, "the template's lock lacks the engine's six"
    run(["bash", "-c", "git rm -q constraints.txt && uv lock"], engine, {**env_without_uv(isolated), "PATH": uv_path()})
    assert locked(engine)["six"] == "1.17.0" and uv_run(engine, isolated, "lock", "--check").returncode == 0
    clean = subprocess.run(check, cwd=engine, env=env, capture_output=True, text=True, timeout=60)
    assert clean.returncode == 0, clean.stdout


def cookiecutter_bake(answers: dict[str, str], out: Path) -> str:
    from cookiecutter.main import cookiecutter

    return cookiecutter(str(TEMPLATE_ROOT), no_input=True, extra_context=answers, output_dir=str(out))


def env_without_uv(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("UV_")}


def uv_path() -> str:
    return os.pathsep.join([str(Path(uv()).parent), os.environ["PATH"]])
