"""The decisions, apart from measuring: how a time budget is shared between the quick pass and the longer one, which
measured point to recommend and why, how many replicas of what size a target load needs, and whether the machine
was too busy for the figures to be trusted."""

from __future__ import annotations

import math
from dataclasses import dataclass

from chariot_support.dev.tune.candidates import Candidate
from chariot_support.dev.tune.load import Refused

MIN_SECONDS = 0.6  # the shortest measurement of one concurrency level worth taking
MIN_ANSWERS = 10  # requests one client must at least get answered in one level's measurement
QUICK_SHARE = 0.4  # of the budget, for measuring every candidate once (the rest: the best again, longer)
LONG_KEEP = 3  # candidates measured again, longer
LONGER = 1.5  # how much longer at least, else the quick figures stand
HEADROOM = 0.75  # a replica is sized to run at this share of the throughput it was measured at
# Another setting is recommended over the defaults only when it serves at least this many times their requests/s:
# two measurements of the same setting, on a quiet 2-CPU machine, differed by up to 8 % (the defaults of a real
# classifier at 2 clients: 423.5 then 393.6 requests/s), and a change of settings for less would follow the noise.
MIN_GAIN = 1.10


@dataclass
class Point:
    """One setting measured at one number of clients."""

    candidate: Candidate
    clients: int
    phase: str  # "quick" or "long"
    rps: float
    p50_ms: float
    p99_ms: float
    cpus_busy: float  # CPUs the engine's processes kept busy (CPU seconds over the measured seconds)
    peak_rss_mb: float
    gpu_mb: float | None
    errors: int
    error: str  # the commonest error, when there were any
    others_cpus: float  # CPUs the rest of the machine kept busy meanwhile
    requests: int = 0
    # Milliseconds an answered request spent in each stage the engine times (Triton's statistics over the run):
    # "queue" (admission and waiting for a thread, a copy or a batch), "decode", "predict", "results".
    stages: dict[str, float] | None = None

    @classmethod
    def failed(cls, candidate: Candidate, phase: str, why: str) -> Point:
        """A setting the engine could not be measured with (it did not start), for the table."""
        nan = float("nan")
        return cls(candidate, 0, phase, 0.0, nan, nan, nan, nan, None, 1, why, nan)

    @property
    def cpu_ms_per_request(self) -> float:
        return self.cpus_busy * 1000 / self.rps if self.rps else float("nan")

    @property
    def usable(self) -> bool:
        return not self.errors and self.rps > 0 and math.isfinite(self.p99_ms)


def warmup_s(seconds: float) -> float:
    """Seconds of load before a measurement of `seconds` starts counting."""
    return min(0.5, seconds / 3)


def quick_plan(budget_s: float, startup_s: float, candidates: int, levels: int, request_s: float = 0.0) -> float:
    """Seconds to measure each level in the quick pass: its share of the budget shared out over every candidate and
    level, at least MIN_SECONDS and MIN_ANSWERS requests of `request_s` one after another (with too little time, the
    last candidates are then left out: `fits`)."""
    share = budget_s * QUICK_SHARE
    shared = (share - candidates * startup_s) / (candidates * levels) - warmup_s(MIN_SECONDS)
    return max(MIN_SECONDS, MIN_ANSWERS * request_s, shared)


def too_slow(budget_s: float, startup_s: float, levels: int, seconds: float, request_s: float) -> str | None:
    """Why the budget cannot compare even two settings (the defaults and one other) at every level, with the
    minutes that would; None when it can."""
    needed = 2 * (startup_s + levels * (seconds + warmup_s(seconds)))
    if needed <= budget_s:
        return None
    return (
        f"one request takes {request_s:.2f} s here, so comparing even two settings at {levels} concurrency"
        f" level{'s' if levels > 1 else ''} ({MIN_ANSWERS} answers each at least) needs about"
        f" {math.ceil(needed / 60)} minutes: give --minutes {math.ceil(needed / 60)}, or fewer levels with"
        " --concurrency"
    )


def fits(elapsed_s: float, budget_s: float, startup_s: float, levels: int, seconds: float, measured: int) -> bool:
    """Whether one more candidate fits in what is left of the budget (the defaults and one other always do)."""
    return measured < 2 or elapsed_s + startup_s + levels * (seconds + warmup_s(seconds)) <= budget_s


def long_plan(left_s: float, startup_s: float, levels: int, quick_seconds: float, candidates: int) -> tuple[int, float]:
    """How many of the best candidates to measure again, and for how long each level, in the time left: only when
    each level can run at least LONGER times as long as in the quick pass (else the quick figures stand)."""
    for count in range(min(LONG_KEEP, candidates), 0, -1):
        seconds = (left_s - count * startup_s) / (count * levels) - warmup_s(quick_seconds * LONGER)
        if seconds >= LONGER * quick_seconds:
            return count, seconds
    return 0, 0.0


def ranked(points: list[Point]) -> list[Candidate]:
    """The candidates by the best throughput any of their levels reached without an error, best first (those with
    no such level left out)."""
    best: dict[Candidate, float] = {}
    for point in points:
        if point.usable:
            best[point.candidate] = max(best.get(point.candidate, 0.0), point.rps)
    return sorted(best, key=lambda c: -best[c])


def final(points: list[Point]) -> list[Point]:
    """The points that stand: a candidate's long-pass points where it has them, else its quick ones."""
    longer = {p.candidate for p in points if p.phase == "long"}
    return [p for p in points if p.phase == "long" or p.candidate not in longer]


@dataclass(frozen=True)
class Choice:
    point: Point
    bound_ms: float  # the p99 the choice kept within
    rule: str  # that bound, in words
    why: str


def clients(count: int) -> str:
    """'1 client', '4 clients'."""
    return f"{count} client{'s' if count > 1 else ''}"


def choose(points: list[Point], p99_ms: float | None = None) -> Choice:
    """The point with the most requests/s among those with no errors whose p99 is within `p99_ms`, or, without a
    budget, within twice the lowest p99 measured; a Refused when none qualifies."""
    standing = [p for p in final(points) if p.usable]
    if not standing:
        failed = next((p.error for p in points if p.error), "no request was answered")
        raise Refused(f"no setting served the pictures without errors ({failed})")
    lowest = min(p.p99_ms for p in standing)
    if p99_ms is not None:
        bound, rule = p99_ms, f"p99 within the budget of {p99_ms:g} ms (--p99-ms)"
    else:
        bound, rule = 2 * lowest, f"p99 within 2x the lowest measured ({lowest:.1f} ms x 2 = {2 * lowest:.1f} ms)"
    within = [p for p in standing if p.p99_ms <= bound]
    if not within:
        raise Refused(
            f"no setting kept p99 within {p99_ms:g} ms (--p99-ms): the lowest measured was {lowest:.1f} ms"
            f" ({next(p for p in standing if p.p99_ms == lowest).candidate.label}); raise the budget or make"
            " predict faster"
        )
    best = max(within, key=lambda p: (p.rps, -p.p99_ms))
    defaults = [p for p in within if p.candidate.is_default]
    base = max(defaults, key=lambda p: (p.rps, -p.p99_ms)) if defaults else None
    close = None
    if base is not None and not best.candidate.is_default and best.rps < MIN_GAIN * base.rps:
        close, best = best, base  # within the noise of the measurements: the defaults stand
    served = f"{best.candidate.label} at {clients(best.clients)} at once served {best.rps:.1f} requests/s with p99"
    served += f" {best.p99_ms:.1f} ms"
    why = f"{served}: the most of any setting with {rule}."
    if close is not None:
        why = (
            f"{served}, with {rule}. {close.candidate.label} served {close.rps:.1f} requests/s"
            f" ({close.rps / best.rps:.2f}x), less than the {MIN_GAIN:.2f}x that would stand out from the"
            " difference between two measurements of one setting: the engine's defaults stand."
        )
    elif best.candidate.is_default:
        why += " No other setting did better than the engine's defaults."
    elif base is not None:
        why += (
            f" The defaults, under the same bound, served {base.rps:.1f} requests/s (at {clients(base.clients)}):"
            f" {best.rps / base.rps:.2f}x as many with these settings."
        )
    else:
        why += " No measurement of the defaults kept within that bound."
    # Why, in the stages: the other setting against the defaults at the same number of clients.
    other = close or (None if best.candidate.is_default else best)
    defaults_there = [p for p in standing if p.candidate.is_default and other and p.clients == other.clients]
    if other is not None and defaults_there:
        why += stage_reason(other, max(defaults_there, key=lambda p: p.rps))
    return Choice(best, bound, rule, why)


# The stages the tool reads from the engine's statistics, as its reasons name them.
STAGES = {"queue": "queue time", "decode": "decode time", "predict": "predict time", "results": "results time"}


def stage_reason(point: Point, defaults: Point) -> str:
    """Where a request's time went with `point`'s setting against the defaults at the same clients, in the stages
    that moved most: ' At 8 clients, with copies=8: queue time fell from 140.0 to 3.0 ms a request; predict time
    rose from 20.0 to 21.0 ms.' Empty when either has no stages."""
    if not point.stages or not defaults.stages:
        return ""
    moved = sorted(STAGES, key=lambda s: abs(point.stages[s] - defaults.stages[s]), reverse=True)[:2]
    said = []
    for stage in moved:
        before, after = defaults.stages[stage], point.stages[stage]
        if abs(after - before) < 0.05 * max(before, after, 0.1):  # within a twentieth: not a reason
            continue
        said.append(f"{STAGES[stage]} {'fell' if after < before else 'rose'} from {before:.1f} to {after:.1f} ms")
    if not said:
        return ""
    return f" At {clients(point.clients)}, with {point.candidate.label}: {'; '.join(said)} a request."


@dataclass(frozen=True)
class Sizing:
    replicas: int
    cpu: str  # Kubernetes quantities, per replica
    memory_request: str
    memory_limit: str
    concurrency: int  # requests one replica is given at once (KServe's containerConcurrency)
    per_replica_rps: float  # planned, with headroom


def size(point: Point, target_rps: float) -> Sizing:
    """Replicas of the measured setting to serve `target_rps`, each planned at HEADROOM of the throughput measured;
    per replica, the CPUs the engine kept busy there (rounded up to a tenth) and its peak memory with a quarter more
    (requests) and half more (limits), rounded up to 64 MiB."""
    if target_rps <= 0:
        raise ValueError(f"--target-rps must be more than 0, got {target_rps:g}")
    per_replica = point.rps * HEADROOM
    cpu = max(0.1, math.ceil(point.cpus_busy * 10 - 1e-9) / 10)

    def mebibytes(factor: float) -> str:
        return f"{max(64, math.ceil(point.peak_rss_mb * factor / 64) * 64)}Mi"

    return Sizing(
        replicas=max(1, math.ceil(target_rps / per_replica)),
        cpu=f"{cpu:g}" if cpu >= 1 else f"{round(cpu * 1000)}m",
        memory_request=mebibytes(1.25),
        memory_limit=mebibytes(1.5),
        concurrency=point.clients,
        per_replica_rps=per_replica,
    )


def too_busy(others_cpus: float, cpus: int, most: float) -> str | None:
    """Why the figures cannot be trusted when the rest of the machine kept more than `most` CPUs busy (of `cpus`)
    while they were measured; None when it did not."""
    if others_cpus <= most:
        return None
    return (
        f"the machine was busy with other work while it was measured: {others_cpus:.2f} of its {cpus} CPUs on"
        f" average (more than --max-other-load {most:g}), so the figures would say more about that work than about"
        " the model; run it again when the machine is quieter, or on the kind of machine it will be deployed on"
    )
