"""scripts/bench_precision.py: runs without the package installed (no console script), --jobs, and --synthetic
making the target vectors and the pairing, so that every method gets a row."""
import os
import subprocess
import sys

import pytest

from harness import REPO, load_script

SCRIPT = os.path.join(REPO, "scripts", "bench_precision.py")
#: the methods that need an input made for them (synthetic pairing, synthetic vectors); not sorted: the rows keep
#: this order. Softmax needs nothing, and its row is the same code path
METHODS = ["vmf", "shared-private"]


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_precision.py")


def _rows(text):
    """The table's rows (after the header), without the wall-time line that differs between runs."""
    return [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| method")]


def test_every_subprocess_is_this_python_not_a_console_script(bench, tmp_path):
    args = bench.argparse.Namespace(vectors="v.vec", pairing="p.txt", arch="outlayers_transformer_tiny", lr=1e-3,
                                    max_update=3, max_tokens=100, device="cpu")
    for name in ("softmax", "vmf", "shared-private"):
        cmd = bench.train_command(args, name, "bf16", "data", str(tmp_path))
        assert cmd[:2] == [sys.executable, "-c"] and "wrappers import train" in cmd[2]
        assert not any("outlayers-train" in c or os.path.dirname(sys.executable) + os.sep in c for c in cmd[3:])
        assert "--bf16" in cmd and "--cpu" in cmd
    assert "--target-vectors" in bench.train_command(args, "vmf", "fp32", "d", "r")
    assert "--pairing" in bench.train_command(args, "shared-private", "fp32", "d", "r")
    for tool in (bench.PREPROCESS, bench.PAIRING, bench.VECTORS):
        assert tool[:2] == [sys.executable, "-m"]
    env = bench.child_env(threads=3)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == REPO


def test_explicit_files_win_over_synthetic_ones_and_rows_keep_the_methods_order(bench, tmp_path, monkeypatch):
    """No training: the synthetic corpus and the runs are stand-ins; what reaches the runs is checked."""
    seen = {}

    def fake_run_all(args, jobs, results=None):
        seen.update(vectors=args.vectors, word=args.word_data, pairing=args.pairing, jobs=dict(jobs))
        return {key: {"loss": 2.0 if key[1] == "fp32" else 2.01, "status": 1 if key == ("tied", "bf16") else 0,
                      "seconds": 0.0, "reused": False} for key in jobs}

    def no_synthetic(*a):
        raise AssertionError("a synthetic file was made although the option was given")

    monkeypatch.setattr(bench, "synthetic_data", lambda work: "SYNTH")
    monkeypatch.setattr(bench, "synthetic_vectors", no_synthetic)
    monkeypatch.setattr(bench, "synthetic_pairing", no_synthetic)
    monkeypatch.setattr(bench, "run_all", fake_run_all)
    out = tmp_path / "p.md"
    bench.main(["--device", "cpu", "--synthetic", "--precisions", "fp32", "bf16", "--methods", "vmf", "tied",
                "shared-private", "--vectors", "my.vec", "--word-data", "WORD", "--pairing", "my.txt",
                "--work-dir", str(tmp_path), "--output", str(out)])
    assert seen["vectors"] == "my.vec" and seen["word"] == "WORD" and seen["pairing"] == "my.txt"
    assert seen["jobs"][("vmf", "fp32")] == "WORD" and seen["jobs"][("tied", "bf16")] == "SYNTH"
    text = out.read_text()
    assert [r.split(" | ")[0] for r in _rows(text)] == ["| vmf", "| tied", "| shared-private"]
    assert "Runs that failed (exit status): tied bf16 (1)" in text

    # --data given: the synthetic pairing (of the synthetic dictionaries) would not fit it, so none is made
    monkeypatch.setattr(bench, "synthetic_vectors", lambda work, data: "SYNTH.vec")
    bench.main(["--device", "cpu", "--synthetic", "--data", "REAL", "--precisions", "fp32", "bf16", "--methods",
                "shared-private", "cosine", "--work-dir", str(tmp_path), "--output", str(out), "--force"])
    assert seen["pairing"] is None and seen["vectors"] == "SYNTH.vec"
    assert "Skipped (data not given): shared-private." in out.read_text()


def test_a_stopped_sweep_writes_the_table_of_what_finished(bench, tmp_path, monkeypatch):
    """A signal during the sweep (a time limit): the finished runs' table, marked partial, and exit status 1."""
    def stopped_run_all(args, jobs, results):
        results[("tied", "fp32")] = {"loss": 2.0, "status": 0, "seconds": 1.0, "reused": False}
        results[("tied", "bf16")] = {"loss": 2.01, "status": 0, "seconds": 1.0, "reused": False}
        raise KeyboardInterrupt("signal 15")

    monkeypatch.setattr(bench, "synthetic_data", lambda work: "SYNTH")
    monkeypatch.setattr(bench, "run_all", stopped_run_all)
    out = tmp_path / "p.md"
    assert bench.main(["--device", "cpu", "--synthetic", "--data", "REAL", "--precisions", "fp32", "bf16",
                       "--methods", "tied", "softmax", "--work-dir", str(tmp_path), "--output", str(out)]) == 1
    text = out.read_text()
    assert "**Partial: stopped (signal 15) with 2 of 4 runs finished" in text
    assert "| tied | 2.000 | 2.010 | +0.5 % |" in text and "| softmax | nan | nan | not run |" in text
    assert "Outside the tolerance: none." in text and "Runs that failed" not in text


@pytest.mark.parametrize("methods", [pytest.param(METHODS[:1], marks=pytest.mark.long(25), id="vmf"),
                                     pytest.param(METHODS, marks=pytest.mark.slow, id="every-kind")])
def test_synthetic_sweep_runs_every_kind_of_method_with_the_package_not_installed(bench, tmp_path, methods):
    """A real sweep (2 updates) in a subprocess, as on a machine where the package is only on PYTHONPATH: another
    working directory, no venv on PATH. vmf (synthetic vectors) in fp32 and bf16, two runs at a time, and with
    --run-slow shared-private (synthetic pairing) too; then the same table from the kept logs with --jobs 1. bf16
    training of every method has its own test (tests/test_bf16.py); the pairing tool too (tests/test_pairing.py)."""
    work, out = tmp_path / "work", tmp_path / "work" / "p.md"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHONPATH=REPO, PATH=os.defpath, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    # 512 tokens a batch (the script's default is 4,096): bf16 matmuls are slow on a CPU, and no figure is checked
    argv = ["--device", "cpu", "--synthetic", "--precisions", "fp32", "bf16", "--max-update", "2", "--max-tokens",
            "512", "--methods", *methods, "--work-dir", str(work), "--output", str(out), "--force"]
    proc = subprocess.run([sys.executable, SCRIPT] + argv + ["--jobs", "2"], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    runs = 2 * len(methods)
    assert len(progress) == runs and progress[-1].startswith(f"[{runs}/{runs}] "), proc.stdout
    text = out.read_text()
    rows = _rows(text)
    assert [r.split(" | ")[0] for r in rows] == [f"| {m}" for m in methods]
    assert "nan" not in text and "Skipped" not in text and "Runs that failed" not in text, text
    assert (work / "random.en.32d.vec").exists()
    assert (work / "pairs.de-en.txt").exists() == ("shared-private" in methods)  # made only for the rows that need it
    log = (work / "vmf.bf16" / "train.log").read_text()
    assert log.startswith(sys.executable + " -c ") and "--target-vectors" in log

    bench.main(argv + ["--jobs", "1"])  # every log is reused: no training
    assert _rows(out.read_text()) == rows
