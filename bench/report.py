"""Turn the measurements of every round into the summary table, its CSV and a chart of engine/baseline ratios."""

from __future__ import annotations

import csv
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# metric -> (column heading, unit, target for engine/baseline, whether higher is better)
METRICS: dict[str, tuple[str, str, float | None, bool]] = {
    "rps": ("throughput", "req/s", 0.95, True),
    "p50_ms": ("p50", "ms", None, False),
    "p99_ms": ("p99", "ms", 1.2, False),
    "cpu_ms": ("CPU per request", "ms", None, False),
    "rss_mb": ("peak RSS", "MB", None, False),
    "startup_s": ("startup", "s", None, False),
}
CPU_FLOOR_TARGET = 1.3  # engine CPU per request over the in-process floor, for single-image scenarios


@dataclass(frozen=True)
class Row:
    scenario: str
    metric: str
    engine: tuple[float, float, float]  # median, min, max over rounds
    baseline: tuple[float, float, float]
    floor: float | None  # in-process CPU ms per request, for the CPU metric

    @property
    def ratio(self) -> float:
        return self.engine[0] / self.baseline[0] if self.baseline[0] else float("nan")

    @property
    def floor_ratio(self) -> float | None:
        return self.engine[0] / self.floor if self.floor else None

    @property
    def target(self) -> str:
        heading, _, target, higher = METRICS[self.metric]
        if target is None:
            return ""
        return f"{'>=' if higher else '<='} {target}"

    @property
    def met(self) -> bool | None:
        _, _, target, higher = METRICS[self.metric]
        if target is None:
            return None
        return self.ratio >= target if higher else self.ratio <= target


def _spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def summarise(measurements: Iterable[Mapping], floors: Mapping[str, float] | None = None) -> list[Row]:
    """One row per scenario and metric: medians, minima and maxima over rounds for the engine and the baseline.

    `measurements` are dicts with `scenario`, `server` ("engine" or "baseline") and any of the METRICS keys.
    """
    floors = floors or {}
    grouped: dict[tuple[str, str, str], list[float]] = {}
    order: list[tuple[str, str]] = []
    for m in measurements:
        for metric in METRICS:
            if m.get(metric) is None:
                continue
            grouped.setdefault((m["scenario"], metric, m["server"]), []).append(float(m[metric]))
            if (m["scenario"], metric) not in order:
                order.append((m["scenario"], metric))
    rows = []
    for scenario, metric in order:
        engine = grouped.get((scenario, metric, "engine"))
        baseline = grouped.get((scenario, metric, "baseline"))
        if not engine or not baseline:
            continue
        floor = floors.get(scenario) if metric == "cpu_ms" else None
        rows.append(Row(scenario, metric, _spread(engine), _spread(baseline), floor))
    return rows


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def _cells(row: Row) -> list[str]:
    heading, unit, _, _ = METRICS[row.metric]
    engine_median, engine_min, engine_max = row.engine
    baseline_median, baseline_min, baseline_max = row.baseline
    floor = ""
    if row.floor is not None:
        floor = f"{_fmt(row.floor)} (x{row.floor_ratio:.2f})"
    met = {None: "", True: "yes", False: "NO"}[row.met]
    return [
        row.scenario,
        f"{heading} ({unit})",
        f"{_fmt(engine_median)} [{_fmt(engine_min)}-{_fmt(engine_max)}]",
        f"{_fmt(baseline_median)} [{_fmt(baseline_min)}-{_fmt(baseline_max)}]",
        f"{row.ratio:.2f}",
        row.target,
        met,
        floor,
    ]


HEADINGS = [
    "scenario",
    "metric",
    "engine median [min-max]",
    "baseline median [min-max]",
    "engine/baseline",
    "target",
    "met",
    "in-process floor (engine/floor)",
]


def table(rows: list[Row]) -> str:
    """A Markdown table, readable in a terminal and pasteable into a README."""
    lines = [HEADINGS, *(_cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADINGS))]
    out = []
    for index, line in enumerate(lines):
        out.append("| " + " | ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) + " |")
        if index == 0:
            out.append("|" + "|".join("-" * (width + 2) for width in widths) + "|")
    return "\n".join(out)


def write_csv(rows: list[Row], path: Path) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "scenario",
                "metric",
                "unit",
                "engine_median",
                "engine_min",
                "engine_max",
                "baseline_median",
                "baseline_min",
                "baseline_max",
                "ratio",
                "target",
                "met",
                "floor",
                "engine_over_floor",
            ]
        )
        for r in rows:
            _, unit, _, _ = METRICS[r.metric]
            writer.writerow(
                [
                    r.scenario,
                    r.metric,
                    unit,
                    *r.engine,
                    *r.baseline,
                    round(r.ratio, 4),
                    r.target,
                    "" if r.met is None else r.met,
                    "" if r.floor is None else r.floor,
                    "" if r.floor_ratio is None else round(r.floor_ratio, 4),
                ]
            )


def write_chart(rows: list[Row], path: Path, title: str) -> None:
    """Bars of engine/baseline per scenario for throughput, p99 and CPU, with the targets drawn as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = ("rps", "p99_ms", "cpu_ms")
    scenarios = [
        s for s in dict.fromkeys(r.scenario for r in rows) if any(r.scenario == s for r in rows if r.metric in shown)
    ]
    ratios = {(r.scenario, r.metric): r.ratio for r in rows}
    figure, axes = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(shown)
    for index, metric in enumerate(shown):
        xs = [i + (index - 1) * width for i in range(len(scenarios))]
        values = [ratios.get((s, metric), 0.0) for s in scenarios]
        axes.bar(xs, values, width, label=f"{METRICS[metric][0]} (engine/baseline)")
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.axhline(0.95, color="tab:blue", linestyle=":", linewidth=1, label="throughput target >= 0.95")
    axes.axhline(1.2, color="tab:orange", linestyle=":", linewidth=1, label="p99 target <= 1.2")
    axes.set_xticks(range(len(scenarios)), scenarios, rotation=15)
    axes.set_ylabel("engine / baseline (medians)")
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
