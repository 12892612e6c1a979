"""bf16 without a TPU: fairseq 0.12 sets --tpu for --bf16; the package takes it back (fairseq_outlayers.core.fairseq_compat).

On the CPU fairseq trains a bf16 model too (the Trainer converts the model, FP16Optimizer keeps float32 master
weights without loss scaling), so the whole path runs here; tests/test_cuda.py runs it on a GPU.
"""
import math
from argparse import Namespace

import numpy as np
import pytest
from omegaconf import OmegaConf

from fairseq_outlayers.core import fairseq_compat as precision
from harness import TINY_TRANSFORMER, logged_losses, train


def test_only_an_implied_tpu_is_taken_back(monkeypatch):
    monkeypatch.setattr(precision.importlib.util, "find_spec", lambda name: None)  # no torch_xla
    args = Namespace(bf16=True, tpu=True)
    assert precision.keep_bf16_off_the_tpu(args, ["data", "--bf16"]) and args.tpu is False
    for argv in (["--bf16", "--tpu"], ["--tpu=True"]):  # asked for: left to fairseq
        args = Namespace(bf16=True, tpu=True)
        assert not precision.keep_bf16_off_the_tpu(args, argv) and args.tpu is True
    args = Namespace(bf16=False, tpu=True)
    assert not precision.keep_bf16_off_the_tpu(args, []) and args.tpu is True
    monkeypatch.setattr(precision.importlib.util, "find_spec", lambda name: object())  # torch_xla installed
    args = Namespace(bf16=True, tpu=True)
    assert not precision.keep_bf16_off_the_tpu(args, ["--bf16"]) and args.tpu is True


def test_the_run_configuration_is_reached_through_the_task(monkeypatch):
    """Under fairseq-train the task's configuration is a node of the run's configuration, the object the Trainer
    reads --tpu from; the model's arguments are a copy."""
    monkeypatch.setattr(precision.importlib.util, "find_spec", lambda name: None)
    root = OmegaConf.create({"common": {"bf16": True, "tpu": True}, "task": {"data": "x"},
                             "distributed_training": {"tpu": "${common.tpu}"}})
    OmegaConf.set_struct(root, True)
    task, args = Namespace(cfg=root.task), Namespace(tpu=True)
    assert precision.release_bf16_from_tpu(args, task, ["--bf16"])
    assert root.common.tpu is False and root.distributed_training.tpu is False and args.tpu is False
    assert not precision.release_bf16_from_tpu(args, Namespace(cfg=Namespace(data="x")), ["--bf16"])


@pytest.mark.parametrize("cli,option", [("fairseq-train", "--bf16"), ("outlayers-train", "--memory-efficient-bf16"),
                                        ("outlayers-train", "--bf16")])
def test_bf16_trains_on_the_cpu(tiny_bin, tmp_path, cli, option):
    """The fused loss in bf16: the matrix is bf16, the loss finite, fairseq's --tpu switched off."""
    proc = train(tiny_bin, str(tmp_path / "ckpt"), TINY_TRANSFORMER, [
        "--output-layer", "joint", "--joint-dim", "16", "--criterion", "fused_cross_entropy", "--label-smoothing",
        "0.1", option], max_update=3, cli=cli)
    out = proc.stdout + proc.stderr
    assert precision.NOTE in out and "output matrix in torch.bfloat16, features in torch.bfloat16" in out
    losses = [float(v) for v in __import__("re").findall(r"train_inner.*? loss=(-?[\d.]+)", out)]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses), losses


def test_vmf_in_bf16_on_the_cpu(tiny_bin, tmp_path):
    """The continuous output layer with the vMF loss in a bf16 model: finite losses (κ and log C_m are computed
    from the float32 copy of the prediction, log C_m in float64 inside)."""
    from fairseq.data import Dictionary

    d = Dictionary.load(f"{tiny_bin}/dict.en.txt")
    words = [w for w in d.symbols[d.nspecial:] if not w.startswith("madeupword")]
    rng = np.random.default_rng(0)
    vec = tmp_path / "en.vec"
    vec.write_text(f"{len(words)} 16\n" + "".join(w + " " + " ".join(f"{x:.6f}" for x in rng.standard_normal(16))
                                                 + "\n" for w in words))
    proc = train(tiny_bin, str(tmp_path / "ckpt"), TINY_TRANSFORMER, [
        "--output-layer", "continuous", "--target-vectors", str(vec), "--criterion", "vmf_nll", "--bf16"],
        max_update=3)
    losses = logged_losses(proc.stdout + proc.stderr)
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses), losses
