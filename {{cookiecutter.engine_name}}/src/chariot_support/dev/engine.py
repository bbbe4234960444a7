"""The engine a developer's tool asks (evaluate, tune): the one at `--url`, or this engine started here on free
loopback ports and stopped by its process id; its model id and task type read from its package and its metadata."""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from chariot_support.model.tasks import TaskType

SRC = Path(__file__).resolve().parents[2]  # the engine's src/ folder, where its own package sits beside this one


class EngineFailed(Exception):
    """The engine could not be started or reached, or answered something that is not its task's format."""


def engine_command(args: argparse.Namespace) -> tuple[str, list[str]] | None:
    """What `python -m` starts for an engine started here: `--engine`, else this engine's own package (None when it
    cannot be told: installed without its folder)."""
    from chariot_support.dev.testing import engine_package

    if args.engine:
        module, *engine_args = shlex.split(args.engine)
        return module, engine_args
    try:
        return engine_package(SRC), []
    except (LookupError, OSError):
        return None


def default_model_id(module: str | None) -> str | None:
    """The model id an engine package answers to when run locally (its DEFAULT_MODEL_ID, the id it was baked with),
    or None when it has none or cannot be imported here (the engine, started, then says why)."""
    try:
        found = getattr(importlib.import_module(module.split(".")[0]), "DEFAULT_MODEL_ID", None) if module else None
    except Exception:  # whatever the import raises, the engine raises too when it starts, and says so
        return None
    return found if isinstance(found, str) else None


def model_task(module: str | None) -> TaskType | None:
    """The task type of an engine package's model (`<package>.model.Model.task_type`), read without starting the
    engine, or None when it cannot be told here (no model.py, as for chariot_support's demos, or an import error)."""
    try:
        task = importlib.import_module(f"{module.split('.')[0]}.model").Model.task_type if module else None
    except Exception:  # as above: the engine, started, says why
        return None
    return task if isinstance(task, TaskType) else None


@contextmanager
def engine_url(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """The base URL of the engine to evaluate and what to call it: `--url`, or this engine started on free loopback
    ports and stopped (by its process id) when the evaluation ends."""
    if args.url:
        yield args.url.rstrip("/"), args.url
        return
    from chariot_support.dev.testing import EngineDidNotStart, run_engine

    command = engine_command(args)
    if command is None:
        raise EngineFailed("cannot tell which engine to start from here: pass --engine PACKAGE, or --url")
    module, engine_args = command
    env = {"MODEL_DIR": str(args.model_dir)} if args.model_dir else {}
    print(f"starting {module} {' '.join(engine_args)}".rstrip(), file=sys.stderr)
    try:
        with run_engine(module, env=env, args=engine_args, timeout=300) as running:
            yield running.url, " ".join([module, *engine_args])
    except EngineDidNotStart as failure:
        raise EngineFailed(str(failure)) from None


def task_of(url: str, model_id: str, headers: Sequence[tuple[str, str]]) -> TaskType:
    """The engine's task type, from its model metadata's platform (`chariot-v2-kserve_object_detection`)."""
    where = f"{url}/v2/models/m-{model_id}"
    request = urllib.request.Request(where, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            platform = json.loads(response.read()).get("platform", "")
    except (urllib.error.URLError, OSError, ValueError, AttributeError) as error:
        raise EngineFailed(
            f"cannot read the model's metadata at {where} ({error}); pass --task, or --model-id"
        ) from None
    slug = platform.split("_", 1)[-1]
    for task in TaskType:
        if task.name.lower() == slug:
            return task
    raise EngineFailed(f"{where} names no Chariot task type in its platform ({platform!r}); pass --task")
