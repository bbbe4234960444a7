"""`python -m chariot_support.dev.tune`: measure this engine's model under candidate settings and write report.md,
tune.png and settings.env (and kserve-patch.yaml for `--target-rps`) to `--out`."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from chariot_support.dev.engine import SRC, engine_command
from chariot_support.dev.tune import machine, plot, report
from chariot_support.dev.tune.candidates import KINDS
from chariot_support.dev.tune.choose import choose, size
from chariot_support.dev.tune.load import Refused, picture_files
from chariot_support.dev.tune.run import Plan, default_max_other_load, tune

DEFAULT_OUT = Path("tune-results")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m chariot_support.dev.tune",
        description="Start this engine as in production with candidate settings (threads, copies, workers,"
        " batching), drive it with your pictures at a sweep of concurrency, and recommend the settings that serve"
        " most within a latency bound, with the replicas and resources for a target load.",
        epilog="Exit status: 0 a recommendation written, 2 a usage mistake, 3 refused (the report says why).",
    )
    p.add_argument("--images", type=Path, help="a folder of pictures to send (default: this engine's samples/)")
    p.add_argument("--minutes", type=float, default=3.0, help="how long the whole run may take (default 3)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a first look: every setting measured once, as briefly as"
        " is worth it, and no longer second pass (--minutes still bounds the run)",
    )
    p.add_argument(
        "--only",
        metavar="KINDS",
        help="measure, beside the defaults, only settings of these kinds, e.g. copies or threads,batch (of"
        f" {', '.join(KINDS)}): when you know which can help, a shorter run",
    )
    p.add_argument("--p99-ms", type=float, help="the latency budget: the most requests/s with p99 within it")
    p.add_argument("--target-rps", type=float, help="size a deployment for this many requests/s")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where to write (default {DEFAULT_OUT}/)")
    p.add_argument("--engine", metavar="'MODULE [ARGS]'", help="what to start with `python -m` (default: this engine)")
    p.add_argument("--model-dir", type=Path, help="MODEL_DIR for the engines started (default: $MODEL_DIR)")
    p.add_argument(
        "--concurrency",
        help="clients at once to measure each setting at, e.g. 1,4,16 (default: 1, one per CPU and four per CPU)",
    )
    p.add_argument(
        "--max-other-load",
        type=float,
        metavar="CPUS",
        help="refuse when other work keeps more CPUs"
        " than this busy while measuring (default: a quarter of the CPUs, at least 0.5)",
    )
    return p


def levels(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        found = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        found = []
    if not found or found[0] < 1:
        raise ValueError(f"--concurrency takes whole numbers of at least 1 separated by commas, got {text!r}")
    return found


def kinds(text: str | None) -> frozenset[str] | None:
    if text is None:
        return None
    found = frozenset(part.strip() for part in text.split(",") if part.strip())
    if not found or found - set(KINDS):
        unknown = ", ".join(sorted(found - set(KINDS))) or "nothing"
        raise ValueError(f"--only takes kinds of setting among {', '.join(KINDS)}, separated by commas: got {unknown}")
    return found


def stop_on_sigterm() -> None:
    """SIGTERM (a `kill`, a CI runner's timeout) ends the run as Ctrl-C does: the engine it started is stopped."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    stop_on_sigterm()
    try:
        if args.minutes <= 0 or (args.p99_ms is not None and args.p99_ms <= 0):
            raise ValueError("--minutes and --p99-ms must be more than 0")
        if args.target_rps is not None and args.target_rps <= 0:
            raise ValueError(f"--target-rps must be more than 0, got {args.target_rps:g}")
        command = engine_command(args)
        if command is None:
            raise ValueError("cannot tell which engine to start from here: pass --engine PACKAGE")
        chosen_levels = levels(args.concurrency)
        chosen_kinds = kinds(args.only)
    except ValueError as mistake:
        print(f"error: {mistake}", file=sys.stderr)
        return 2
    module, engine_args = command
    cpus = machine.usable_cpus()
    about = {
        "engine": " ".join(["python -m", module, *engine_args]),
        "machine": machine.describe(),
        "pictures": "",
        "seconds": 0.0,
        "budget_s": args.minutes * 60,
        "startup_s": 0.0,
        "others_cpus": 0.0,
        "model": "?",
        "only": args.only and ", ".join(sorted(kinds(args.only))),
    }
    served, points, choice, refused, sizing = None, [], None, None, None
    try:
        pictures = picture_files(args.images or SRC.parent / "samples")
        about["pictures"] = f"{len(pictures)} from {pictures[0].parent} ({', '.join(p.name for p in pictures[:6])}" + (
            ", ...)" if len(pictures) > 6 else ")"
        )
        plan = Plan(
            module=module,
            args=engine_args,
            pictures=pictures,
            budget_s=args.minutes * 60,
            env={"MODEL_DIR": str(args.model_dir)} if args.model_dir else {},
            levels=chosen_levels,
            max_other_load=args.max_other_load if args.max_other_load is not None else default_max_other_load(cpus),
            p99_ms=args.p99_ms,
            quick=args.quick,
            only=chosen_kinds,
        )
        tuning = tune(plan)
        served, points = tuning.served, tuning.points
        about.update(
            seconds=tuning.seconds,
            startup_s=tuning.startup_s,
            others_cpus=tuning.others_cpus,
            model=tuning.model,
            left_out=[c.label for c in tuning.left_out],
        )
        choice = choose(points, args.p99_ms)
        sizing = size(choice.point, args.target_rps) if args.target_rps else None
    except Refused as refusal:
        refused, points = refusal.reason, points or refusal.points
    manifest = SRC.parent / "deploy" / "kserve" / "inferenceservice.yaml"
    written = report.write(
        args.out,
        about=about,
        served=served,
        points=points,
        choice=choice,
        refused=refused,
        sizing=sizing,
        target_rps=args.target_rps,
        manifest=manifest if manifest.is_file() else None,
    )
    bound = choice.bound_ms if choice else args.p99_ms
    title = f"{about['engine']}: requests/s against p99 latency"
    plot.draw(points, choice.point if choice else None, bound, title, args.out / "tune.png")
    for name in ("report.md", "tune.png", *sorted(set(written) - {"report.md"})):
        print(args.out / name)
    if refused:
        print(f"refused: {refused}", file=sys.stderr)
        return 3
    print(choice.why)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted: the engine it started is stopped, nothing was written", file=sys.stderr)
        sys.exit(130)
