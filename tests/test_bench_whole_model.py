"""scripts/bench_whole_model.py without a GPU: fairseq's json log is read as it writes it, the command lines are
fairseq-train's, the table's ratios and gain shares are right, and (slow) one tiny CPU run trains every method
through fairseq-train on a generated corpus and its bound. No timing is asserted."""
import json
import math

import pytest
from harness import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_whole_model.py")


def test_parse_log_takes_the_median_wps_after_the_warmup(bench):
    line = "2026-11-27 06:00:00 | INFO | train_inner | " + "{}"
    text = "\n".join([line.format(json.dumps({"epoch": 1, "num_updates": str(u), "wps": str(w)}))
                      for u, w in ((5, 10.0), (10, 300.0), (15, 100.0), (20, 200.0))]
                     + ["2026-11-27 | INFO | fairseq_cli.train | num. shared model params: 9 (num. trained: 9)"])
    tok_s, intervals, params, oom = bench.parse_log(text, warmup=5)
    assert tok_s == 200.0 and intervals == [300.0, 100.0, 200.0] and "num. trained: 9" in params and not oom
    # the profiled update comes after the timed ones: an interval that ends there is not timed
    tok_s, intervals, _, _ = bench.parse_log(text, warmup=5, last=15)
    assert tok_s == 200.0 and intervals == [300.0, 100.0]
    tok_s, intervals, _, oom = bench.parse_log("| WARNING | OOM: Ran out of memory with exception", warmup=0)
    assert math.isnan(tok_s) and intervals == [] and oom


def test_train_command(bench):
    from argparse import Namespace

    args = Namespace(arch="outlayers_transformer", updates=30, log_interval=5, device="cuda", extra=[])
    files = {"vec": "/v.vec", "pairing": "/p.txt"}
    cmd = bench.train_command(args, "/d", "joint d_j = d", "fp16", 8192, files, "/s")
    assert cmd[0] == "/d" and cmd[cmd.index("--joint-dim") + 1] == "512" and "--fp16" in cmd and "--cpu" not in cmd
    assert cmd[cmd.index("--max-tokens") + 1] == "8192" and cmd[cmd.index("-t") + 1] == "tgt"
    cmd = bench.train_command(Namespace(**{**vars(args), "device": "cpu"}), "/b", bench.BOUND,
                              "fp32", 1024, files, "/s")
    assert "--cpu" in cmd and cmd[cmd.index("-t") + 1] == "bound" and "--fp16" not in cmd
    cmd = bench.train_command(args, "/d", "continuous, vmf_nll", "fp32", 1024, files, "/s")
    assert cmd[cmd.index("--target-vectors") + 1] == "/v.vec" and cmd[cmd.index("--criterion") + 1] == "vmf_nll"
    cmd = bench.train_command(args, "/d", "shared-private", "bf16", 1024, files, "/s")
    assert cmd[cmd.index("--pairing") + 1] == "/p.txt" and cmd[cmd.index("--embeddings") + 1] == "shared-private"
    assert "--bf16" in cmd and "--fp16" not in cmd
    cmd = bench.train_command(args, "/d", "tied, fused loss", "fp32", 1024, files, "/s")
    assert cmd[cmd.index("--criterion") + 1] == "fused_cross_entropy" and cmd[cmd.index("--output-layer") + 1] == "tied"


def test_table_ratios_and_gain_share(bench):
    def row(method, tok_s, peak, **kw):
        return {"method": method, "vocab": 50000, "precision": "fp16", "max_tokens": 8192, "tok_s": tok_s,
                "cuda_allocated": peak * bench.GiB, **kw}

    profiled = {"aten_ops": 4321, "kernels": 1234, "kernel_ms": 30.0}
    rows = [row("softmax", 100.0, 4.0, wpb=10.0, profile=profiled), row("continuous, vmf_nll", 150.0, 1.0),
            row(bench.BOUND, 200.0, 0.5), row("tied", 0.0, 0.0, error="out of memory")]
    lines = bench.table(rows, "cuda")
    assert lines[0].endswith("| x softmax memory | aten ops / update | CUDA kernels / update | GPU busy |")
    assert lines[1].count("|") == lines[0].count("|")
    # an update of 10 target tokens at 100 tokens/s takes 100 ms, of which the kernels ran 30: 30 % busy
    assert "| 50000 | fp16 | 8192 | softmax | 100 | 1.00 | 0.50 | 0 % | 4.00 | 1.00 | 4,321 | 1,234 | 30 % |" in lines
    assert "| 50000 | fp16 | 8192 | continuous, vmf_nll | 150 | 1.50 | 0.75 | 50 % | 1.00 | 0.25 |  |  |  |" in lines
    assert f"| 50000 | fp16 | 8192 | {bench.BOUND} | 200 | 2.00 | 1.00 | 100 % | 0.50 | 0.12 |  |  |  |" in lines
    assert "| 50000 | fp16 | 8192 | tied | failed: out of memory | | | | | | | | |" in lines
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    cpu = bench.table(rows[:1], "cpu")
    assert cpu[0].endswith("| aten ops / update |") and cpu[2].endswith("| 4,321 |")


def test_repeated_runs_give_median_speed_paired_ratios_and_target_verdicts(bench):
    """Three rounds: tokens/s is the median of a method's runs, x softmax the median of the per-round ratios with
    their range; the targets say met, not met, or within the range; a failed run is counted, not averaged."""
    def runs(method, speeds, **kw):
        return [{"method": method, "vocab": 50000, "precision": "fp32", "max_tokens": 2048, "round": i,
                 "tok_s": t, "max_rss": (2 + i) * bench.GiB, **kw} for i, t in enumerate(speeds)]

    rows = (runs("softmax", [100.0, 50.0, 100.0]) + runs("tied", [100.0, 100.0, 100.0])
            + runs("continuous, vmf_nll", [150.0, 70.0, 140.0]) + runs("joint d_j = d", [96.0, 85.0, 88.0])
            + runs(bench.BOUND, [200.0, 100.0, 200.0]))
    rows[-5]["error"] = "out of memory"  # joint's second round
    lines = bench.table(rows, "cpu")
    # softmax: median 100; vmf: median 140, ratios 1.5, 1.4, 1.4; peak: the largest of the rounds
    assert "| 50000 | fp32 | 2048 | softmax | 100 | 1.00 (1.00-1.00) | 0.50 | 0 % | 4.00 | 1.00 |  |" in lines
    assert ("| 50000 | fp32 | 2048 | continuous, vmf_nll | 140 | 1.40 (1.40-1.50) | 0.70 | 40 % | 4.00 | 1.00 |  |"
            in lines)
    assert ("| 50000 | fp32 | 2048 | joint d_j = d | 92 (1 of 3 runs failed) | 0.92 (0.88-0.96) | 0.46 | -8 % | 4.00 "
            "| 1.00 |  |" in lines)
    targets = bench.target_lines(rows)
    assert targets == [
        "- V = 50000, fp32, 2048 tokens/update: continuous, vmf_nll at 1.40 (1.40-1.50)x softmax's tokens/s "
        "(target: at least 1.30x): **met**.",
        "- V = 50000, fp32, 2048 tokens/update: joint d_j = d at 0.92 (0.88-0.96)x tied's tokens/s "
        "(target: at least 0.90x): **within the run-to-run range**."]
    one_round = [r for r in rows if r["round"] == 1 and r["method"] != "joint d_j = d"]
    assert bench.target_lines(one_round) == [
        "- V = 50000, fp32, 2048 tokens/update: continuous, vmf_nll at 1.40x softmax's tokens/s "
        "(target: at least 1.30x): **met**."]
    slow = [dict(r, tok_s=r["tok_s"] * 0.9 if r["method"] == "continuous, vmf_nll" else r["tok_s"]) for r in one_round]
    assert "(target: at least 1.30x): **not met**." in bench.target_lines(slow)[0]  # 1.26x
    with pytest.raises(SystemExit):
        bench.main(["--device", "cpu", "--repeats", "0", "--output", "/nonexistent/x.md"])


def test_fp16_on_the_cpu_is_refused(bench, tmp_path):
    with pytest.raises(SystemExit):
        bench.main(["--device", "cpu", "--precision", "fp16", "--output", str(tmp_path / "x.md")])
    assert not (tmp_path / "x.md").exists()


@pytest.mark.slow
def test_tiny_cpu_run_trains_every_method(bench, tmp_path):
    """Every method through fairseq-train on the CPU (a few minutes on 2 busy cores)."""
    out = tmp_path / "wm.md"
    assert bench.main(["--device", "cpu", "--vocab", "256", "--max-tokens", "256", "--updates", "3",
                       "--warmup-updates", "1", "--log-interval", "1", "--workers", "1", "--output", str(out)]) == 0
    text = out.read_text()
    for method in bench.METHODS:
        assert f"| 256 | fp32 | 256 | {method} | " in text and "failed" not in text
    rows = [line for line in text.splitlines() if line.startswith("| 256 | fp32 | 256 |")]
    assert all(int(line.split("|")[-2].strip().replace(",", "")) > 100 for line in rows)  # aten ops, profiled


def test_the_corpus_is_binarised_without_a_fork_once_cuda_is_initialised(bench, tmp_path, monkeypatch):
    """The GPU call names the device (which initialises CUDA) before it writes the corpora; fairseq-preprocess's
    worker pool would then fork a process whose CUDA is initialised. Simulated on the CPU: ``os.fork`` fails."""
    import os

    import torch

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)

    def refused(*args, **kwargs):
        raise AssertionError("os.fork in a process whose CUDA is initialised")

    monkeypatch.setattr(os, "fork", refused)
    data, bound, files = bench.write_corpus(str(tmp_path), 64, 40, workers=4, log=lambda *a, **k: None)
    assert os.path.exists(os.path.join(data, "train.src-tgt.tgt.bin"))
    assert os.path.exists(os.path.join(bound, "dict.bound.txt")) and os.path.exists(files["pairing"])
