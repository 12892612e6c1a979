"""The plugin through fairseq's real CLIs: train, generate, interactive, validate, on a tiny corpus."""
import os

import pytest
import torch

from harness import (TINY_LSTM, TINY_TRANSFORMER, USER_DIR, generate, logged_losses, run, tool, train,
                     train_args)


@pytest.mark.parametrize("arch_args", [TINY_TRANSFORMER, TINY_LSTM], ids=["transformer", "lstm"])
@pytest.mark.parametrize("layer", ["softmax", "tied"])
def test_train_then_generate(tiny_bin, tmp_path, arch_args, layer):
    save = str(tmp_path / "ckpt")
    proc = train(tiny_bin, save, arch_args, ["--output-layer", layer], max_update=6)
    losses = logged_losses(proc.stdout + proc.stderr)
    assert len(losses) == 6 and losses[-1] < losses[0], losses
    ckpt = os.path.join(save, "checkpoint_last.pt")
    state = torch.load(ckpt, map_location="cpu")  # safe (weights_only) load: the plugin's allow-list is active
    keys = set(state["model"])
    assert ("decoder.output_projection.weight" in keys) == (layer == "softmax")
    _, hyps = generate(tiny_bin, ckpt)
    assert len(hyps) == 24  # every test sentence translated


def test_tied_all_needs_joined_dictionary(tiny_bin, tiny_bin_joined, tmp_path):
    proc = train(tiny_bin, str(tmp_path / "a"), extra=["--output-layer", "tied-all"], check=False)
    assert proc.returncode != 0
    assert "joined dictionary" in proc.stderr and "--joined-dictionary" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = train(tiny_bin_joined, str(tmp_path / "b"), extra=["--output-layer", "tied-all"])
    state = torch.load(os.path.join(tmp_path / "b", "checkpoint_last.pt"), map_location="cpu")
    emb = [k for k in state["model"] if k.endswith("embed_tokens.weight")]
    # one matrix for source, target and output: fairseq stores it under both embedding names, same values
    assert torch.equal(state["model"]["encoder.embed_tokens.weight"], state["model"]["decoder.embed_tokens.weight"])
    assert len(emb) == 2


def test_interactive_and_validate(tiny_bin, tmp_path):
    save = str(tmp_path / "ckpt")
    train(tiny_bin, save, extra=["--output-layer", "tied"])
    ckpt = os.path.join(save, "checkpoint_last.pt")
    import subprocess

    inter = subprocess.run([tool("fairseq-interactive"), tiny_bin, "--user-dir", USER_DIR, "--path", ckpt,
                            "--cpu", "--beam", "2", "--source-lang", "de", "--target-lang", "en"],
                           input="s5 s6 s7\ns1 s2\n", capture_output=True, text=True, timeout=300)
    assert inter.returncode == 0, inter.stderr[-2000:]
    assert sum(1 for line in inter.stdout.splitlines() if line.startswith("H-")) == 2
    val = run([tool("fairseq-validate"), tiny_bin, "--task", "translation", "--user-dir", USER_DIR,
               "--path", ckpt, "--cpu",
               "--max-tokens", "1000", "--valid-subset", "valid"])
    assert "valid on 'valid' subset" in val.stdout + val.stderr


def test_data_parallel_two_processes_match_single_process(tiny_bin, tmp_path):
    """Two gloo workers with half the batch each take the same steps as one process with the whole batch."""
    from harness import train_distributed

    single = train(tiny_bin, str(tmp_path / "one"), extra=["--output-layer", "tied", "--update-freq", "2",
                                                              "--required-batch-size-multiple", "1"],
                   max_update=3)
    outs = train_distributed(tiny_bin, str(tmp_path / "two"), extra=["--output-layer", "tied",
                                                                     "--required-batch-size-multiple", "1"],
                             max_update=3)
    assert "distributed init (rank 1)" in outs[1] or "rank 1" in outs[1]
    sa = torch.load(os.path.join(tmp_path / "one", "checkpoint_last.pt"), map_location="cpu")
    sb = torch.load(os.path.join(tmp_path / "two", "checkpoint_last.pt"), map_location="cpu")
    assert sa["optimizer_history"][-1]["num_updates"] == sb["optimizer_history"][-1]["num_updates"] == 3
    a, b = sa["model"], sb["model"]
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-5, rtol=1e-4), (key, (a[key] - b[key]).abs().max())
