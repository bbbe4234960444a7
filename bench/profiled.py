"""Run `python -m <module>` under yappi, which sees every thread, and save a CPU profile when it exits:
`python bench/profiled.py <output.pstat> <module>`. The benchmark uses it for `--profile`."""

from __future__ import annotations

import atexit
import runpy
import sys

import yappi


def main() -> None:
    output, module = sys.argv[1], sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    yappi.set_clock_type("cpu")
    yappi.start()

    def save() -> None:
        yappi.stop()
        yappi.get_func_stats().save(output, type="pstat")

    atexit.register(save)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
