"""N runs at once (``lab/slots.py``, behind ``ledger run --jobs`` and ``lab.compare --jobs`` / ``make demo``): each
slot's GPU or CPU threads, results by index whatever ends first, a failed task beside the others, a stop error that
starts nothing more."""
import threading
import time

import pytest

from fairseq_outlayers.lab import slots

CPU = {"CUDA_VISIBLE_DEVICES": ""}


def test_each_slot_gets_its_gpu_or_its_share_of_the_cores():
    assert slots.slot_envs(3, ["5", "7"], CPU) == [{"CUDA_VISIBLE_DEVICES": g} for g in ("5", "7", "5")]
    assert slots.slot_envs(2, [], CPU, cores=2) == [{"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}] * 2
    assert slots.slot_envs(2, [], CPU, cores=16) == [{"OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": "8"}] * 2
    assert slots.slot_envs(4, [], CPU, cores=2) == [{"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}] * 4
    assert slots.slot_envs(1, [], CPU, cores=2) == [{}]  # one run: torch's own default, as before
    assert slots.slot_envs(2, [], dict(CPU, OMP_NUM_THREADS="3"), cores=2) == [{}, {}]  # the user's choice stays
    assert slots.default_jobs(6, CPU, cores=2) == 2 and slots.default_jobs(1, CPU, cores=16) == 1
    assert slots.default_jobs(6, {"CUDA_VISIBLE_DEVICES": "5,7,9"}) == 3
    assert slots.describe(2, CPU, cores=2) == "2 runs at once, OMP_NUM_THREADS=1 each"
    assert slots.describe(1, CPU, cores=2) == "1 run at a time, OMP_NUM_THREADS=unset"
    assert slots.describe(2, {"CUDA_VISIBLE_DEVICES": "5"}) == "2 runs at once, on GPU 5"


def test_tasks_run_at_once_and_each_result_keeps_its_index():
    """Two slots: the first task, started first, ends last; both run at the same time (a barrier of two would time
    out otherwise); every result comes with its task's index and each slot's environment is its own."""
    barrier = threading.Barrier(2, timeout=20)
    seen = []

    def work(task, env):
        seen.append((task, env["OMP_NUM_THREADS"]))
        if task in ("a", "b"):
            barrier.wait()
        time.sleep(0.3 if task == "a" else 0.0)
        return task.upper()

    got = list(slots.run_in_slots(["a", "b", "c"], work, 2, environ=CPU, cores=2))
    assert sorted(got) == [(0, "A", None), (1, "B", None), (2, "C", None)]
    assert [i for i, _, _ in got][-1] == 0  # "a" ended last
    assert {threads for _, threads in seen} == {"1"}


def test_a_failed_task_is_reported_and_the_others_finish():
    def work(task, env):
        if task == "b":
            raise SystemExit("fairseq-train failed for b")
        return task

    for jobs in (1, 2):
        got = sorted(slots.run_in_slots(["a", "b", "c"], work, jobs, environ=CPU, cores=2), key=lambda x: x[0])
        assert [(i, r) for i, r, _ in got] == [(0, "a"), (1, None), (2, "c")]
        assert "failed for b" in str(got[1][2])


class Stop(Exception):
    pass


def test_a_stop_error_starts_nothing_more():
    for jobs in (1, 2):
        started = []

        def work(task, env):
            started.append(task)
            if task == "a":
                time.sleep(0.1)  # "b" has started beside it by then
                raise Stop("bad input")
            time.sleep(0.3)
            return task

        with pytest.raises(Stop, match="bad input"):
            list(slots.run_in_slots(["a", "b", "c", "d"], work, jobs, stop=(Stop,), environ=CPU, cores=2))
        # with two slots, "b" started beside "a"; nothing started after "a" failed
        assert sorted(started) == (["a"] if jobs == 1 else ["a", "b"]), started
