"""The measuring: each candidate's engine started as in production (`python -m <package>`, loopback ports, the
candidate's variables), its pictures checked once, then driven at each concurrency level while its process tree's
CPU and memory and the rest of the machine's load are read; a quick pass over every candidate, then the best
measured again for longer, within the time given."""

from __future__ import annotations

import http.client
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from chariot_support.dev.testing import EngineDidNotStart, run_engine
from chariot_support.dev.tune import machine
from chariot_support.dev.tune.candidates import TUNED, Candidate, Served, candidates, concurrency_levels
from chariot_support.dev.tune.choose import (
    Point,
    choose,
    fits,
    long_plan,
    quick_plan,
    ranked,
    too_busy,
    too_slow,
    warmup_s,
)
from chariot_support.dev.tune.load import Refused, drive, request_body, send, summary_errors


@dataclass
class Plan:
    """What to run and with what."""

    module: str
    args: list[str]
    pictures: list[Path]
    budget_s: float
    env: dict[str, str] = field(default_factory=dict)  # MODEL_DIR and the like, for every candidate
    levels: list[int] | None = None  # None: from the machine
    max_other_load: float | None = None  # CPUs; None: a quarter of the machine's, at least half a CPU
    p99_ms: float | None = None  # the latency budget the choice keeps to (--p99-ms)
    quick: bool = False  # one brief pass over the candidates, no longer one (--quick)
    only: frozenset[str] | None = None  # the kinds of candidate to measure beside the defaults (--only); None: all


@dataclass
class Tuning:
    """What a run found."""

    served: Served  # how the engine serves with its defaults
    model: str  # the model's name in /v2/models/<name>/infer, and its class and task
    points: list[Point]
    tried: list[Candidate]
    left_out: list[Candidate]  # candidates the time did not allow
    startup_s: float
    others_cpus: float
    levels: list[int]
    seconds: float


class Progress:
    """A bar on stderr: the share of the time budget spent, the time left, and what is being measured."""

    def __init__(self, budget_s: float):
        self.start, self.budget = time.monotonic(), budget_s
        self.tty = sys.stderr.isatty()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def show(self, what: str) -> None:
        done = min(1.0, self.elapsed() / self.budget) if self.budget else 1.0
        left = max(0.0, self.budget - self.elapsed())
        bar = "#" * round(done * 30)
        line = f"[{bar:<30}] {done:4.0%} {int(left) // 60}:{int(left) % 60:02d} left  {what}"
        print(f"\r{line:<110}" if self.tty else line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def model_name(log: str) -> tuple[str, str]:
    """The model's name as the engine loaded it (`m-<id>`), and its class and task ("DemoDetector (Object
    Detection)"), from its log."""
    name, about = None, ""
    for line in log.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        name = name or (record.get("model") if isinstance(record.get("model"), str) else None)
        message = record.get("message", "")
        if isinstance(message, str) and message.startswith("loaded ") and ")" in message:
            about = message.removeprefix("loaded ").split(")", 1)[0] + ")"
    if not name:
        raise LookupError("the engine's log does not name its model")
    return name, about


@contextmanager
def started(plan: Plan, candidate: Candidate):
    """The engine with the candidate's settings, ready, and stopped afterwards; a Refused when it will not start."""
    try:
        # INFO at least: the settings line says how the engine serves.
        env = {**plan.env, "CHARIOT_LOG_LEVEL": "INFO", **candidate.env}
        with run_engine(plan.module, args=plan.args, env=env, unset=TUNED, timeout=300) as engine:
            yield engine
    except EngineDidNotStart as failure:
        raise Refused(f"the engine did not start with {candidate.label}: its log ends\n{failure.log[-2000:]}") from None


def check_pictures(port: int, path: str, pictures: Sequence[Path]) -> tuple[list[bytes], float]:
    """Each picture sent once: the request bodies and the median seconds one took, or a Refused naming the first the
    engine refused (4xx) or the model failed on (5xx)."""
    bodies, took = [], []
    for picture in pictures:
        body = request_body(picture)
        sent = time.perf_counter()
        status, answer = send(port, path, body)
        took.append(time.perf_counter() - sent)
        text = answer[:500].decode(errors="replace")
        if 400 <= status < 500:
            raise Refused(
                f"the engine refused {picture} (HTTP {status}: {text}): a picture the model does not take cannot be"
                " measured; leave it out of --images, or raise the limit the message names"
            )
        if status != 200:
            raise Refused(f"the model failed on {picture} (HTTP {status}: {text}); fix predict, then tune it")
        bodies.append(body)
    return bodies, statistics.median(took)


def measure(
    engine, path: str, bodies: list[bytes], candidate: Candidate, clients: int, seconds: float, phase: str
) -> Point:
    """Drive the engine with `clients` at once for `seconds` (after a short warm-up) and read what it cost."""
    own = os.getpid()
    pids = machine.process_tree(engine.process.pid)
    machine.reset_peak_rss(pids)
    warmup = warmup_s(seconds)
    probe = machine.LoadProbe(lambda: [*machine.process_tree(engine.process.pid), own])
    cpu_before, mine_before = machine.cpu_seconds(pids), time.process_time()
    stats_path = path.removesuffix("/infer") + "/stats"
    before = stage_totals(engine.http_port, stats_path)
    probe.start()
    outcome = drive(engine.http_port, path, bodies, clients, seconds, warmup)
    pids = machine.process_tree(engine.process.pid)
    spent = machine.cpu_seconds(pids) - cpu_before  # warm-up included: a small overestimate of CPU per request
    load = probe.stop(spent + time.process_time() - mine_before)
    return Point(
        candidate=candidate,
        clients=clients,
        phase=phase,
        rps=outcome.rps,
        p50_ms=outcome.percentile_ms(50),
        p99_ms=outcome.percentile_ms(99),
        cpus_busy=spent / (outcome.seconds + warmup),
        peak_rss_mb=machine.peak_rss_mb(pids),
        gpu_mb=machine.gpu_memory_mb(pids),
        errors=len(outcome.errors),
        error=summary_errors(outcome.errors),
        others_cpus=load["others_cpus"],
        requests=len(outcome.latencies),
        stages=stages_between(before, stage_totals(engine.http_port, stats_path)),
    )


# The stages the tool reports (choose.STAGES), by the field of Triton's statistics that counts each.
TRITON_FIELDS = {"queue": "queue", "decode": "compute_input", "predict": "compute_infer", "results": "compute_output"}


def stage_totals(port: int, path: str) -> dict[str, tuple[int, int]] | None:
    """The engine's statistics (Triton's, at `path`): each stage's count and nanoseconds so far; None when the
    engine does not answer them."""
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", path)
        reply = connection.getresponse()
        if reply.status != 200:
            return None
        (stats,) = json.loads(reply.read())["model_stats"]
    except (OSError, ValueError, KeyError, http.client.HTTPException):
        return None
    finally:
        connection.close()
    inference = stats["inference_stats"]
    return {stage: (inference[field]["count"], inference[field]["ns"]) for stage, field in TRITON_FIELDS.items()}


def stages_between(before: dict | None, after: dict | None) -> dict[str, float] | None:
    """Milliseconds a request spent in each stage between two readings of the statistics (warm-up included)."""
    if before is None or after is None:
        return None
    counts = {stage: after[stage][0] - before[stage][0] for stage in after}
    if not all(counts.values()):
        return None
    return {stage: (after[stage][1] - before[stage][1]) / counts[stage] / 1e6 for stage in after}


def tune(plan: Plan) -> Tuning:
    """Measure the candidates for the engine in `plan`; a Refused when what it would measure is not the model's."""
    progress = Progress(plan.budget_s)
    cpus, gpus = machine.usable_cpus(), len(machine.gpus())
    most = plan.max_other_load if plan.max_other_load is not None else default_max_other_load(cpus)
    progress.show("measuring the machine's other load")
    before = quiet_load()
    if reason := too_busy(before, cpus, most):
        raise Refused(f"before the run, {reason}")
    points: list[Point] = []
    progress.show("starting the engine with its defaults")
    began = time.monotonic()
    with started(plan, Candidate()) as engine:
        startup = time.monotonic() - began
        log = engine.log()
        try:
            served, (model, about) = Served.from_log(log), model_name(log)
        except LookupError as missing:
            raise Refused(f"cannot tell how the engine serves: {missing}") from None
        path = f"/v2/models/{model}/infer"
        bodies, request_s = check_pictures(engine.http_port, path, plan.pictures)
        engine_mb = machine.peak_rss_mb(machine.process_tree(engine.process.pid))
        memory_mb = machine.describe()["memory_gib"] * 1024
        everything = only(candidates(served, cpus, gpus, engine_mb=engine_mb, memory_mb=memory_mb), plan.only)
        levels = plan.levels or concurrency_levels(served, cpus)
        seconds = quick_plan(plan.budget_s, startup, len(everything), len(levels), request_s)
        if plan.quick:  # each level as briefly as is worth it, and no second pass
            seconds = quick_plan(0, 0, len(everything), len(levels), request_s)
        if reason := too_slow(plan.budget_s, startup, len(levels), seconds, request_s):
            raise Refused(reason)
        for clients in levels:
            progress.show(f"defaults, {clients} client(s)")
            points.append(measure(engine, path, bodies, Candidate(), clients, seconds, "quick"))

    def pass_over(chosen: list[Candidate], each_s: float, phase: str) -> None:
        for candidate in chosen:
            progress.show(f"{phase}: starting {candidate.label}")
            began = time.monotonic()
            try:
                with started(plan, candidate) as running:
                    for clients in levels:
                        progress.show(f"{phase}: {candidate.label}, {clients} client(s)")
                        points.append(measure(running, path, bodies, candidate, clients, each_s, phase))
            except Refused as failure:  # a setting the engine cannot start with is a finding, not the end
                points.append(Point.failed(candidate, phase, failure.reason.strip().splitlines()[-1][:300]))
            # What a candidate costs beyond its measuring: its engine's start and stop.
            overheads.append(time.monotonic() - began - len(levels) * (each_s + warmup_s(each_s)))

    tried, left_out, overheads = [everything[0]], [], [startup]
    for candidate in everything[1:]:  # each while the budget allows: the slowest start so far, and the levels
        if fits(progress.elapsed(), plan.budget_s, max(overheads), len(levels), seconds, len(tried)):
            tried.append(candidate)
            pass_over([candidate], seconds, "quick")
        else:
            left_out.append(candidate)
    left = plan.budget_s - progress.elapsed()
    keep, longer = (0, 0.0) if plan.quick else long_plan(left, max(overheads), len(levels), seconds, len(tried))
    pass_over(to_measure_again(points, plan.p99_ms)[:keep], longer, "long")
    progress.close()
    others = statistics.median([p.others_cpus for p in points if p.usable] or [0.0])
    if reason := too_busy(others, cpus, most):
        raise Refused(reason, points)
    described = f"{model}: {about}" if about else model
    return Tuning(served, described, points, tried, left_out, startup, others, levels, progress.elapsed())


def only(everything: list[Candidate], kinds: frozenset[str] | None) -> list[Candidate]:
    """The defaults and the candidates of `kinds` (all with None); a Refused when none of them is one for this model
    and machine, naming the kinds that are."""
    if kinds is None:
        return everything
    kept = [c for c in everything if c.is_default or c.kind in kinds]
    if len(kept) < 2:
        possible = sorted({c.kind for c in everything if not c.is_default})
        raise Refused(
            f"--only {','.join(sorted(kinds))}: no such setting is a candidate for this model on this machine"
            f" (those that are: {', '.join(possible) or 'none'})"
        )
    return kept


def to_measure_again(points: list[Point], p99_ms: float | None) -> list[Candidate]:
    """The candidates worth a longer measurement, best first: the one the quick figures would recommend (so that
    the recommendation rests on the longer figures), then the rest by the most requests/s they reached."""
    try:
        first = [choose(points, p99_ms).point.candidate]
    except Refused:
        first = []
    return first + [c for c in ranked(points) if c not in first]


def default_max_other_load(cpus: int) -> float:
    """The most CPUs other work may keep busy while figures are taken: a quarter of the machine, at least half one."""
    return max(0.5, cpus / 4)


def quiet_load(seconds: float = 1.0) -> float:
    """CPUs the machine keeps busy, this process aside, over `seconds` of doing nothing."""
    mine = time.process_time()
    probe = machine.LoadProbe(lambda: [os.getpid()])
    probe.start()
    time.sleep(seconds)
    return probe.stop(time.process_time() - mine)["others_cpus"]
