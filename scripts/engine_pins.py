"""The version of every package the engine's uv.lock pins, as requirement lines (`numpy==2.4.6`), for the template's
own installs (scripts/test's, the benchmark's, the GPU check's), which hold what they share with an engine to the
engine's lock: `python3 scripts/engine_pins.py > pins.txt`, then `-c pins.txt`. uv cannot read the template's
project itself (its name is a cookiecutter expression); the lock pins one version of each package."""

import sys
from pathlib import Path

import tomllib

LOCK = Path(__file__).resolve().parents[1] / "{{cookiecutter.engine_name}}" / "uv.lock"


def pins(lock: Path = LOCK) -> list[str]:
    packages = tomllib.loads(lock.read_text())["package"]
    # The engine itself is the lock's one package that comes from its own folder, not an index.
    found = [f"{p['name']}=={p['version']}" for p in packages if "registry" in p["source"]]
    names = [line.partition("==")[0] for line in found]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:  # the lock forks by platform or Python: one version per line cannot say it
        sys.exit(f"{lock} pins more than one version of {', '.join(duplicated)}")
    return found


if __name__ == "__main__":
    print("\n".join(pins()))
