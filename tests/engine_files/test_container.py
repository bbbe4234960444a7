"""The container recipe, checked without a Docker engine: the Dockerfile is parsed and held to what the engine and
its tests do (start command, ports, health path, Python version), constraints.txt to pyproject.toml, and the
HEALTHCHECK command is run against the real engine."""

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

try:
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ImportError:  # packaging is pinned in constraints.txt, but pip always carries a copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.utils import canonicalize_name
    from pip._vendor.packaging.version import Version

from baking import default_engine
from chariot_support.dev.testing import chariot_request, engine_package, free_port, image_input, run_engine
from chariot_support.server.server import ENGINE_DEFAULTS
from dockerfile import Instruction, command, commands, env_of, last, parse_dockerfile, uv_installs

ROOT = default_engine()
HEALTH_PATHS = {"/v2/health/ready", "/v2/health/live", "/ready"}  # the health routes the engine serves
SLIM_PYTHON = re.compile(r"(?:docker\.io/(?:library/)?)?python:(\d+\.\d+)(\.\d+)?-slim-[a-z]+(@sha256:[0-9a-f]+)?")
PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)")


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
def pins() -> dict[str, Version]:
    found: dict[str, Version] = {}
    for number, raw in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.fullmatch(line)
        assert match, f"constraints.txt line {number} is not name==version: {raw!r}"
        name = canonicalize_name(match["name"])
        assert name not in found, f"constraints.txt pins {name} twice"
        found[name] = Version(match["version"])
    return found


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


def test_installs_with_uv_from_the_engine_folder_with_the_constraints(stages):
    """uv installs the engine, as the README's install does, run where pyproject.toml is so that it leaves out what
    [tool.uv] exclude-dependencies lists; test_deps_lock.py runs these same commands and imports what they installed."""
    *build, final = stages
    assert uv_installs(build) == [
        ["uv", "pip", "install", "-c", "constraints.txt", "-r", "pyproject.toml"],
        ["uv", "pip", "install", "-c", "constraints.txt", "."],
    ], "the image installs pyproject.toml's run-time dependencies (their own layer), then the engine, with the pins"
    assert not [i for i in final if i.keyword == "RUN" and "install" in i.args], "the final image installs nothing"
    runs = [(i, args) for stage in build for i in stage if i.keyword == "RUN" for args in commands(i.args)]
    for _, args in runs:
        if "install" in args[:3]:
            assert "-c" in args and args[args.index("-c") + 1] == "constraints.txt", f"unconstrained install: {args}"
            assert not ("-r" in args and args[args.index("-r") + 1] == "constraints.txt"), (
                f"constraints.txt pins the test extra too; installing all of it puts test packages in the image: {args}"
            )
    pip_installs = [args for _, args in runs if args[0].endswith("pip") and "install" in args]
    assert pip_installs == [["/opt/uv/bin/pip", "install", "--no-cache-dir", "-c", "constraints.txt", "uv"]], (
        "pip installs only uv (the version constraints.txt pins), into an environment of its own that stays in the"
        f" build stage: {pip_installs}"
    )
    (stage,) = build
    env = env_of(stage)
    assert env.get("UV_NO_CACHE") == "1", "uv's cache would stay in a layer"
    assert env.get("VIRTUAL_ENV") == "/opt/venv" and env["PATH"].startswith("/opt/venv/bin:"), env
    assert ["python", "-m", "venv", "--without-pip", "/opt/venv"] in [args for _, args in runs]
    final_copies = [i.args for i in final if i.keyword == "COPY"]
    assert "--from=build /opt/venv /opt/venv" in final_copies, "only the engine's environment reaches the image"
    # uv reads exclude-dependencies from the pyproject.toml where it runs: the build's working directory.
    workdir = last(stage, "WORKDIR")
    copied = [i for i in stage if i.keyword == "COPY"]
    first_install = next(i for i, args in runs if args[:3] == ["uv", "pip", "install"])
    assert workdir is not None and copied and copied[0].line < first_install.line
    assert shlex.split(copied[0].args)[-1] in ("./", ".", workdir.args) and "pyproject.toml" in copied[0].args
    checks = [args for _, args in runs]
    check = checks.index(["python", "-m", "chariot_support.dev.deps", "check"])
    assert check > checks.index(["uv", "pip", "install", "-c", "constraints.txt", "."]), (
        "a second OpenCV must stop the build, checked once the engine is installed"
    )


def test_constraints_pin_every_dependency(pins, project):
    assert canonicalize_name(project["name"]) not in pins, "constraints.txt must not pin the engine itself"
    for dependency in project["dependencies"]:
        requirement = Requirement(dependency)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is in pyproject.toml but not pinned in constraints.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside pyproject's {requirement}"
        )


def test_constraints_pin_the_same_mlserver(pins, project):
    requirements = [Requirement(d) for d in project["dependencies"]]
    (mlserver,) = [r for r in requirements if canonicalize_name(r.name) == "mlserver"]
    (specifier,) = mlserver.specifier
    assert specifier.operator == "==", f"pyproject should pin mlserver exactly, found {mlserver}"
    assert pins["mlserver"] == Version(specifier.version)


def test_constraints_need_no_template_rendering():
    text = (ROOT / "constraints.txt").read_text()
    for opening in ("{" + "{", "{" + "%"):  # spelled apart: this file is rendered by cookiecutter too
        assert opening not in text, f"constraints.txt contains {opening!r}, which cookiecutter would try to render"


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
