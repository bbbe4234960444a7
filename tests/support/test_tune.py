"""`python -m chariot_support.dev.tune`: the pieces that decide (candidates, the choice under a latency bound, the
time plan, replica sizing, settings.env, the refusals) and the machine's measurements, then the tool run for real on
the demo and on models whose best settings are known (tuning_engine/model.py), each recommendation checked by a load
of the test's own against the engine's defaults."""

import base64
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import pytest
import requests
import yaml

from chariot_support.dev.testing import run_engine
from chariot_support.dev.tune import machine, report
from chariot_support.dev.tune.__main__ import main
from chariot_support.dev.tune.candidates import TUNED, Candidate, Served, candidates, settings_env
from chariot_support.dev.tune.choose import (
    Point,
    choose,
    fits,
    long_plan,
    quick_plan,
    ranked,
    size,
    too_busy,
    too_slow,
)
from chariot_support.dev.tune.load import Refused, picture_files
from chariot_support.dev.tune.run import Plan, check_pictures, only, to_measure_again, tune
from chariot_support.settings import EngineSettings
from template_paths import ENGINE_TEMPLATE, SUPPORT_SRC

HERE = Path(__file__).resolve().parent
SAMPLES = ENGINE_TEMPLATE / "samples"


def test_the_machine_load_adds_up():
    stat = "cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 50 2 25 500 10 1 1 0 0 0\n"
    assert machine.machine_busy_ticks(stat) == 100 + 5 + 50 + 3 + 2 + 1  # idle and iowait are not busy
    # Over 2 s the machine spent 3 CPU-seconds busy, the measured processes 2: others kept half a CPU busy.
    ticks = machine.TICKS
    assert machine.others_cpus(3 * ticks, 2 * ticks, 2.0) == pytest.approx(0.5)
    assert machine.others_cpus(2 * ticks, 2 * ticks + 1, 2.0) == 0.0, "a tick read a moment apart is no load"
    # A process that started in between counts from zero; one that ended drops out.
    assert machine.ticks_between({1: 10, 2: 5}, {1: 25, 3: 4}) == 15 + 4


def spinner(seconds: float) -> subprocess.Popen:
    """A child process keeping one core busy for `seconds` of its own CPU time."""
    spin = f"import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"
    return subprocess.Popen([sys.executable, "-c", spin])


def test_the_machine_load_probe_counts_a_measured_process_as_its_own_and_another_as_others():
    measured = spinner(0.6)
    probe = machine.LoadProbe(lambda: [measured.pid], interval=0.1)
    probe.start()
    first = machine.process_ticks([measured.pid])
    measured.wait(30)
    load = probe.stop(measured_seconds=sum(first.values()) / machine.TICKS + 0.6)
    assert load["load_samples"] >= 3 and load["load_1m"] >= 0
    # The spinning process is the measured one: what is left is the rest of the machine (the other engineer's
    # work included), not the core it kept busy.
    assert 0 <= load["others_cpus_run"] < (os.cpu_count() or 1)


def test_a_process_trees_cpu_and_peak_memory_count_its_children(tmp_path):
    script = "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'x = bytearray(60 << 20); import time; time.sleep(30)'])\ntime.sleep(30)\n"
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 15
        while len(tree := machine.process_tree(parent.pid)) < 2 or machine.peak_rss_mb(tree[1:]) < 60:
            assert time.monotonic() < deadline, "the child never grew"
            time.sleep(0.05)
        assert tree[0] == parent.pid
        assert machine.peak_rss_mb(tree) > machine.peak_rss_mb(tree[:1]) + 60
        assert machine.cpu_seconds(tree) >= machine.cpu_seconds(tree[:1])
    finally:
        for pid in reversed(machine.process_tree(parent.pid)):
            os.kill(pid, 9)
        parent.wait(10)


def test_a_container_cpu_quota_caps_the_cpus(tmp_path):
    quota = tmp_path / "cpu.max"
    quota.write_text("150000 100000\n")
    assert machine.usable_cpus(quota) == min(2, len(os.sched_getaffinity(0)))
    quota.write_text("max 100000\n")
    assert machine.usable_cpus(quota) == len(os.sched_getaffinity(0))


LOG = (
    'not json\n{"message": "settings: ...", "settings": {"workers": 0, "threads": 4, "copies": 1,'
    ' "thread_safe": false, "max_batch_size": 1, "max_batch_wait_ms": null}}\n{"model": "m-x"}\n'
)


def test_how_the_engine_serves_is_read_from_its_settings_line():
    served = Served.from_log(LOG)
    assert (served.threads, served.copies, served.thread_safe, served.workers) == (4, 1, False, 0)
    with pytest.raises(LookupError, match="no settings line"):
        Served.from_log('{"message": "hello"}\n')


def test_candidates_follow_the_model_and_the_machine():
    unsafe = Served(workers=0, threads=2, copies=1, thread_safe=False, max_batch_size=1)
    labels = [c.label for c in candidates(unsafe, cpus=2)]
    assert labels == [
        "defaults",
        "threads=2 copies=2",
        "threads=8 copies=8",
        "batch=8 wait_ms=5",
        "threads=1 copies=1 workers=2",
    ]
    safe = Served(workers=0, threads=2, copies=1, thread_safe=True, max_batch_size=1)
    labels = [c.label for c in candidates(safe, cpus=2)]
    assert labels == ["defaults", "threads=8", "batch=8 wait_ms=5", "threads=1 workers=2"]
    # One CPU: no workers. A GPU: no workers (each would load the model again), and bigger batches.
    assert [c.label for c in candidates(Served(0, 1, 1, True, 1), cpus=1)] == [
        "defaults",
        "threads=4",
        "batch=4 wait_ms=5",
    ]
    on_gpu = candidates(safe, cpus=8, gpus=1)
    assert not any(c.workers for c in on_gpu) and on_gpu[-1].batch == 16
    # A model that already loads a copy per thread gets no candidate that works out the same.
    per_thread = Served(workers=0, threads=2, copies=2, thread_safe=False, max_batch_size=1)
    assert "threads=2 copies=2" not in [c.label for c in candidates(per_thread, cpus=2)]
    # Eight copies of an engine of 1 GiB would take more than half of 12 GiB; two would not.
    labels = [c.label for c in candidates(unsafe, cpus=2, engine_mb=1024, memory_mb=12 * 1024)]
    assert "threads=2 copies=2" in labels and "threads=8 copies=8" not in labels


def test_only_the_kinds_named_are_measured_beside_the_defaults(tmp_path, capsys):
    unsafe = candidates(Served(workers=0, threads=2, copies=1, thread_safe=False, max_batch_size=1), cpus=2)
    assert [c.kind for c in unsafe] == ["defaults", "copies", "copies", "batch", "workers"]
    assert only(unsafe, None) == unsafe
    assert [c.label for c in only(unsafe, frozenset({"copies"}))] == [
        "defaults",
        "threads=2 copies=2",
        "threads=8 copies=8",
    ]
    assert [c.kind for c in only(unsafe, frozenset({"batch", "workers"}))] == ["defaults", "batch", "workers"]
    with pytest.raises(Refused, match=r"--only threads: no such setting .* \(those that are: batch, copies, workers\)"):
        only(unsafe, frozenset({"threads"}))
    # A kind the tool does not know is a usage mistake, said before any engine starts.
    assert main(["--engine", "no_such_engine", "--out", str(tmp_path), "--only", "copies,gpus"]) == 2
    assert "--only takes kinds of setting among threads, copies, batch, workers" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def point(
    label: dict, clients: int, rps: float, p99: float, phase: str = "quick", errors: int = 0, stages=None
) -> Point:
    return Point(
        candidate=Candidate(**label),
        clients=clients,
        phase=phase,
        rps=rps,
        p50_ms=p99 / 2,
        p99_ms=p99,
        cpus_busy=1.23,
        peak_rss_mb=300.0,
        gpu_mb=None,
        errors=errors,
        error="HTTP 503: busy" if errors else "",
        others_cpus=0.1,
        stages=stages,
    )


TABLE = [
    point({}, 1, 50, 22),
    point({}, 8, 52, 170),
    point({"copies": 8, "threads": 8}, 1, 49, 23),
    point({"copies": 8, "threads": 8}, 8, 380, 40),
    point({"workers": 2, "threads": 1}, 8, 400, 90),
    point({"batch": 8, "batch_wait_ms": 5}, 8, 900, 30, errors=3),  # errors: never chosen
]


def test_the_choice_is_the_most_requests_within_twice_the_lowest_p99():
    choice = choose(TABLE)
    assert choice.point.candidate == Candidate(copies=8, threads=8) and choice.point.clients == 8
    assert choice.bound_ms == 44
    assert "2x the lowest measured (22.0 ms x 2 = 44.0 ms)" in choice.why
    assert "The defaults, under the same bound, served 50.0 requests/s (at 1 client): 7.60x" in choice.why


def test_a_setting_within_the_noise_of_the_defaults_leaves_the_defaults():
    """Measured on a real classifier: threads=8 served 395.9 requests/s where the defaults served 393.6, and the
    defaults measured twice gave 423.5 then 393.6. Changing settings for 1 % would follow the noise."""
    table = [point({}, 2, 393.6, 10.9, "long"), point({"threads": 8}, 2, 395.9, 10.4, "long")]
    choice = choose(table)
    assert choice.point.candidate == Candidate() and choice.point.rps == 393.6
    assert "threads=8 served 395.9 requests/s (1.01x), less than the 1.10x" in choice.why
    assert "the engine's defaults stand" in choice.why
    table[1] = point({"threads": 8}, 2, 440.0, 10.4, "long")
    assert choose(table).point.candidate == Candidate(threads=8), "1.12x the defaults stands out"


def test_the_reason_names_the_stages_that_moved_against_the_defaults():
    """A model that is not thread-safe, at 8 clients: copies take the wait for the one copy away (the engine's
    statistics say where each request's time went)."""
    waiting = {"queue": 140.0, "decode": 1.2, "predict": 20.0, "results": 0.3}
    served = {"queue": 3.0, "decode": 1.3, "predict": 21.5, "results": 0.3}
    table = [point({}, 8, 48, 175, stages=waiting), point({"copies": 8, "threads": 8}, 8, 340, 30, stages=served)]
    why = choose(table).why
    assert "At 8 clients, with threads=8 copies=8: queue time fell from 140.0 to 3.0 ms; predict time rose from" in why
    assert "queue ms | decode ms | predict ms | results ms" in report.table(table)
    assert "| 140.00 | 1.20 | 20.00 | 0.30 |" in report.table(table)
    # The defaults standing beside a setting within the noise: the stages say what it changed all the same.
    close = point({"threads": 8}, 8, 50, 170, stages={**waiting, "queue": 70.0, "predict": 41.0})
    assert (
        "queue time fell from 140.0 to 70.0 ms; predict time rose from 20.0 to 41.0 ms" in choose([table[0], close]).why
    )


def test_a_latency_budget_moves_the_choice_and_one_none_meets_is_refused():
    assert choose(TABLE, p99_ms=100).point.candidate == Candidate(workers=2, threads=1)
    assert choose(TABLE, p99_ms=25).point.candidate == Candidate()
    with pytest.raises(Refused, match=r"no setting kept p99 within 10 ms \(--p99-ms\): the lowest measured was 22.0"):
        choose(TABLE, p99_ms=10)
    with pytest.raises(Refused, match="no setting served the pictures without errors \\(HTTP 503"):
        choose([point({}, 1, 10, 5, errors=2)])


def test_the_table_of_each_kind_of_model_recommends_the_setting_that_suits_it():
    """Figures as the tool measures them on this machine (4 clients a CPU) for tuning_engine's models: each model's
    own setting is the choice, and settings.env says it."""
    unsafe = Served(workers=0, threads=2, copies=1, thread_safe=False, max_batch_size=1)
    safe = Served(workers=0, threads=2, copies=1, thread_safe=True, max_batch_size=1)
    # Sleeper, not thread-safe, 20 ms outside the GIL: one call at a time serves 50/s; copies serve calls at once.
    sleeper = [
        point({}, 8, 48, 175),
        point({"threads": 2, "copies": 2}, 8, 95, 90),
        point({"threads": 8, "copies": 8}, 8, 340, 30),
        point({"batch": 8, "batch_wait_ms": 5}, 8, 47, 180),
        point({"threads": 1, "copies": 1, "workers": 2}, 8, 92, 95),
    ]
    # GilHolder, thread-safe, 15 ms holding the GIL: threads queue on it, a worker a core runs two at once.
    gil = [
        point({}, 8, 60, 150),
        point({"threads": 8}, 8, 58, 160),
        point({"batch": 8, "batch_wait_ms": 5}, 8, 62, 140),
        point({"threads": 1, "workers": 2}, 8, 118, 75),
    ]
    # OneDevice, 20 ms a call whatever its size, one call at a time: only batching serves more.
    device = [
        point({}, 8, 49, 170),
        point({"threads": 8}, 8, 49, 172),
        point({"batch": 8, "batch_wait_ms": 5}, 8, 330, 35),
        point({"threads": 1, "workers": 2}, 8, 48, 175),
    ]
    for table, served, variable, value in (
        (sleeper, unsafe, "CHARIOT_MODEL_COPIES", "8"),
        (gil, safe, "MLSERVER_PARALLEL_WORKERS", "2"),
        (device, safe, "CHARIOT_MAX_BATCH_SIZE", "8"),
    ):
        chosen = choose(table).point
        assert chosen.clients == 8 and chosen.rps == max(p.rps for p in table), chosen
        written = dict(line.split("=", 1) for line in settings_env(chosen.candidate, served).splitlines())
        assert written[variable] == value, written


def test_a_setting_the_engine_cannot_start_with_is_a_row_of_the_table_never_the_choice():
    failed = Point.failed(Candidate(workers=2, threads=1), "quick", "worker 1 died at start-up")
    table = [*TABLE, failed]
    assert choose(table).point.candidate == Candidate(copies=8, threads=8)
    assert Candidate(workers=2, threads=1) in ranked(TABLE) and failed.candidate not in ranked(TABLE[:4] + [failed])
    assert (
        "| threads=1 workers=2 | quick | 0 | 0.0 | - | - | - | - | - | - | - | - | - | - | worker 1 died at start-up | - |"
        in (report.table(table))
    )


def test_a_longer_measurement_stands_over_the_quick_one():
    table = [*TABLE, point({"copies": 8, "threads": 8}, 8, 200, 41, phase="long")]
    choice = choose(table)
    assert choice.point.phase == "long" and choice.point.rps == 200
    assert ranked(TABLE)[:2] == [Candidate(workers=2, threads=1), Candidate(copies=8, threads=8)]
    # Measured again first: what the quick figures would recommend, then the most requests/s.
    again = to_measure_again(TABLE, p99_ms=None)
    assert again[:3] == [Candidate(copies=8, threads=8), Candidate(workers=2, threads=1), Candidate()]
    assert to_measure_again(TABLE, p99_ms=100)[0] == Candidate(workers=2, threads=1)


def test_the_time_budget_is_shared_between_the_passes():
    seconds = quick_plan(budget_s=180, startup_s=3, candidates=5, levels=3)
    assert 5 * 3 + 5 * 3 * (seconds + 0.2) == pytest.approx(180 * 0.4)
    assert quick_plan(budget_s=1, startup_s=3, candidates=5, levels=3) == 0.6  # never shorter
    # A slow model: ten answers at least, one after another.
    assert quick_plan(budget_s=180, startup_s=3, candidates=5, levels=3, request_s=2.5) == 25
    reason = too_slow(budget_s=120, startup_s=9, levels=3, seconds=25, request_s=2.5)
    assert "one request takes 2.50 s here" in reason and "give --minutes 3" in reason
    assert too_slow(budget_s=180, startup_s=3, levels=3, seconds=2, request_s=0.01) is None
    # Another candidate while it fits in what is left; the defaults and one other whatever the budget.
    assert fits(elapsed_s=20, budget_s=30, startup_s=3, levels=3, seconds=1.5, measured=3)
    assert not fits(elapsed_s=25, budget_s=30, startup_s=3, levels=3, seconds=1.5, measured=3)
    assert fits(elapsed_s=40, budget_s=30, startup_s=3, levels=3, seconds=1.5, measured=1)
    keep, longer = long_plan(left_s=80, startup_s=3, levels=3, quick_seconds=2, candidates=5)
    assert keep == 3 and longer >= 4
    assert long_plan(left_s=10, startup_s=3, levels=3, quick_seconds=2, candidates=5) == (0, 0.0)


def test_a_deployment_is_sized_from_the_recommended_point():
    chosen = point({"copies": 8, "threads": 8}, 8, 380, 40)
    sizing = size(chosen, target_rps=1000)
    assert sizing.replicas == 4  # 1000 / (380 x 0.75) = 3.5
    assert (sizing.cpu, sizing.memory_request, sizing.memory_limit) == ("1.3", "384Mi", "512Mi")
    assert sizing.concurrency == 8
    assert size(point({}, 1, 50, 10), target_rps=10).replicas == 1
    with pytest.raises(ValueError, match="--target-rps must be more than 0"):
        size(chosen, 0)


def test_settings_env_is_key_value_lines_the_engine_accepts():
    served = Served(workers=0, threads=2, copies=1, thread_safe=False, max_batch_size=1)
    text = settings_env(Candidate(copies=8, threads=8), served, comment="why\nand more")
    assert text.startswith("# why\n# and more\n")
    values = dict(line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))
    assert values == {
        "CHARIOT_THREADS": "8",
        "CHARIOT_MODEL_COPIES": "8",
        "MLSERVER_PARALLEL_WORKERS": "0",
        "CHARIOT_MAX_BATCH_SIZE": "1",
    }
    batching = settings_env(Candidate(batch=8, batch_wait_ms=5.0), served)
    read = EngineSettings.from_env(dict(line.split("=", 1) for line in batching.splitlines()))
    assert (read.max_batch_size, read.max_batch_wait_ms, read.threads) == (8, 5.0, 2)


def test_a_busy_machine_is_refused_with_its_load():
    assert too_busy(0.3, cpus=2, most=0.5) is None
    reason = too_busy(1.4, cpus=2, most=0.5)
    assert "1.40 of its 2 CPUs" in reason and "--max-other-load 0.5" in reason


def test_the_tool_refuses_before_starting_when_other_work_keeps_the_machine_busy():
    busy = spinner(5)
    try:
        plan = Plan(module="no_such_engine", args=[], pictures=picture_files(SAMPLES), budget_s=60, max_other_load=0.3)
        with pytest.raises(Refused, match="before the run, the machine was busy with other work"):
            tune(plan)  # refused before any engine starts: no_such_engine would not
    finally:
        busy.kill()
        busy.wait(10)


def test_a_folder_without_pictures_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("no pictures here")
    with pytest.raises(Refused, match="no pictures in it"):
        picture_files(tmp_path)
    with pytest.raises(Refused, match="no such folder"):
        picture_files(tmp_path / "missing")


def tool(tmp_path: Path, engine: str, *args: str, busy: bool = True) -> subprocess.CompletedProcess:
    """The command run on `engine`; with `busy`, on this shared machine whatever the other load (it is measured and
    reported, not refused)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT_SRC), str(HERE)])}
    command = [sys.executable, "-m", "chariot_support.dev.tune", "--engine", engine, "--out", str(tmp_path / "out")]
    command += ["--model-dir", str(tmp_path), *(["--max-other-load", "100"] if busy else []), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_pictures_the_model_refuses_or_fails_on_are_refused_by_name(tmp_path, monkeypatch):
    small = tmp_path / "small.png"
    cv2.imwrite(str(small), cv2.imread(str(SAMPLES / "scene.png"))[:50, :50])
    monkeypatch.setenv("CHARIOT_THREADS", "7")  # the user's own setting: the engines the tool starts leave it out
    # Warmed, the model would fail at start-up (test_warmup.py's case): here it is the pictures it fails on that the
    # tool must name. CHARIOT_WARMUP is not a tuned setting, so the engines the tool starts keep it.
    monkeypatch.setenv("CHARIOT_WARMUP", "0")
    with run_engine("tuning_engine", src=HERE, args=["fussy"], unset=TUNED) as engine:
        assert Served.from_log(engine.log()).threads == os.cpu_count()
        path = "/v2/models/m-tuning/infer"
        with pytest.raises(Refused, match=r"the engine refused .*small.png \(HTTP 400: .*50 pixels wide"):
            check_pictures(engine.http_port, path, [small])
        with pytest.raises(Refused, match=r"the model failed on .*scene.png \(HTTP 500"):
            check_pictures(engine.http_port, path, [SAMPLES / "scene.png"])
    # The command says so, writes the report and the plot, and no settings. It stops at the first failed picture,
    # before measuring anything, so the budget only has to hold an engine start on a busy machine: 12 s did not
    # always (it was then refused as too short a budget instead).
    run = tool(tmp_path, "tuning_engine fussy", "--minutes", "1")
    out = tmp_path / "out"
    assert run.returncode == 3, run.stderr
    assert "refused: the model failed on" in run.stderr
    assert "## No recommendation" in (out / "report.md").read_text()
    assert cv2.imread(str(out / "tune.png")) is not None and not (out / "settings.env").exists()


def settings_of(out: Path) -> dict[str, str]:
    lines = (out / "settings.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def requests_per_second(model: str, env: dict[str, str], model_dir: Path, clients: int, seconds: float = 1.5) -> float:
    """The test's own load, not the tool's: `clients` threads with a requests session each, sending samples/scene.png
    for `seconds` to the engine started with `env` (and nothing else of the tuned variables)."""
    picture = base64.b64encode((SAMPLES / "scene.png").read_bytes()).decode()
    body = json.dumps({"inputs": [{"name": "scene", "shape": [1], "datatype": "BYTES", "data": [picture]}]})
    answered, lock = [0], threading.Lock()
    with run_engine(
        "tuning_engine", src=HERE, args=[model], env={**env, "MODEL_DIR": str(model_dir)}, unset=TUNED
    ) as e:
        url = f"{e.url}/v2/models/m-tuning/infer"

        def client(end: float) -> None:
            with requests.Session() as session:
                while time.monotonic() < end:
                    if session.post(url, data=body, timeout=30).status_code == 200:
                        with lock:
                            answered[0] += 1

        session_warm = requests.post(url, data=body, timeout=30)
        assert session_warm.status_code == 200, session_warm.text
        start = time.monotonic()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(client, [start + seconds] * clients))
        return answered[0] / (time.monotonic() - start)


def tuned_against_defaults(tmp_path: Path, model: str, *args: str, busy: bool = True):
    """Run the tool on a tuning_engine model, then measure its settings and the defaults with the test's own load,
    at the concurrency it recommends: (settings, their requests/s, the defaults'), or None when the tool refused a
    busy machine (only without `busy`)."""
    run = tool(tmp_path, f"tuning_engine {model}", "--target-rps", "100", *args, busy=busy)
    out = tmp_path / "out"
    if run.returncode == 3 and not busy:
        assert "the machine was busy with other work" in run.stderr, run.stderr[-3000:]
        assert "## No recommendation" in (out / "report.md").read_text()
        return None
    assert run.returncode == 0, run.stderr[-3000:]
    settings = settings_of(out)
    patch = yaml.safe_load((out / "kserve-patch.yaml").read_text())
    clients = patch["spec"]["predictor"]["containerConcurrency"]
    tuned = requests_per_second(model, settings, tmp_path, clients)
    defaults = requests_per_second(model, {}, tmp_path, clients)
    return settings, tuned, defaults


@pytest.mark.slow
def test_the_demo_is_tuned_and_every_output_is_written(tmp_path):
    # The pictures: the engine's samples/, by default.
    run = tool(
        tmp_path,
        "chariot_support 'Object Detection'",
        "--quick",
        "--only",
        "threads",
        "--minutes",
        "1.5",
        "--concurrency",
        "1,2",
        "--target-rps",
        "500",
    )
    out = tmp_path / "out"
    assert run.returncode == 0, run.stderr[-3000:]
    written = (out / "report.md").read_text()
    for heading in ("## Recommendation", "## Deployment for 500 requests/s", "## Every setting measured"):
        assert heading in written
    assert (
        "Model: m-demo: DemoDetector (Object Detection), thread-safe;" in written
        and f"{machine.usable_cpus()} usable CPUs" in written
    )
    assert "Pictures: 2 from" in written and "(scene.png, shapes.jpg)" in written
    rows = [
        line for line in written.splitlines() if line.startswith("| ") and not line.startswith(("| ---", "| setting"))
    ]
    threads = f"| threads={4 * machine.usable_cpus()}"  # the demo is thread-safe: four threads a CPU
    assert [row.split(" | ")[:3] for row in rows] == [
        ["| defaults", "quick", "1"],
        ["| defaults", "quick", "2"],
        [threads, "quick", "1"],
        [threads, "quick", "2"],
    ]
    assert "Measured beside the defaults: only settings of threads (--only)." in written
    # Each row says where its requests' time went, from the engine's statistics.
    assert all(float(cell) > 0 for row in rows for cell in row.split(" | ")[6:9]), rows
    EngineSettings.from_env(settings_of(out))  # every value is one the engine takes
    plot = cv2.imread(str(out / "tune.png"))
    assert plot is not None and plot.shape[:2] == (680, 1200)
    patch = yaml.safe_load((out / "kserve-patch.yaml").read_text())["spec"]["predictor"]
    assert patch["minReplicas"] >= 1 and patch["model"]["resources"]["requests"]["memory"].endswith("Mi")
    assert "[" in run.stderr and "left" in run.stderr  # the progress bar


@pytest.mark.slow
def test_copies_are_recommended_for_a_model_that_waits_outside_the_gil(tmp_path):
    settings, tuned, defaults = tuned_against_defaults(
        tmp_path, "sleeper", "--quick", "--only", "copies", "--minutes", "1.5", "--concurrency", "8"
    )
    assert int(settings["CHARIOT_MODEL_COPIES"]) > 1, settings
    assert tuned >= 1.5 * defaults, (settings, tuned, defaults)


@pytest.mark.slow
def test_workers_are_recommended_for_a_model_that_holds_the_gil(tmp_path):
    # Only free cores let worker processes run such a predict at once: on a machine busy with other work the tool
    # refuses to measure (the refusal is checked), as it does for a user, rather than recommend from noise.
    found = tuned_against_defaults(
        tmp_path, "gil", "--quick", "--only", "workers,threads", "--minutes", "1.5", "--concurrency", "4", busy=False
    )
    if found is not None:
        settings, tuned, defaults = found
        assert settings["MLSERVER_PARALLEL_WORKERS"] == "2", settings
        assert tuned > defaults, (settings, tuned, defaults)
