"""What a run writes: report.md (the machine, the model, every setting measured, the recommendation and why, and the
deployment for a target load), settings.env, and the KServe patch where the engine carries a manifest."""

from __future__ import annotations

import math
from pathlib import Path

from chariot_support.dev.tune.candidates import Served, settings_env
from chariot_support.dev.tune.choose import STAGES, Choice, Point, Sizing, final


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"


def table(points: list[Point]) -> str:
    """Every point measured, as a Markdown table; points superseded by a longer measurement are marked."""
    standing = {id(p) for p in final(points)}
    rows = [
        "| setting | pass | clients | requests/s | p50 ms | p99 ms | queue ms | decode ms | predict ms | results ms |"
        " CPU ms/request | CPUs busy | peak RSS MiB | GPU MiB | errors | other load (CPUs) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for p in points:
        phase = p.phase if id(p) in standing else f"{p.phase} (superseded)"
        stages = " | ".join(_number(p.stages.get(s) if p.stages else None, 2) for s in STAGES)
        rows.append(
            f"| {p.candidate.label} | {phase} | {p.clients} | {_number(p.rps)} | {_number(p.p50_ms)} |"
            f" {_number(p.p99_ms)} | {stages} | {_number(p.cpu_ms_per_request, 2)} | {_number(p.cpus_busy, 2)} |"
            f" {_number(p.peak_rss_mb, 0)} | {_number(p.gpu_mb, 0)} | {p.error.replace('|', '/') or 0} |"
            f" {_number(p.others_cpus, 2)} |"
        )
    return "\n".join(rows)


def kserve_patch(sizing: Sizing, env_text: str) -> str:
    """A merge patch for the engine's InferenceService (deploy/kserve/inferenceservice.yaml): replicas, the
    concurrency each is given, the settings and the resources per replica."""
    env = [line.split("=", 1) for line in env_text.splitlines() if line and not line.startswith("#")]
    lines = [
        "spec:",
        "  predictor:",
        f"    minReplicas: {sizing.replicas}",
        f"    maxReplicas: {sizing.replicas}",
        f"    containerConcurrency: {sizing.concurrency}",
        "    model:",
        "      env:",
        *(f'        - {{name: {key}, value: "{value}"}}' for key, value in env),
        "      resources:",
        f'        requests: {{cpu: "{sizing.cpu}", memory: {sizing.memory_request}}}',
        f'        limits: {{cpu: "{sizing.cpu}", memory: {sizing.memory_limit}}}',
    ]
    return "\n".join(lines) + "\n"


def write(
    out: Path,
    *,
    about: dict,
    served: Served | None,
    points: list[Point],
    choice: Choice | None,
    refused: str | None,
    sizing: Sizing | None,
    target_rps: float | None,
    manifest: Path | None,
) -> dict[str, Path]:
    """Write report.md, and settings.env (and kserve-patch.yaml for a target load) when there is a recommendation;
    returns what was written, by name."""
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    machine = about["machine"]
    lines = [
        f"# Tuning {about['engine']}",
        "",
        f"- Machine: {machine['cpu']}; {machine['cpus']} usable CPUs (of {machine['cpu_count']});"
        f" {machine['memory_gib']:.1f} GiB memory; GPUs: {', '.join(machine['gpus']) or 'none'}",
        f"- Pictures: {about['pictures']}",
        f"- Run: {about['seconds']:.0f} s of a {about['budget_s']:.0f} s budget; {about['startup_s']:.1f} s to start"
        f" the engine; the rest of the machine kept {about['others_cpus']:.2f} CPUs busy (median over the run)",
    ]
    if served is not None:
        kind = (
            "thread-safe"
            if served.thread_safe
            else f"not thread-safe, {served.copies} cop" + ("y" if served.copies == 1 else "ies")
        )
        lines.insert(
            3,
            f"- Model: {about['model']}, {kind}; with its defaults the engine runs"
            f" {served.threads} threads in {'one process' if not served.workers else f'{served.workers} workers'}",
        )
    lines.append("")
    env_text = None
    if refused:
        lines += ["## No recommendation", "", f"The tool refused to recommend settings: {refused}.", ""]
    elif choice is not None:
        comment = f"{about['engine']}: {choice.why}"
        env_text = settings_env(choice.point.candidate, served, comment=comment)
        (out / "settings.env").write_text(env_text)
        written["settings.env"] = out / "settings.env"
        lines += [
            "## Recommendation",
            "",
            choice.why,
            "",
            "```",
            env_text.rstrip(),
            "```",
            "",
            "settings.env holds these lines: pass them to the container (`docker run --env-file settings.env`), or"
            " put them in the InferenceService's or Chariot's environment. The figures hold for this machine: on"
            " cores of another speed the throughput changes, the settings usually still fit.",
            "",
        ]
    if sizing is not None and env_text is not None:
        patch = kserve_patch(sizing, env_text)
        (out / "kserve-patch.yaml").write_text(patch)
        written["kserve-patch.yaml"] = out / "kserve-patch.yaml"
        where = f"`{manifest}`" if manifest else "the engine's InferenceService"
        lines += [
            f"## Deployment for {target_rps:g} requests/s",
            "",
            f"- {sizing.replicas} replica{'s' if sizing.replicas > 1 else ''}, each planned at"
            f" {sizing.per_replica_rps:.1f} requests/s ({round(100 * sizing.per_replica_rps / choice.point.rps)}% of"
            f" the {choice.point.rps:.1f} measured, to leave room for bursts)",
            f"- per replica: CPU {sizing.cpu} (what the engine kept busy at that load), memory request"
            f" {sizing.memory_request} and limit {sizing.memory_limit} (peak RSS {choice.point.peak_rss_mb:.0f} MiB"
            " with a quarter and a half more)",
            f"- {sizing.concurrency} request{'s' if sizing.concurrency > 1 else ''} at once per replica (KServe's"
            " containerConcurrency: the clients at once it was measured with)",
            "",
            f"A merge patch for {where} (kserve-patch.yaml; `kubectl patch inferenceservice NAME --type merge"
            " --patch-file kserve-patch.yaml`):",
            "",
            "```yaml",
            patch.rstrip(),
            "```",
            "",
        ]
    lines += [
        "## Every setting measured",
        "",
        "Each setting's engine was started as in production and sent the pictures in turn by a number of clients at"
        " once. Queue, decode, predict and results are the milliseconds an answered request spent in each, from the"
        " engine's own statistics (queue: waiting for room, a thread, a model copy or a batch). CPU and memory are"
        " the engine's whole process tree (workers included); other load is the rest of the machine, measured"
        " beside each run. A quick pass measured every setting; the best were then measured longer, and those"
        " figures stand.",
        "",
        table(points) if points else "(nothing was measured)",
        "",
    ]
    if about.get("only"):
        lines += [f"Measured beside the defaults: only settings of {about['only']} (--only).", ""]
    if about.get("left_out"):
        lines += [f"Not measured, for want of time (give more --minutes): {', '.join(about['left_out'])}.", ""]
    (out / "report.md").write_text("\n".join(lines))
    written["report.md"] = out / "report.md"
    return written
