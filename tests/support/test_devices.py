"""One share of the GPUs per parallel worker: each worker starts with CUDA_VISIBLE_DEVICES naming its own GPUs, and
the settings line says which worker has which."""

import os
from types import SimpleNamespace

import pytest
from warming import ask, json_lines

from chariot_support.server import devices
from chariot_support.server.devices import WorkerDevices, describe, split, visible_gpus


@pytest.mark.parametrize(
    "gpus, workers, shares",
    [
        (2, 2, [["0"], ["1"]]),
        (4, 2, [["0", "1"], ["2", "3"]]),
        (3, 2, [["0", "1"], ["2"]]),
        (4, 3, [["0", "1"], ["2"], ["3"]]),
        (1, 2, [["0"], ["0"]]),
        (2, 4, [["0"], ["1"], ["0"], ["1"]]),
        (0, 2, []),
        (2, 0, []),
    ],
)
def test_the_split_over_counts(gpus, workers, shares):
    assert split([str(i) for i in range(gpus)], workers) == shares


def test_the_split_in_words_says_when_the_count_does_not_divide():
    gpus = ["0", "1", "2", "3"]
    assert describe(gpus, split(gpus, 2)) == "4 GPUs over 2 workers: worker 0 gets 0,1, worker 1 gets 2,3"
    assert describe(gpus, split(gpus, 3)) == (
        "4 GPUs over 3 workers: worker 0 gets 0,1, worker 1 gets 2, worker 2 gets 3"
        " (the count does not divide: the first workers get one more)"
    )
    assert describe(["0"], split(["0"], 2)).endswith("(fewer GPUs than workers: workers share a GPU)")
    assert describe([], []) == ""


def test_the_gpus_seen_come_from_cuda_then_nvidia_then_nvidia_smi():
    listed = lambda: ["0", "1", "2"]  # noqa: E731
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3"}, listed) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "", "NVIDIA_VISIBLE_DEVICES": "all"}, listed) == []
    assert visible_gpus({"NVIDIA_VISIBLE_DEVICES": "all"}, listed) == ["0", "1", "2"]
    for none in ("none", "void", ""):
        assert visible_gpus({"NVIDIA_VISIBLE_DEVICES": none}, listed) == []
    # The container counts the GPUs it was given from 0; UUIDs name a GPU anywhere.
    assert visible_gpus({"NVIDIA_VISIBLE_DEVICES": "5,7"}, listed) == ["0", "1"]
    assert visible_gpus({"NVIDIA_VISIBLE_DEVICES": "GPU-a1,GPU-b2"}, listed) == ["GPU-a1", "GPU-b2"]
    assert visible_gpus({}, listed) == ["0", "1", "2"]


def test_nvidia_smi_is_read_by_index_and_missing_means_none(monkeypatch, tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-1)'\necho '  MIG 1g.18gb Device 0: (UUID: MIG-2)'\n"
        "echo 'GPU 1: NVIDIA H200 (UUID: GPU-3)'\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert devices.nvidia_smi_gpus() == ["0", "1"]
    fake.unlink()
    assert devices.nvidia_smi_gpus() == []


def test_each_worker_starts_with_its_share_and_a_replacement_takes_the_share_it_replaces(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    plan = WorkerDevices.detect(2)
    pids = iter(range(100, 200))

    def spawn():
        return SimpleNamespace(pid=next(pids), exitcode=None, saw=os.environ["CUDA_VISIBLE_DEVICES"])

    first, second = plan.start(spawn), plan.start(spawn)
    assert (first.saw, second.saw) == ("0,1", "2,3")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2,3", "the main process keeps what it had"
    first.exitcode = -9
    assert plan.start(spawn).saw == "0,1"
    assert WorkerDevices.detect(0).shares == [], "no parallel workers: nothing to split"


def test_cuda_started_in_the_main_process_is_an_error_said_once(monkeypatch, caplog):
    monkeypatch.setitem(
        __import__("sys").modules, "torch", SimpleNamespace(cuda=SimpleNamespace(is_initialized=lambda: True))
    )
    monkeypatch.setattr(devices, "_warned", False)
    devices.warn_cuda_in_parent()
    devices.warn_cuda_in_parent()
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "fork and CUDA do not mix" in errors[0].getMessage()


def test_each_parallel_worker_sees_its_own_gpu(warming_engine):
    """Two GPUs (CUDA_VISIBLE_DEVICES=0,1) and two workers: each worker's model sees one, not the same one."""
    seen = {pid: gpus for _, pid, gpus, _ in (ask(warming_engine, f"gpu-{n}") for n in range(4))}
    assert len(seen) == 2 and sorted(seen.values()) == ["0", "1"], seen
    (line,) = [line for line in json_lines(warming_engine.log()) if "settings" in line]
    assert line["message"].endswith("; 2 GPUs over 2 workers: worker 0 gets 0, worker 1 gets 1")
    assert line["settings"]["worker_gpus"] == {"0": ["0"], "1": ["1"]}
