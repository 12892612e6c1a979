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
    proc = train(tiny_bin, str(tmp_path / "a"), extra=["--output-layer", "tied-all"], check=False, cli="outlayers-train")
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
    inter = run([tool("fairseq-interactive"), tiny_bin, "--user-dir", USER_DIR, "--path", ckpt, "--cpu", "--beam",
                 "2", "--source-lang", "de", "--target-lang", "en"], input="s5 s6 s7\ns1 s2\n", timeout=300)
    assert sum(1 for line in inter.stdout.splitlines() if line.startswith("H-")) == 2
    val = run([tool("fairseq-validate"), tiny_bin, "--task", "translation", "--user-dir", USER_DIR,
               "--path", ckpt, "--cpu",
               "--max-tokens", "1000", "--valid-subset", "valid"])
    assert "valid on 'valid' subset" in val.stdout + val.stderr


def test_hydra_train_with_the_shipped_config(tiny_bin, tmp_path):
    """fairseq-hydra-train with configs/multi30k/softmax.yaml and plugin options as overrides."""
    from harness import REPO

    save = str(tmp_path / "hydra")
    proc = run([tool("fairseq-hydra-train"), "--config-dir", os.path.join(REPO, "configs", "multi30k"),
                "--config-name", "softmax", f"common.user_dir={USER_DIR}", f"task.data={tiny_bin}",
                "common.cpu=true", "model.output_layer=tied", "+model.encoder_layers=1", "+model.decoder_layers=1",
                "+model.encoder_embed_dim=32", "+model.decoder_embed_dim=32", "+model.encoder_ffn_embed_dim=64",
                "+model.decoder_ffn_embed_dim=64", "optimization.max_update=3", "dataset.max_tokens=600",
                "dataset.num_workers=0", f"checkpoint.save_dir={save}", f"hydra.run.dir={tmp_path}/hydra_out"])
    out = proc.stdout + proc.stderr
    assert "num_updates 3" in out or "num_updates=3" in out
    state = torch.load(os.path.join(save, "checkpoint_last.pt"), map_location="cpu")
    assert "decoder.output_projection.weight" not in state["model"]  # tied: no separate output matrix
    _, hyps = generate(tiny_bin, os.path.join(save, "checkpoint_last.pt"))
    assert len(hyps) == 24


def test_installed_package_needs_no_repo_path(tiny_bin, tmp_path):
    """`python -m fairseq_outlayers user-dir` prints the plugin path; outlayers-train passes it by itself."""
    import sys

    path = run([sys.executable, "-m", "fairseq_outlayers", "user-dir"], cwd=str(tmp_path)).stdout.strip()
    assert os.path.samefile(path, USER_DIR)
    save = str(tmp_path / "ckpt")
    from harness import train_args

    run([tool("outlayers-train")] + train_args(tiny_bin, save, extra=["--output-layer", "tied"], max_update=2,
                                               user_dir=None), cwd=str(tmp_path))
    gen = run([tool("outlayers-generate"), tiny_bin, "--path", os.path.join(save, "checkpoint_last.pt"), "--cpu",
               "--beam", "2", "--max-tokens", "2000"], cwd=str(tmp_path))
    assert gen.stdout.count("\nH-") + gen.stdout.startswith("H-") == 24
    report = run([tool("outlayers-params"), os.path.join(save, "checkpoint_last.pt"), "--json"], cwd=str(tmp_path))
    import json

    counts = json.loads(report.stdout[report.stdout.index("{"):])
    assert counts["output"] == 0 and counts["trained"] == counts["total"] > 0


def test_bad_data_gives_one_line_errors(tiny_bin, tmp_path):
    import shutil

    proc = train(str(tmp_path / "no-such-dir"), str(tmp_path / "x"), check=False, cli="outlayers-train")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "fairseq_outlayers: error: data path" in proc.stderr and "no-such-dir" in proc.stderr
    bad = str(tmp_path / "bad-bin")
    shutil.copytree(tiny_bin, bad)
    with open(os.path.join(tiny_bin, "dict.en.txt")) as f:
        head = f.readlines()[:10]
    with open(os.path.join(bad, "dict.en.txt"), "w") as f:
        f.writelines(head)
    proc = train(bad, str(tmp_path / "y"), check=False, cli="outlayers-train")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "does not belong to this binarised data" in proc.stderr and "dict.en.txt" in proc.stderr
    # fairseq's own fairseq-train: Python's traceback, whose last line is the same message
    plain = train(bad, str(tmp_path / "z"), check=False)
    last = plain.stderr.strip().splitlines()[-1]
    assert plain.returncode == 1 and last.startswith("fairseq_outlayers.errors.OutlayersConfigError: ")
    assert "fairseq_outlayers: error: " + last.split(": ", 1)[1] in proc.stderr.splitlines()
    # nothing the user made was touched
    assert open(os.path.join(tiny_bin, "dict.en.txt")).readlines()[:10] == head
