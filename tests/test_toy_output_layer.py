"""A layer registered from outside the package (docs/architecture.md), proven by a toy registered from tests/
only: the scaled-cosine softmax of ``tests/toy_output_layer/`` trains with ``fairseq-train`` and translates with
``fairseq-generate`` (its directory is the ``--user-dir``; it imports ``fairseq_outlayers`` itself), its option
reaches the module and the checkpoint, its logits are s * cos(h, w_v) to float64 rounding, and the package's
option check covers it without a line of ``fairseq_outlayers/`` naming it."""
import os
import sys

import numpy as np
import pytest
import torch

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.core.registry import OUTPUT_LAYER_REGISTRY, unregister_output_layer
from harness import REPO, TINY_LSTM, TINY_TRANSFORMER, device_args, logged_losses, parse_hypotheses, run, tool, \
    train_args

TOY_DIR = os.path.join(REPO, "tests", "toy_output_layer")
#: the toy's subprocesses import this checkout's package (the toy imports it by name, not through --user-dir)
ENV = {"PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}


@pytest.fixture
def toy():
    """The toy module, imported in this process: ``--output-layer toy-cosine`` is registered for one test and
    removed afterwards, so no other test sees it, in any order."""
    import importlib

    from fairseq import utils

    module = importlib.import_module("toy_output_layer")  # tests/ is on sys.path (conftest.py)
    assert os.path.dirname(module.__file__) == TOY_DIR and "toy-cosine" in OUTPUT_LAYER_REGISTRY
    yield module
    unregister_output_layer("toy-cosine")
    del sys.modules["toy_output_layer"]  # the next import registers it again
    getattr(utils.import_user_module, "memo", set()).discard(TOY_DIR)  # so does the next --user-dir


def build(bin_dir, arch_args, extra):
    """(task, model) as fairseq-train builds them, with the toy's directory as the user dir."""
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [bin_dir, "--user-dir", TOY_DIR] + arch_args + extra)
    task = tasks.setup_task(args)
    return task, task.build_model(args)


def test_toy_trains_and_generates_through_fairseq_clis(tiny_bin, tmp_path):
    save = str(tmp_path / "ckpt")
    proc = run([tool("fairseq-train")] + train_args(tiny_bin, save, TINY_TRANSFORMER, user_dir=TOY_DIR, extra=[
        "--output-layer", "toy-cosine", "--toy-cosine-scale", "7.5"]), env=ENV)
    losses = logged_losses(proc.stdout + proc.stderr)
    assert len(losses) == 4 and all(np.isfinite(losses))
    state = torch.load(os.path.join(save, "checkpoint_last.pt"), map_location="cpu", weights_only=True)
    model_args = state["cfg"]["model"]
    assert (model_args.output_layer, model_args.toy_cosine_scale) == ("toy-cosine", 7.5)
    params = state["model"]
    assert params["decoder.output_projection.scale"].item() == 7.5  # the option, in the checkpoint's tensors
    toy_keys = sorted(k for k in params if k.startswith("decoder.output_projection."))
    assert toy_keys == ["decoder.output_projection.scale", "decoder.output_projection.weight"]

    cmd = [tool("fairseq-generate"), tiny_bin, "--user-dir", TOY_DIR, "--path", os.path.join(save, "checkpoint_last.pt"),
           "--beam", "2", "--max-tokens", "2000", "--num-workers", "0"] + device_args()
    gen = run(cmd, env=ENV)
    hyps = parse_hypotheses(gen.stdout)
    assert len(hyps) == 24  # every test sentence of the tiny corpus translated


@pytest.mark.parametrize("arch", [TINY_TRANSFORMER, TINY_LSTM], ids=["transformer", "lstm"])
def test_toy_logits_are_scaled_cosines(toy, tiny_bin, arch):
    task, model = build(tiny_bin, arch, ["--output-layer", "toy-cosine", "--toy-cosine-scale", "2.5"])
    layer = model.decoder.output_projection
    assert isinstance(layer, toy.ScaledCosineOutput) and layer.scale.item() == 2.5
    model.double().eval()
    torch.manual_seed(0)
    src = torch.randint(task.source_dictionary.nspecial, len(task.source_dictionary), (2, 5))
    prev = torch.randint(task.target_dictionary.nspecial, len(task.target_dictionary), (2, 4))
    prev[:, 0] = task.target_dictionary.eos()
    encoder_out = model.encoder(src, src_lengths=torch.full((2,), 5))
    h = model.decoder(prev, encoder_out=encoder_out, features_only=True)[0]
    net_output = model.decoder(prev, encoder_out=encoder_out)
    # by hand, in float64: s * <h, w_v> / (|h| |w_v|)
    hn, w = h.detach().numpy(), layer.weight.detach().numpy()
    expected = 2.5 * (hn @ w.T) / (np.linalg.norm(hn, axis=-1, keepdims=True) * np.linalg.norm(w, axis=-1))
    np.testing.assert_allclose(net_output[0].detach().numpy(), expected, rtol=0, atol=1e-13)
    assert np.abs(expected).max() <= 2.5 + 1e-12
    lprobs = model.get_normalized_probs(net_output, log_probs=True).detach().numpy()
    shifted = expected - expected.max(-1, keepdims=True)
    np.testing.assert_allclose(lprobs, shifted - np.log(np.exp(shifted).sum(-1, keepdims=True)), rtol=0, atol=1e-6)
    ids = torch.tensor([4, 1, 7])  # negative sampling (--criterion sampled_softmax) gets the same columns
    np.testing.assert_allclose(layer.sampled_logits(h, ids).detach().numpy(), expected[..., [4, 1, 7]], rtol=0,
                               atol=1e-13)


def test_toy_option_is_checked_by_the_package(toy, tiny_bin):
    with pytest.raises(OutlayersConfigError, match="--toy-cosine-scale needs --output-layer toy-cosine"):
        build(tiny_bin, TINY_TRANSFORMER, ["--output-layer", "softmax", "--toy-cosine-scale", "3"])
    with pytest.raises(OutlayersConfigError, match="--toy-cosine-scale must be a finite number > 0, got -1"):
        build(tiny_bin, TINY_TRANSFORMER, ["--output-layer", "toy-cosine", "--toy-cosine-scale", "-1"])


def test_toy_needed_at_most_four_files_and_none_in_the_package():
    toy_files = [os.path.join(root, name) for root, dirs, names in os.walk(TOY_DIR) for name in names
                 if "__pycache__" not in root]
    method_files = toy_files + [os.path.abspath(__file__)]
    assert len(method_files) <= 4, method_files
    package = os.path.join(REPO, "fairseq_outlayers")
    for root, _dirs, names in os.walk(package):
        for name in names:
            if name.endswith(".py"):
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    text = f.read()
                assert "toy-cosine" not in text and "toy_output_layer" not in text, os.path.join(root, name)


def test_the_toy_is_gone_after_its_tests():
    """The fixture's teardown: the tests above leave neither the layer nor its module behind."""
    from fairseq import options

    assert "toy-cosine" not in OUTPUT_LAYER_REGISTRY and "toy_output_layer" not in sys.modules
    parser = options.get_training_parser()
    with pytest.raises(SystemExit):
        options.parse_args_and_arch(parser, ["/nonexistent-data", "--arch", "outlayers_transformer", "--output-layer",
                                             "toy-cosine"])
