"""Every benchmark script writes the four facts of its page itself: command, date, commit and device (no page
takes them from ``git log``). The scripts run at sizes of a few seconds; nothing is timed."""
import re
import subprocess
import time

import pytest

from harness import REPO, load_script

TINY = {
    "bench_fixed_targets.py": ["--device", "cpu", "--vocab", "500", "--dim", "16", "--tokens", "64", "--reps", "1"],
    "bench_joint_output.py": ["--device", "cpu", "--vocab", "500", "--joint-dims", "16", "--ratios", "1.0", "--dim",
                              "16", "--tokens", "64", "--steps", "1"],
    "bench_shared_private.py": ["--device", "cpu", "--vocab", "500", "--dim", "16", "--layers", "1", "--sentences",
                                "4", "--length", "6", "--rounds", "1", "--steps", "1"],
    "bench_fused_loss.py": ["--device", "cpu", "--vocab", "300", "--tokens", "64", "--dim", "16", "--layers",
                            "softmax", "--model-arch", "none", "--warmup", "0", "--repeats", "1"],
}


@pytest.mark.parametrize("script", sorted(TINY))
def test_the_page_states_command_date_commit_and_device(script, tmp_path):
    from fairseq_outlayers.lab.docs import benchmark_facts

    out = tmp_path / "page.md"
    load_script(script).main(TINY[script] + ["--output", str(out)])
    facts = benchmark_facts(str(out))
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert f"python scripts/{script} --device cpu" in facts["command"]
    assert facts["date"] == time.strftime("%Y-%m-%d", time.gmtime())
    # a checkout with changes of its own (a method being added) states them after the commit
    assert re.fullmatch(re.escape(head) + r"( \(.+ modified\))?", facts["commit"]), facts["commit"]
    assert "git log" not in out.read_text().split("\n|", 1)[0]
    assert facts["device"] and facts["device"] != "cpu"  # the CPU's name, not the word
    text = out.read_text()
    assert text.count("\nDate: ") == 1, "one date line"  # fixed_cuda.md had two (2026-12-04)
    blocks = re.findall(r"(?:^\|.*\|\n)+", text, flags=re.M)
    assert blocks
    for block in blocks:  # every row as many cells as its head (joint_cuda.md's head had an empty one, 2026-12-04)
        widths = {line.count("|") for line in block.splitlines()}
        assert len(widths) == 1, block
