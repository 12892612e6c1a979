"""The demo table behind `make demo`: quick rows of the ledger's row format, run by the ledger's runner; option
merging, speed parsing, the table and the plot."""
import glob
import json
import os
import threading
import time

import pytest

from fairseq_outlayers.lab import compare, slots
from fairseq_outlayers.lab.compare import demo_base_args, format_table, write_plot
from fairseq_outlayers.lab.fairseq_runs import training_speed
from fairseq_outlayers.lab.ledger import runner
from fairseq_outlayers.lab.ledger.rows import LedgerRow, merge_args, read_row, row_data_bin
from harness import REPO

pytestmark = pytest.mark.usefixtures("commands_in_process")  # what the runners start: in this process


BASE = os.path.join(REPO, "configs", "demo-base.args")


@pytest.fixture
def in_repo(monkeypatch):
    """Row files name their base file from the repository's root, where the Makefile and CI run."""
    monkeypatch.chdir(REPO)


def test_row_with_its_own_criterion_drops_the_base_criterion():
    base = demo_base_args(BASE)
    merged = merge_args(base, ["--output-layer", "continuous", "--criterion", "vmf_nll"])
    assert merged.count("--criterion") == 1 and merged[-1] == "vmf_nll"
    assert "--label-smoothing" not in merged and "0.1" not in merged[merged.index("--max-tokens"):][:2]
    assert merge_args(base, ["--output-layer", "tied"]) == base + ["--output-layer", "tied"]
    # an option the row gives replaces the base's, values and all: each option once in the command
    merged = merge_args(base, ["--arch", "outlayers_lstm", "--adam-betas=(0.9,0.999)", "--lr", "0.001"])
    assert merged.count("--arch") == merged.count("--lr") == 1 and "(0.9,0.98)" not in merged
    assert merged[-5:] == ["--arch", "outlayers_lstm", "--adam-betas=(0.9,0.999)", "--lr", "0.001"]
    assert merged[: merged.index("--arch")] == [a for a in base if a not in (
        "--arch", "outlayers_transformer_tiny", "--adam-betas", "(0.9,0.98)", "--lr", "0.003")]


def test_training_speed_is_tokens_over_time(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "x | INFO | train_inner | epoch 001:  50 / 9 loss=9, wps=0, ups=0, wpb=1000, bsz=8, num_updates=50, lr=1\n"
        "x | INFO | train_inner | epoch 001: 100 / 9 loss=8, wps=2000, ups=2, wpb=1000, bsz=8, num_updates=100, lr=1\n"
        "x | INFO | train_inner | epoch 002:  50 / 9 loss=7, wps=4000, ups=4, wpb=2000, bsz=8, num_updates=150, lr=1\n")
    # the first interval (wps=0) is skipped: 50k tokens in 25 s + 100k tokens in 25 s
    assert training_speed(str(log)) == 150000 / 50


def test_row_file_and_table(tmp_path):
    row = tmp_path / "30-joint.args"
    row.write_text("--output-layer joint  # the paper's layer\n--joint-dim 512\n")
    assert read_row(str(row)) == ("joint", ["--output-layer", "joint", "--joint-dim", "512"])
    params = {"total": 10, "trained": 8, "embedding": 4, "output": 2}
    table = format_table([{"name": "joint", "bleu": [30.0, 31.0], "speed": [100.0, 300.0], "time": [5, 7],
                           "params": params}])
    assert "| joint | 2 | 30.50 ± 0.50 | 10 | 8 | 4 | 2 | 200 | 6 |" in table
    assert write_plot([{"name": "joint", "bleu": [30.0], "params": params}], str(tmp_path / "p.png"))
    assert os.path.getsize(tmp_path / "p.png") > 1000


def test_a_row_can_name_its_own_data():
    args = ["--data-bin", "w/word", "--output-layer", "continuous", "--criterion", "vmf_nll"]
    assert row_data_bin(args, "w/bpe") == ("w/word", ["--output-layer", "continuous", "--criterion", "vmf_nll"])
    assert row_data_bin(["--data-bin=w/x", "--output-layer", "tied"], "w/bpe") == ("w/x", ["--output-layer", "tied"])
    assert row_data_bin(["--output-layer", "tied"], "w/bpe") == ("w/bpe", ["--output-layer", "tied"])
    with pytest.raises(SystemExit, match="needs a path"):
        row_data_bin(["--output-layer", "tied", "--data-bin"], "w/bpe")


def _demo_rows(data_bin="work/multi30k/data-bin/de-en"):
    return compare.quick_rows(sorted(glob.glob(os.path.join("configs", "demo", "*.args"))), data_bin, 200)


def test_demo_table_shows_the_ledgers_converged_figure_or_none_yet(tmp_path):
    """A fake ledger: the figure of the row with the same data, model and seams, over seeds 1-3 only; another
    model (an LSTM) or another direction never stands beside a quick row; no match is "none yet"."""
    from test_ledger import HYP_A, fake_record

    from fairseq_outlayers.lab.compare import ledger_figures

    params = {"total": 10, "trained": 8, "embedding": 4, "output": 2}
    base = ["--arch", "outlayers_transformer_tiny", "--lr", "0.003"]
    rows = [LedgerRow(n, f"{n}.args", "data", ["--output-layer", n], base_args=base) for n in ("softmax", "tied")]
    ledger = str(tmp_path / "runs")
    assert ledger_figures(ledger, rows) == {}  # no ledger yet
    for seed, bleu in ((1, 33.0), (2, 34.0), (4, 50.0)):  # seed 4: outside the protocol's seeds
        rec = fake_record(ledger, "tiny-softmax", seed, bleu, HYP_A, table="multi30k")
    for seed, bleu in ((1, 40.0), (2, 41.0)):  # the same method on another model
        fake_record(ledger, "lstm-softmax", seed, bleu, HYP_A, table="lstm")
    for path in glob.glob(os.path.join(ledger, "*.json")):
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
        arch = "outlayers_transformer_tiny" if rec["row"].startswith("tiny") else "outlayers_lstm"
        rec["options"] = ["data", "--arch", arch, "--lr", "0.002", "--output-layer", "softmax",
                          "--seed", str(rec["seed"])]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(rec, f)
    converged = ledger_figures(ledger, rows)
    assert converged == {"softmax": "33.50 ± 0.71 (2 seeds, tiny-softmax)"}
    quick = [dict(name=r.name, bleu=[20.0], speed=[100.0], time=[5], params=params) for r in rows]
    table = format_table(quick, converged)
    # the quick figures are unchanged; the converged one is beside them
    assert "| softmax | 1 | 20.00 | 10 | 8 | 4 | 2 | 100 | 5 | 33.50 ± 0.71 (2 seeds, tiny-softmax) |" in table
    assert "| tied | 1 | 20.00 | 10 | 8 | 4 | 2 | 100 | 5 | none yet |" in table
    assert format_table(quick) == format_table(quick, None) and "converged" not in format_table(quick)


def test_make_demo_shows_the_tiny_transformer_figures_of_the_committed_ledger(in_repo):
    """Each demo row (the tiny Transformer) gets the converged figure of the tiny Transformer on the same data and
    with the same method: not the LSTM's, the English -> German table's, a sampled or bias-fitted variant's."""
    from fairseq_outlayers.lab.compare import ledger_figures

    got = ledger_figures(os.path.join(REPO, "docs", "results", "runs"), _demo_rows())
    assert got == {
        "softmax": "39.13 ± 0.53 (3 seeds, tiny-softmax)",
        "tied": "39.02 ± 0.90 (3 seeds, tiny-tied)",
        "fixed": "37.22 ± 0.85 (3 seeds, tiny-fixed)",
        "joint": "40.23 ± 0.77 (3 seeds, tiny-joint-512)",
        "continuous-vmf": "32.29 ± 1.37 (3 seeds, word-vmf)",
        "shared-private": "39.54 ± 0.30 (3 seeds, tiny-shared-private)",
    }


def test_the_demo_prints_its_table_once(tmp_path, monkeypatch, capsys):
    """One seed: the table is printed once (it used to come twice); two seeds: once after the first seed and
    once at the end. Each run is the ledger runner's, as a quick row at the demo's budget on the first GPU."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "test_2016_flickr.en").write_text("a b\n")
    data = tmp_path / "bin"
    data.mkdir()
    row = tmp_path / "10-tied.args"
    row.write_text("--output-layer tied\n")
    calls = []

    def fake_run(row, seed, settings):
        calls.append((row.name, seed, row.budget, settings.env, settings.ledger))
        return ({"test": {"test2016": {"sacrebleu": 20.0, "sacrebleu_signature": "s"}}, "tokens_per_second": 100.0,
                 "training_seconds": 1.0, "params": {"total": 10, "trained": 8, "embedding": 4, "output": 2}}, False)

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(runner, "run", fake_run)
    monkeypatch.setattr(runner, "check_before_training", lambda runs, settings: [])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,4")  # one run: the first GPU only
    monkeypatch.setattr(compare, "write_plot", lambda results, path: False)
    for seeds, times in ((["1"], 1), (["1", "2"], 2)):
        out = tmp_path / f"out{len(seeds)}"
        compare.main(["--data-bin", str(data), "--raw-dir", str(raw), "--rows", str(row), "--out", str(out),
                      "--seeds", *seeds, "--ledger", str(tmp_path / "no-ledger"), "--max-update", "30"])
        printed = capsys.readouterr().out
        assert printed.count("| method | seeds |") == times, printed
        assert "| tied | " in printed and "none yet" in printed and "docs/results/ledger.md" in printed
    assert calls[0] == ("tied", 1, 30, {"CUDA_VISIBLE_DEVICES": "3"}, str(tmp_path / "out1" / "records"))


def test_an_abort_at_exit_after_fairseq_finished_is_not_a_failure_and_any_other_failure_is(tmp_path):
    """fairseq's prefetch thread can abort the interpreter at exit after a --max-update run saved its last checkpoint
    (SIGABRT, "terminate called without an active exception"): the run is whole and the runner carries on. An abort
    before the end of training, or a non-zero exit after it, still stops the runner."""
    import sys

    from fairseq_outlayers.lab import fairseq_runs

    def fake(before_exit, then):
        return [sys.executable, "-c", f"import os, sys; print({before_exit!r}, flush=True); {then}"]

    log_path = str(tmp_path / "train.log")
    done = "INFO | fairseq_cli.train | done training in 1.2 seconds"
    assert fairseq_runs.run_training(fake(done, "os.abort()"), log_path, "row") >= 0
    assert open(log_path).read().strip() == done
    for before_exit, then in [("epoch 001 | loss 9.1", "os.abort()"), (done, "sys.exit(1)")]:
        with pytest.raises(SystemExit, match="fairseq-train failed for row"):
            fairseq_runs.run_training(fake(before_exit, then), log_path, "row")


def _fake_demo(tmp_path, monkeypatch, names=("softmax", "tied", "joint", "fixed")):
    """Row files 10-NAME.args ...; ``runner.run`` replaced by a fake that records each call (row, seed, its
    environment, start and end) and whose earlier rows take longer, so that two at once end out of order. The
    machine: two CPU cores, no GPU, OMP_NUM_THREADS unset."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "test_2016_flickr.en").write_text("a b\n")
    data = tmp_path / "bin"
    data.mkdir()
    rows = []
    for n, name in enumerate(names, start=1):
        row = tmp_path / f"{n}0-{name}.args"
        row.write_text(f"--output-layer {name}\n")
        rows.append(str(row))
    calls, lock = [], threading.Lock()

    def fake_run(row, seed, settings):
        start = time.monotonic()
        time.sleep(0.05 * (len(names) - names.index(row.name)))
        if row.name in fake_run.fail:
            raise SystemExit(f"fairseq-train failed for {row.name} seed {seed}")
        with lock:
            calls.append((row.name, seed, dict(settings.env), start, time.monotonic()))
        bleu = 10.0 + names.index(row.name) + seed / 10
        return ({"test": {"test2016": {"sacrebleu": bleu, "sacrebleu_signature": "s"}}, "tokens_per_second": 100.0,
                 "training_seconds": 1.0 + seed, "params": {"total": 10, "trained": 8, "embedding": 4, "output": 2}},
                False)

    fake_run.fail = ()
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(runner, "run", fake_run)
    monkeypatch.setattr(runner, "check_before_training", lambda runs, settings: [])
    monkeypatch.setattr(compare, "write_plot", lambda results, path: False)
    monkeypatch.setattr(slots, "cpu_cores", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    def run(out, *more):
        compare.main(["--data-bin", str(data), "--raw-dir", str(raw), "--rows", *rows, "--out", str(tmp_path / out),
                      "--seeds", "1", "2", "--ledger", str(tmp_path / "no-ledger"), "--max-update", "30", *more])
        return tmp_path / out

    return run, calls, fake_run


def _table_of(out):
    """results.md without its lines of date, wall time and runs at once, its own folder as OUT; results.json."""
    md = (out / "results.md").read_text().replace(str(out), "OUT").splitlines()
    return [line for line in md if not line.startswith(("Date ", "Data: "))], json.loads((out / "results.json").read_text())


def test_two_runs_at_once_end_in_any_order_and_give_the_table_of_one_at_a_time(tmp_path, monkeypatch, capsys):
    """--jobs 2 on two cores: two runs overlap, each with one thread, and they end out of order; the table, the rows'
    order and every figure equal those of --jobs 1 (one run at a time, torch's own threads); the default is 2."""
    run, calls, _ = _fake_demo(tmp_path, monkeypatch)
    one = run("one", "--jobs", "1")
    assert [c[:2] for c in calls] == [(n, s) for s in (1, 2) for n in ("softmax", "tied", "joint", "fixed")]
    assert all(c[2] == {} for c in calls) and all(a[4] <= b[3] for a, b in zip(calls, calls[1:]))
    calls.clear()
    two = run("two", "--jobs", "2")
    assert all(c[2] == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"} for c in calls)
    assert any(a[3] < b[4] and b[3] < a[4] for a in calls for b in calls if a is not b), "no two runs overlapped"
    ended = [c[:2] for c in calls]
    assert ended != sorted(ended, key=lambda c: (c[1], ["softmax", "tied", "joint", "fixed"].index(c[0])))
    assert _table_of(one) == _table_of(two)
    table = _table_of(two)[0]
    assert [line.split(" | ")[0] for line in table if line.startswith("| ") and " | 2 | " in line] == [
        "| softmax", "| tied", "| joint", "| fixed"]
    assert "| joint | 2 | 12.15 ± 0.05 |" in "\n".join(table)
    assert "2 runs at once, OMP_NUM_THREADS=1 each" in (two / "results.md").read_text()
    printed = capsys.readouterr().out
    assert printed.count("| method | seeds |") == 4  # per call: seed 1's table so far, then the final one
    calls.clear()
    assert _table_of(run("default")) == _table_of(one) and calls[0][2]["OMP_NUM_THREADS"] == "1"


def test_a_failed_run_is_reported_and_the_others_finish(tmp_path, monkeypatch):
    """A run that fails (fairseq-train's exit) stops nothing: the other rows run, the table shows them and names the
    failed run, and compare exits non-zero; run again, the failed row alone is left to do."""
    run, calls, fake_run = _fake_demo(tmp_path, monkeypatch, names=("softmax", "tied", "joint"))
    fake_run.fail = ("tied",)
    with pytest.raises(SystemExit, match=r"2 run\(s\) failed: tied seed 1, tied seed 2; the others are in the table"):
        run("out", "--jobs", "2")
    assert sorted(c[:2] for c in calls) == [("joint", 1), ("joint", 2), ("softmax", 1), ("softmax", 2)]
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| softmax | 2 |" in md and "| joint | 2 |" in md and "| tied |" not in md
    assert "Failed (not in the table; see each run's train.log in" in md and "tied seed 1, tied seed 2" in md
    fake_run.fail = ("softmax", "tied", "joint")
    with pytest.raises(SystemExit, match="every run failed"):
        run("none", "--jobs", "2")


def test_the_longest_rows_start_first_and_the_table_keeps_its_order(in_repo):
    """The start order comes from the committed ledger's seconds per update of each row's converged runs: the joint
    layer (the slowest) first; a row without a ledger row counts as the others' mean; no ledger: the table's order."""
    from fairseq_outlayers.lab.compare import start_order

    rows = _demo_rows()
    ledger = os.path.join(REPO, "docs", "results", "runs")
    order = [r.name for r in start_order(rows, ledger)]
    assert order[0] == "joint" and sorted(order) == sorted(r.name for r in rows), order
    assert [r.name for r in rows] == ["softmax", "tied", "fixed", "joint", "continuous-vmf", "shared-private"]
    assert start_order(rows, None) == rows
    odd = LedgerRow("odd", "odd.args", "data", ["--output-layer", "softmax"], base_args=["--arch", "lstm"])
    order = [r.name for r in start_order(rows + [odd], ledger)]
    assert order[0] == "joint" and order[-1] != "odd" and order.index("odd") > 0
