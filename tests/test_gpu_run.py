"""scripts/gpu_run.sh, the one prepared GPU run, checked on the CPU (``SMOKE=1 DEVICE=cpu``): a few quick
steps by default, every step with ``--run-slow``, each at tiny sizes, writing its file into the results archive
(each step's script has its own default test); a second call on the same machine runs
only what is left; a small budget leaves steps for the next call; a Python without fairseq stops at once. No
figure is checked: the sizes are a smoke run's."""
import os
import subprocess
import sys
import tarfile

import pytest
from harness import REPO

#: in the order they run: the tables a user needs most first
STEPS = ["fused-peers", "whole-model", "cuda-tests", "precision", "vmf-loss", "fused-loss", "layer", "decode", "joint",
         "fixed", "shared-private", "whole-bf16", "whole-more", "cuda-tests-all"]
FILES = ["fused_loss_peers_cuda.md", "precision_gpu.md", "vmf_loss_cuda.md", "whole_model_cuda.md", "fused_loss_gpu.md",
         "continuous_layer_cuda.md", "continuous_model_cuda.md", "joint_cuda.md", "fixed_cuda.md",
         "shared_private_cuda.md", "whole_model_cuda_bf16.md", "whole_model_cuda_more.md", "cuda-tests.txt",
         "cuda-tests-all.txt"]


def driver(tmp_path, python=None, **env):
    bin_dir = os.path.dirname(sys.executable)
    full = dict(os.environ, SMOKE="1", DEVICE="cpu", OUT=str(tmp_path / "out"),
                STATE=str(tmp_path / "state"), SITE=str(tmp_path / "site"), OMP_NUM_THREADS="1", PATH=bin_dir + os.pathsep + os.environ["PATH"],
                MULTI30K=str(tmp_path / "none"),
                # the call's budget is for a GPU's nine minutes; a loaded CPU (other tests beside it) may need more
                BUDGET="3600")
    full.update(env)
    full.pop("PYTHONPATH", None)
    full["PY"] = python or os.path.join(bin_dir, "python")
    return subprocess.run(["bash", os.path.join(REPO, "scripts", "gpu_run.sh")], cwd=REPO, env=full,
                          capture_output=True, text=True, timeout=900)


def members(tmp_path):
    with tarfile.open(tmp_path / "out" / "gpu-results.tar") as tar:
        return {os.path.basename(m.name) for m in tar.getmembers() if m.isfile()}


@pytest.mark.slow
def test_every_step_runs_and_a_second_call_runs_none_again(tmp_path):
    """Slow tier: every step at smoke size, minutes; the default tier runs the driver on a few cheap steps (below)."""
    first = driver(tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    log = (tmp_path / "out" / "log.txt").read_text()
    for step in STEPS:
        assert f"END {step}: exit 0" in log, f"{step} did not finish:\n{log[-4000:]}"
    assert log.rstrip().endswith("not finished:")
    got = members(tmp_path)
    assert set(FILES) <= got, sorted(set(FILES) - got)
    table = (tmp_path / "state" / "results" / "precision_gpu.md").read_text()
    assert "| vmf |" in table  # one method at smoke size (tests/test_bench_precision.py sweeps more)
    starts = [log.index(f"START {step} ") for step in STEPS if step != "precision"]  # beside cuda-tests
    assert starts == sorted(starts), "the steps ran out of order"
    peers = (tmp_path / "state" / "results" / "fused_loss_peers_cuda.md").read_text()
    assert "| torch reference |" in peers and "| `--fused-impl torch`, 65,536 logits | `torch` |" in peers

    second = driver(tmp_path)
    assert second.returncode == 0
    log = (tmp_path / "out" / "log.txt").read_text()  # both calls' log: the state keeps it
    assert all(f"done earlier: {s}" in log for s in STEPS)
    assert log.count("START vmf-loss") == 1  # started by the first call only
    assert set(FILES) <= members(tmp_path)  # the first call's files come back with the second


#: the default tier's steps: quick ones, one of each kind (a table first, the correctness pair's test step, timing)
CHEAP = ["fused-peers", "cuda-tests", "fused-loss"]


@pytest.mark.long(60)
def test_only_the_named_steps_run_in_order_and_a_second_call_runs_none_again(tmp_path):
    first = driver(tmp_path, STEPS=" ".join(CHEAP))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    log = (tmp_path / "out" / "log.txt").read_text()
    for step in CHEAP:
        assert f"END {step}: exit 0" in log, f"{step} did not finish:\n{log[-4000:]}"
    assert log.count("START ") == len(CHEAP)
    starts = [log.index(f"START {step} ") for step in CHEAP]
    assert starts == sorted(starts), "the steps ran out of order"
    # the steps left out are not finished; the named ones' files and logs are in the archive
    assert log.rstrip().endswith("not finished: " + " ".join(s for s in STEPS if s not in CHEAP))
    files = {"fused_loss_peers_cuda.md", "cuda-tests.txt", "fused_loss_gpu.md"}
    assert members(tmp_path) == files | {f"{s}.txt" for s in CHEAP}
    peers = (tmp_path / "state" / "results" / "fused_loss_peers_cuda.md").read_text()
    assert "| torch reference |" in peers and "| `--fused-impl torch`, 65,536 logits | `torch` |" in peers

    second = driver(tmp_path, STEPS=" ".join(CHEAP))
    assert second.returncode == 0
    log = (tmp_path / "out" / "log.txt").read_text()  # both calls' log: the state keeps it
    assert all(f"done earlier: {s}" in log for s in CHEAP) and log.count("START ") == len(CHEAP)
    assert members(tmp_path) == files | {f"{s}.txt" for s in CHEAP}  # the first call's files, with the second


def test_a_small_budget_leaves_every_step_for_the_next_call(tmp_path):
    proc = driver(tmp_path, BUDGET="20")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    log = (tmp_path / "out" / "log.txt").read_text()
    for step in STEPS:
        assert f"LEFT FOR THE NEXT CALL: {step}" in log
    assert "START" not in log and members(tmp_path) == set()


def test_a_python_without_fairseq_stops_before_any_step(tmp_path):
    bare = tmp_path / "bare-python"
    bare.write_text("#!/bin/sh\nexec env -u PYTHONPATH python3 -S -I \"$@\"\n")
    bare.chmod(0o755)
    probe = subprocess.run([str(bare), "-c", "import fairseq"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("the system Python has fairseq")
    proc = driver(tmp_path, python=str(bare))
    assert proc.returncode == 1
    log = (tmp_path / "out" / "log.txt").read_text()
    assert "STOP: fairseq or the package does not import" in log and "START" not in log


def test_the_docs_name_the_steps_of_each_tier():
    """docs/development.md and docs/benchmarks/README.md say how many steps the default tier runs."""
    assert len(CHEAP) == 3 and set(CHEAP) < set(STEPS)
    with open(os.path.join(REPO, "docs", "development.md"), encoding="utf-8") as f:
        assert "runs three quick steps of `scripts/gpu_run.sh` on the CPU (`make test-slow`: every step)" in f.read()
    with open(os.path.join(REPO, "docs", "benchmarks", "README.md"), encoding="utf-8") as f:
        assert "does so for three quick steps (`make test`) and for every step (`make test-slow`)" in f.read()
