"""Turn the measurements of every round into the summary table, its CSV and a chart of engine/baseline ratios."""

from __future__ import annotations

import csv
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# metric -> (column heading, unit, target for engine/baseline against bare MLServer, whether higher is better)
METRICS: dict[str, tuple[str, str, float | None, bool]] = {
    "rps": ("throughput", "req/s", 1.1, True),
    "p50_ms": ("p50", "ms", None, False),
    "p99_ms": ("p99", "ms", 1.2, False),
    "cpu_ms": ("CPU per request", "ms", 0.9, False),
    "rss_mb": ("peak RSS", "MB", None, False),
    "startup_s": ("startup", "s", None, False),
}
# Against bare MLServer the engine is held to more in two places. The tiny request is the engine's own overhead: it
# serves at least twice bare MLServer's requests in every round, not only in the median. A 640x480 detect request
# costs at most 1.10x its in-process floor (the decode and predict alone) in CPU.
EVERY_ROUND = {"tiny REST": 2.0}
FLOOR_TARGET = 1.10
FLOOR_SCENARIOS = ("detect REST", "detect gRPC")


@dataclass(frozen=True)
class Row:
    scenario: str
    metric: str
    engine: tuple[float, float, float]  # median, min, max over rounds
    baseline: tuple[float, float, float]
    floor: float | None  # in-process CPU ms per request, for the CPU metric: the median of the rounds' floors
    floor_range: tuple[float, float] | None = None  # the least and greatest of them
    rounds: tuple[float, ...] = ()  # engine/baseline round by round (the runs paired in the order they were made)
    held: bool = True  # held to the targets: the baseline is bare MLServer (not an earlier engine)
    floor_rounds: tuple[float, ...] = ()  # engine/floor round by round, for the CPU metric

    # The servers take turns within each round, so each round's ratio is free of the machine's drift between rounds:
    # the ratios are the median of the rounds' ones, as the peers' table gives them, not a ratio of two medians taken
    # from different rounds.

    @property
    def ratio(self) -> float:
        if self.rounds:
            return statistics.median(self.rounds)
        return self.engine[0] / self.baseline[0] if self.baseline[0] else float("nan")

    @property
    def floor_ratio(self) -> float | None:
        if self.floor_rounds:
            return statistics.median(self.floor_rounds)
        return self.engine[0] / self.floor if self.floor else None

    @property
    def _every_round(self) -> float | None:
        return EVERY_ROUND.get(self.scenario) if self.metric == "rps" else None

    @property
    def _floor_target(self) -> float | None:
        return FLOOR_TARGET if self.metric == "cpu_ms" and self.scenario in FLOOR_SCENARIOS else None

    @property
    def target(self) -> str:
        _, _, target, higher = METRICS[self.metric]
        if target is None or not self.held:
            return ""
        text = f"{'>=' if higher else '<='} {target}"
        if self._every_round is not None:
            text += f", each round >= {self._every_round:g}"
        if self._floor_target is not None:
            text += f", floor x <= {self._floor_target:g}"
        return text

    @property
    def met(self) -> bool | None:
        _, _, target, higher = METRICS[self.metric]
        if target is None or not self.held:
            return None
        met = self.ratio >= target if higher else self.ratio <= target
        if self._every_round is not None:
            met = met and bool(self.rounds) and min(self.rounds) >= self._every_round
        if self._floor_target is not None:
            met = met and self.floor_ratio is not None and self.floor_ratio <= self._floor_target
        return met


def _spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def summarise(
    measurements: Iterable[Mapping], floors: Mapping[str, float | Sequence[float]] | None = None, *, held: bool = True
) -> list[Row]:
    """One row per scenario and metric: medians, minima and maxima over rounds for the engine and the baseline.

    `measurements` are dicts with `scenario`, `server` ("engine" or "baseline") and any of the METRICS keys, in the
    order they were made (each round one run of each server); `floors`, each scenario's in-process floor, or the
    floors taken round by round. `held`: the targets apply (the baseline is bare MLServer). The ratios are medians
    of the rounds' ratios (Row.ratio).
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
        floor, floor_range, floor_rounds = floors.get(scenario) if metric == "cpu_ms" else None, None, ()
        if isinstance(floor, Sequence):
            if len(floor) == len(engine):
                floor_rounds = tuple(e / f for e, f in zip(engine, floor, strict=True) if f)
            median, low, high = _spread(list(floor))
            floor, floor_range = median, (low, high)
        rounds = tuple(e / b if b else float("nan") for e, b in zip(engine, baseline, strict=False))
        row = Row(scenario, metric, _spread(engine), _spread(baseline), floor, floor_range, rounds, held, floor_rounds)
        rows.append(row)
    return rows


def _fmt(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def _cells(row: Row) -> list[str]:
    heading, unit, _, _ = METRICS[row.metric]
    engine_median, engine_min, engine_max = row.engine
    baseline_median, baseline_min, baseline_max = row.baseline
    floor = ""
    if row.floor is not None:
        spread = f" [{_fmt(row.floor_range[0])}-{_fmt(row.floor_range[1])}]" if row.floor_range else ""
        floor = f"{_fmt(row.floor)}{spread} (x{row.floor_ratio:.2f})"
    met = {None: "", True: "yes", False: "NO"}[row.met]
    return [
        row.scenario,
        f"{heading} ({unit})",
        f"{_fmt(engine_median)} [{_fmt(engine_min)}-{_fmt(engine_max)}]",
        f"{_fmt(baseline_median)} [{_fmt(baseline_min)}-{_fmt(baseline_max)}]",
        f"{row.ratio:.2f}" + (f" [{min(row.rounds):.2f}-{max(row.rounds):.2f}]" if len(row.rounds) > 1 else ""),
        row.target,
        met,
        floor,
    ]


HEADINGS = [
    "scenario",
    "metric",
    "engine median [min-max]",
    "baseline median [min-max]",
    "engine/baseline, median of rounds [min-max]",
    "target",
    "met",
    "in-process floor median [min-max] (engine/floor, median of rounds)",
]


def table(rows: list[Row]) -> str:
    """A Markdown table, readable in a terminal and pasteable into a README."""
    return _md(HEADINGS, [_cells(r) for r in rows])


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
    if any(r.held for r in rows):
        for metric, colour in (("rps", "tab:blue"), ("p99_ms", "tab:orange"), ("cpu_ms", "tab:green")):
            heading, _, target, higher = METRICS[metric]
            label = f"{heading} target {'>=' if higher else '<='} {target:g}"
            axes.axhline(target, color=colour, linestyle=":", linewidth=1, label=label)
    axes.set_xticks(range(len(scenarios)), scenarios, rotation=15)
    axes.set_ylabel("engine / baseline (medians)")
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


# --- `--peers`: the engine beside each peer, ratio per round ---------------------------------------------------

PEER_RATIOS = ("rps", "p50_ms", "p99_ms", "cpu_ms", "rss_mb")
RUN_COLUMNS = ("rps", "p50_ms", "p99_ms", "cpu_ms", "rss_mb", "processes", "startup_s", "others_cpus", "load_1m")
RUN_HEADINGS = {
    "rps": "req/s",
    "p50_ms": "p50 (ms)",
    "p99_ms": "p99 (ms)",
    "cpu_ms": "CPU (ms/req)",
    "rss_mb": "peak RSS (MB)",
    "processes": "processes",
    "startup_s": "startup (s)",
    "others_cpus": "others (CPUs)",
    "load_1m": "load 1m",
}


def _order(measurements: Iterable[Mapping], key: str, first: Iterable[str] = ()) -> list[str]:
    seen = dict.fromkeys(k for k in first if any(m[key] == k for m in measurements))
    seen.update(dict.fromkeys(m[key] for m in measurements))
    return list(seen)


def peer_ratios(measurements: list[Mapping]) -> dict[tuple[str, str, str], tuple[float, float, float, int]]:
    """(scenario, server, metric) -> median, min and max over rounds of the engine's figure over the server's in the
    same round, and how many rounds had both."""
    by_round: dict[tuple[str, str, str], dict[int, float]] = {}
    for m in measurements:
        for metric in PEER_RATIOS:
            if m.get(metric) is not None:
                by_round.setdefault((m["scenario"], m["server"], metric), {})[m["round"]] = float(m[metric])
    ratios = {}
    for (scenario, server, metric), values in by_round.items():
        if server == "engine":
            continue
        engine = by_round.get((scenario, "engine", metric), {})
        per_round = [engine[r] / v for r, v in values.items() if r in engine and v]
        if per_round:
            ratios[(scenario, server, metric)] = (*_spread(per_round), len(per_round))
    return ratios


def _md(headings: list[str], lines: list[list[str]]) -> str:
    lines = [headings, *lines]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headings))]
    out = []
    for index, line in enumerate(lines):
        out.append("| " + " | ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) + " |")
        if index == 0:
            out.append("|" + "|".join("-" * (width + 2) for width in widths) + "|")
    return "\n".join(out)


def peer_tables(measurements: list[Mapping], labels: Mapping[str, str]) -> tuple[str, str]:
    """Two Markdown tables: engine/server ratios per scenario and server, median [min-max] over rounds; and each
    server's own medians per scenario, with the machine's other load while it was measured."""
    ratios = peer_ratios(measurements)
    servers = _order(measurements, "server", labels)
    scenarios = [s for s in _order(measurements, "scenario") if not s.startswith("startup")]
    rows = []
    for scenario in scenarios:
        for server in servers:
            cells = [ratios.get((scenario, server, metric)) for metric in PEER_RATIOS]
            if not any(cells):
                continue
            rows.append(
                [scenario, f"engine / {labels.get(server, server)}"]
                + [f"{c[0]:.2f} [{c[1]:.2f}-{c[2]:.2f}]" if c else "" for c in cells]
            )
    ratio_table = _md(["scenario", "against", *(METRICS[m][0] for m in PEER_RATIOS)], rows)

    grouped: dict[tuple[str, str, str], list[float]] = {}
    for m in measurements:
        for column in RUN_COLUMNS:
            if m.get(column) is not None:
                grouped.setdefault((m["scenario"], m["server"], column), []).append(float(m[column]))
    rows = []
    for scenario in _order(measurements, "scenario"):
        for server in servers:
            values = [grouped.get((scenario, server, c)) for c in RUN_COLUMNS]
            if not any(values):
                continue
            rows.append(
                [scenario, labels.get(server, server)]
                + ["" if v is None else _fmt(statistics.median(v)) for v in values]
            )
    absolute = _md(["scenario", "server", *(RUN_HEADINGS[c] for c in RUN_COLUMNS)], rows)
    return ratio_table, absolute


def write_peer_csv(measurements: list[Mapping], labels: Mapping[str, str], path: Path) -> None:
    """The ratios, one line per scenario, server and metric."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["scenario", "server", "metric", "unit", "ratio_median", "ratio_min", "ratio_max", "rounds"])
        for (scenario, server, metric), (median, low, high, rounds) in peer_ratios(measurements).items():
            writer.writerow(
                [
                    scenario,
                    labels.get(server, server),
                    metric,
                    METRICS[metric][1],
                    round(median, 4),
                    round(low, 4),
                    round(high, 4),
                    rounds,
                ]
            )


def peer_runs_csv(measurements: list[Mapping], labels: Mapping[str, str], path: Path) -> None:
    """Every measured run (and every start-up) as it was, with the machine's other load over it."""
    columns = ["round", "scenario", "server", *RUN_COLUMNS, "others_cpus_run", "load_samples", "client_cpu_share"]
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for m in measurements:
            row = {**m, "server": labels.get(m["server"], m["server"])}
            writer.writerow(["" if row.get(c) is None else row[c] for c in columns])


def peer_chart(measurements: list[Mapping], labels: Mapping[str, str], path: Path, title: str) -> None:
    """One panel per scenario: engine/server bars for throughput, p99 and CPU per request, with their min-max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = peer_ratios(measurements)
    scenarios = [s for s in _order(measurements, "scenario") if not s.startswith("startup")]
    servers = [s for s in _order(measurements, "server", labels) if s != "engine"]
    shown = ("rps", "p99_ms", "cpu_ms")
    figure, panels = plt.subplots(1, len(scenarios), figsize=(5 * len(scenarios) + 2, 4.5), squeeze=False)
    width = 0.8 / len(shown)
    for panel, scenario in zip(panels[0], scenarios, strict=True):
        for index, metric in enumerate(shown):
            cells = [ratios.get((scenario, server, metric)) for server in servers]
            xs = [i + (index - 1) * width for i in range(len(servers))]
            medians = [c[0] if c else 0.0 for c in cells]
            errors = [[c[0] - c[1] if c else 0 for c in cells], [c[2] - c[0] if c else 0 for c in cells]]
            panel.bar(xs, medians, width, yerr=errors, capsize=2, label=f"{METRICS[metric][0]} (engine/server)")
        panel.axhline(1.0, color="black", linewidth=0.8)
        panel.set_xticks(range(len(servers)), [labels.get(s, s) for s in servers], rotation=20, fontsize=8)
        panel.set_title(scenario, fontsize=10)
    panels[0][0].set_ylabel("engine / server (median, min-max over rounds)")
    panels[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
