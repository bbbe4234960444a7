"""The container recipe, checked without a Docker engine: the Dockerfile is parsed and held to what the engine and
its tests do (start command, ports, health path, Python version) and to uv's Docker guide, its install commands are
run (the engine and its run-time dependencies from uv.lock, nothing else) and the result serves, and the HEALTHCHECK
command is run against the real engine."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tomllib
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from baking import default_engine
from chariot_support.dev.testing import chariot_request, engine_package, free_port, image_input, run_engine
from chariot_support.server.server import ENGINE_DEFAULTS
from dockerfile import Instruction, command, commands, env_of, last, parse_dockerfile, run_flags, uv_syncs
from template_paths import TEMPLATE_ROOT, uv

ROOT = default_engine()
HEALTH_PATHS = {"/v2/health/ready", "/v2/health/live", "/ready"}  # the health routes the engine serves
SLIM_PYTHON = re.compile(r"(?:docker\.io/(?:library/)?)?python:(\d+\.\d+)(\.\d+)?-slim-[a-z]+(@sha256:[0-9a-f]+)?")


@pytest.fixture(scope="module")
def stages() -> list[list[Instruction]]:
    return parse_dockerfile((ROOT / "Dockerfile").read_text())


@pytest.fixture(scope="module")
def final(stages) -> list[Instruction]:
    return stages[-1]


@pytest.fixture(scope="module")
def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.fixture(scope="module")
def health_code(final) -> str:
    """The Python one-liner the HEALTHCHECK runs."""
    healthcheck = last(final, "HEALTHCHECK")
    assert healthcheck is not None, "the image has no HEALTHCHECK; Chariot's engines must answer health"
    match = re.fullmatch(r"((?:--\S+\s+)*)CMD\s+(.+)", healthcheck.args, re.I | re.S)
    assert match, f"HEALTHCHECK must run a command, found: {healthcheck.args}"
    args = command(match[2])
    assert Path(args[0]).name.startswith("python") and "-c" in args, f"HEALTHCHECK is not `python -c ...`: {args}"
    return args[args.index("-c") + 1]


def test_cmd_is_the_module_the_end_to_end_tests_start(final, engine):
    package = engine_package(ROOT / "src")
    cmd = last(final, "CMD")
    assert cmd is not None and cmd.args.startswith("["), "CMD must be in JSON form, so python is PID 1 and gets SIGTERM"
    assert command(cmd.args) == ["python", "-m", package]
    assert last(final, "ENTRYPOINT") is None, "an ENTRYPOINT would change what CMD starts"
    assert engine.process.args == [sys.executable, "-m", package], "the tests no longer start what the image runs"


def test_exposes_the_engine_ports(final):
    exposed = {int(port.split("/")[0]) for i in final if i.keyword == "EXPOSE" for port in i.args.split()}
    assert {ENGINE_DEFAULTS["http_port"], ENGINE_DEFAULTS["grpc_port"]} <= exposed
    assert {8080, 8081} <= exposed
    assert exposed <= {ENGINE_DEFAULTS[k] for k in ("http_port", "grpc_port", "metrics_port")}, (
        f"EXPOSE lists ports the engine does not open: {sorted(exposed)}"
    )


def test_healthcheck_targets_the_engine_health_route(health_code):
    urls = re.findall(r"http://127\.0\.0\.1:[^/'\"]+(/[^'\"\s]*)", health_code)
    assert len(urls) == 1, f"expected one loopback URL in the HEALTHCHECK, found {urls}: {health_code}"
    assert urls[0] in HEALTH_PATHS, f"{urls[0]} is not a health route the engine serves ({sorted(HEALTH_PATHS)})"
    assert health_code.count(str(ENGINE_DEFAULTS["http_port"])) == 1, "the HEALTHCHECK must target the REST port"


def run_health(code: str, *, port: int | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MLSERVER_HTTP_PORT"}
    if port is not None:
        env["MLSERVER_HTTP_PORT"] = str(port)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)


def test_healthcheck_command_passes_against_the_running_engine(health_code, engine):
    default_port = str(ENGINE_DEFAULTS["http_port"])
    # The image's port, swapped for the one the test engine listens on.
    result = run_health(health_code.replace(default_port, str(engine.http_port)))
    assert result.returncode == 0, result.stderr
    if "MLSERVER_HTTP_PORT" in health_code:  # it claims to follow the port override: hold it to that
        result = run_health(health_code, port=engine.http_port)
        assert result.returncode == 0, result.stderr


def test_healthcheck_command_reports_unhealthy_when_nothing_answers(health_code):
    port = str(free_port())
    result = run_health(health_code.replace(str(ENGINE_DEFAULTS["http_port"]), port), port=int(port))
    assert result.returncode == 1, f"Docker reads exit 1 as unhealthy (2 is reserved); got {result.returncode}"


def test_runs_as_a_numeric_non_root_user(final):
    user = last(final, "USER")
    assert user is not None, "the image would run as root"
    uid = user.args.split(":")[0]
    assert uid.isdigit(), f"USER {user.args}: a numeric UID lets Kubernetes' runAsNonRoot verify it"
    assert int(uid) != 0, "the image runs as root"


def test_base_image_is_slim_python_in_requires_python(stages, project):
    requires = SpecifierSet(project["requires-python"])
    for stage in stages:
        image = next(word for word in stage[0].args.split() if not word.startswith("--"))
        match = SLIM_PYTHON.fullmatch(image)
        assert match, f"{image} is not a python:X.Y-slim-<debian release> image"
        assert requires.contains(Version(match[1])), f"{image} is outside requires-python {requires}"


def test_installs_from_the_lock_as_uvs_docker_guide_has_it(stages):
    """The build stage follows uv's Docker guide: the dependencies from uv.lock in a layer of their own, made from
    pyproject.toml and uv.lock alone, then the engine; both checked against the lock (--locked), without the dev and
    eval groups, the engine installed as a package (not a link to the build folder), bytecode compiled, uv's cache in
    a cache mount; only the environment reaches the image, which installs nothing of its own."""
    *build, final = stages
    (stage,) = build
    syncs = uv_syncs(build)
    assert [args for _, args in syncs] == [
        ["uv", "sync", "--locked", "--no-dev", "--no-install-project", "--no-editable"],
        ["uv", "sync", "--locked", "--no-dev", "--no-editable"],
    ]
    copies = [i for i in stage if i.keyword == "COPY"]
    assert shlex.split(copies[0].args) == ["pyproject.toml", "uv.lock", "./"], "the dependencies' layer sees more"
    assert copies[0].line < syncs[0][0].line < copies[1].line < syncs[1][0].line and copies[1].args == ". ./"
    for instruction, _ in syncs:
        assert "--mount=type=cache,target=/root/.cache/uv" in run_flags(instruction.args)[0], instruction
    env = env_of(stage)
    assert env.get("UV_PROJECT_ENVIRONMENT") == "/opt/venv" and env.get("UV_COMPILE_BYTECODE") == "1", env
    assert env.get("UV_PYTHON_DOWNLOADS") == "never", "uv would fetch a Python of its own, not the base image's"
    assert "UV_NO_CACHE" not in env, "the cache mount keeps uv's downloads out of the layers"
    runs = [args for i in stage if i.keyword == "RUN" for args in commands(i.args)]
    pip_installs = [args for args in runs if args[0].endswith("pip") and "install" in args]
    assert pip_installs == [["/opt/uv/bin/pip", "install", "--no-cache-dir", f"uv=={uv_pin()}"]], pip_installs
    assert not [i for i in final if i.keyword == "RUN" and "install" in i.args], "the final image installs nothing"
    assert [i.args for i in final if i.keyword == "COPY"] == ["--from=build /opt/venv /opt/venv"]


def uv_pin() -> str:
    """The uv version the template's tests and engines use (requirements-dev.txt pins it)."""
    return re.search(r"^uv==(\S+)$", (TEMPLATE_ROOT / "requirements-dev.txt").read_text(), re.M)[1]


def test_the_images_install_holds_the_lock_without_the_dev_groups_and_serves(stages, tmp_path):
    """The Dockerfile's `uv sync` commands, run as the build runs them (an environment of their own, the engine's
    files copied as the build copies them): every package at the version uv.lock pins, none of the dev or eval
    groups, the engine itself installed as a package; and `python -m <package>` from that environment alone, with
    no source folder on the path, serves the demo and its page."""
    root = Path(shutil.copytree(ROOT, tmp_path / "build", ignore=shutil.ignore_patterns("tests", "samples")))
    environment = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PYTHONPATH", "VIRTUAL_ENV"))}
    env.update(env_of(stages[0]), UV_PROJECT_ENVIRONMENT=str(environment), UV_PYTHON=sys.executable)
    # Not what this checks, and the costly part here (half a minute of CPU): the image compiles every module's
    # bytecode; these tests keep theirs in PYTHONPYCACHEPREFIX. The image copies out of a cache mount; here uv's
    # cache is on the same disk.
    env.update(UV_COMPILE_BYTECODE="0", UV_LINK_MODE="hardlink")
    for _, args in uv_syncs(stages):
        done = subprocess.run([uv(), *args[1:]], cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{shlex.join(args)}:\n{done.stderr[-3000:]}"
    python = str(environment / "bin" / "python")
    listing = "import importlib.metadata as m, json; print(json.dumps({d.name: d.version for d in m.distributions()}))"
    installed = {
        canonicalize_name(k): v for k, v in json.loads(subprocess.check_output([python, "-c", listing])).items()
    }
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    locked = {p["name"]: p["version"] for p in lock["package"]}
    engine = canonicalize_name(ROOT.name)
    assert installed.pop(engine) == locked.pop(engine)
    assert {name: locked[name] for name in installed} == installed, "installed at versions other than the lock's"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for group in project["dependency-groups"].values():
        for requirement in group:
            assert canonicalize_name(re.split("[=<>!~ ;]", requirement)[0]) not in installed, requirement
    package = engine_package(ROOT / "src")
    for name in (package, "chariot_support"):  # in the environment itself, not a link to the build folder
        assert list(environment.glob(f"lib/python*/site-packages/{name}/__init__.py")), f"{name} is not installed"
    with run_engine(package, python=python, env={"PYTHONPATH": ""}, cwd=tmp_path) as running:
        body = json.dumps(chariot_request(image_input("image-0", np.zeros((32, 32, 3), np.uint8)))).encode()
        request = urllib.request.Request(f"{running.url}/v2/models/m-demo/infer/", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 200 and json.loads(response.read())["outputs"][0]["data"] == [[]]
        # The page at GET / is read from the installed package: its files went into the wheel.
        with urllib.request.urlopen(f"{running.url}/", timeout=30) as response:
            page = response.read().decode()
    assert "<script>'use strict';" in page and "grid-template-columns" in page


def test_dockerignore_keeps_tests_and_git_out():
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    excluded = {p.strip("/") for p in patterns if not p.startswith("!")}
    reincluded = {p[1:].strip("/") for p in patterns if p.startswith("!")}
    for needed in ("tests", "samples", ".git"):
        assert needed in excluded, f".dockerignore does not exclude {needed}"
        again = [p for p in reincluded if p == needed or p.startswith(f"{needed}/")]
        assert not again, f".dockerignore re-includes {again}"


SECRET_NAME = re.compile(r"KEY|TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIAL", re.I)


def test_no_secrets_are_baked_in(stages):
    for stage in stages:
        for instruction in stage:
            if instruction.keyword in {"ENV", "ARG"}:
                names = [p.partition("=")[0] for p in shlex.split(instruction.args)]
                assert not [n for n in names if SECRET_NAME.search(n)], (
                    f"line {instruction.line}: {instruction.keyword} {instruction.args} would keep a secret in the "
                    "image; pass secrets at run time"
                )


def test_dockerignore_keeps_local_secrets_out():
    patterns = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".env", "*.pem", "*.key", ".netrc", ".pypirc"} <= patterns
    assert not [p for p in patterns if p.startswith("!")], ".dockerignore re-includes something"


OTHER_UID = 12345


@functools.cache
def python_for_another_uid() -> tuple[str, list[str]]:
    """An interpreter the other UID may run, and the folders it must import from. The test's own interpreter can sit
    in root's private home (pyenv); the system's interpreter of the same version then runs this one's packages. Its
    compiled files are written once, as root, where the tests keep theirs (PYTHONPYCACHEPREFIX, which the engines
    inherit): the other UID reads them there, where its engines would otherwise compile every module they import,
    in every process, without being able to keep the result."""
    as_other = {"user": OTHER_UID, "group": 0, "extra_groups": []}
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    prefix = {"PYTHONPYCACHEPREFIX": os.environ["PYTHONPYCACHEPREFIX"]} if "PYTHONPYCACHEPREFIX" in os.environ else {}
    for python, paths in ((sys.executable, []), (f"/usr/bin/{version}", sysconfig.get_path("purelib").split())):
        env = {"PYTHONPATH": os.pathsep.join(paths), **prefix}
        try:
            if subprocess.run([python, "-c", ""], env=env, capture_output=True, timeout=60, **as_other).returncode:
                continue
        except OSError:
            continue
        subprocess.run([python, "-c", "import mlserver"], env=env, capture_output=True, timeout=60)
        if subprocess.run(
            [python, "-c", "import mlserver"], env=env, capture_output=True, timeout=60, **as_other
        ).returncode:
            continue
        return python, paths
    raise AssertionError(f"no interpreter with mlserver that UID {OTHER_UID} may run")


@pytest.mark.parametrize("workers", ["0", "2"])
def test_serves_as_a_random_uid_writing_only_under_the_temp_dir(final, tmp_path_factory, workers):
    """As on a cluster with a random UID and a read-only root filesystem: only the temp dir is writable, and the
    image's own environment must keep everything the engine writes inside it."""
    env = env_of(final)
    assert all(env[k].startswith("/tmp/") for k in env if k.endswith("_DIR") and k.startswith("MLSERVER_")), env
    base = Path(tempfile.mkdtemp(prefix="engine-"))  # outside pytest's private tmp folder, which other UIDs cannot read
    try:
        shutil.copytree(ROOT / "src", base / "src", ignore=shutil.ignore_patterns("__pycache__"))
        readonly = base / "home"  # HOME and the working directory, as the read-only image has them
        readonly.mkdir()
        temp = base / "tmp"
        temp.mkdir()
        for path in (base, *base.rglob("*")):
            path.chmod(0o1777 if path == temp else (0o555 if path.is_dir() else 0o444))
        env = {k: v.replace("/tmp/", f"{temp}/", 1) for k, v in env.items() if k not in {"PATH", "MODEL_DIR"}}
        env.update(HOME=str(readonly), TMPDIR=str(temp), MLSERVER_PARALLEL_WORKERS=workers)
        python, paths = sys.executable, []
        as_other = {}
        if os.geteuid() == 0:  # else the tests already run as a non-root UID
            as_other = {"user": OTHER_UID, "group": 0, "extra_groups": []}
            python, paths = python_for_another_uid()
        env["PYTHONPATH"] = os.pathsep.join([str(base / "src"), *paths])
        package = engine_package(ROOT / "src")
        with run_engine(package, env=env, python=python, cwd=readonly, **as_other) as engine:
            status = Path(f"/proc/{engine.process.pid}/status").read_text()
            uid = re.search(r"^Uid:\s+(\d+)", status, re.M)[1]
            assert int(uid) != 0 and (not as_other or uid == str(OTHER_UID)), status
            body = json.dumps(
                chariot_request(image_input("image-0", np.zeros((32, 32, 3), np.uint8), prompts=["what?"]))
            ).encode()
            request = urllib.request.Request(f"{engine.url}/infer", data=body, method="POST")
            with urllib.request.urlopen(request, timeout=60) as response:
                assert response.status == 200
            assert "Permission denied" not in engine.log() and "Read-only" not in engine.log(), engine.log()[-3000:]
        assert list(readonly.iterdir()) == []
        if workers != "0":
            assert (temp / "mlserver" / "metrics").is_dir(), "MLServer's metrics folder did not land in the temp dir"
    finally:
        for path in (base, *base.rglob("*")):
            path.chmod(0o700)
        shutil.rmtree(base)
