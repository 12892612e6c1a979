"""Fixed random target embeddings (Shalev et al. 2021): the draw, the layer, its options, and fairseq end to end."""
import argparse
import math
import os
import shutil
import sys

import pytest
import torch
import torch.nn.functional as F

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.methods.fixed.fixed_random import (FixedRandomOutput, draw_fixed_targets, fingerprint,
                                                    hadamard_rows, normalise_rows)
from fairseq_outlayers.methods.baselines.softmax import LearnedSoftmaxOutput
from fairseq_outlayers.parameter_counts import parameter_report
from harness import (REPO, TINY_LSTM, TINY_TRANSFORMER, USER_DIR, generate, logged_losses, train,
                     train_distributed, load_script)

D = 32  # decoder output size of the harness's tiny models


# ---------------------------------------------------------------------------------------------- the draw
def test_uniform_draw_is_the_seeded_generator_stream_scaled_to_the_range():
    g = torch.Generator().manual_seed(5)
    expected = torch.rand(7, 9, generator=g) * 6.0 - 3.0
    got = draw_fixed_targets(7, 9, "uniform", value_range=3.0, normalize=False, seed=5)
    assert torch.equal(got, expected)
    assert got.min() >= -3.0 and got.max() <= 3.0 and got.dtype == torch.float32


def test_normalised_rows_have_unit_norm_and_keep_their_direction():
    raw = draw_fixed_targets(50, 24, "uniform", normalize=False, seed=3)
    unit = draw_fixed_targets(50, 24, "uniform", normalize=True, seed=3)
    ref = raw.double() / raw.double().norm(dim=1, keepdim=True)  # float64 reference
    assert torch.allclose(unit.double(), ref, rtol=0, atol=1e-7)
    assert torch.allclose(unit.double().norm(dim=1), torch.ones(50, dtype=torch.float64), rtol=0, atol=1e-6)
    # normalised rows do not depend on the range
    assert torch.allclose(unit, draw_fixed_targets(50, 24, "uniform", value_range=0.5, seed=3), atol=1e-7)


def test_draw_depends_on_its_seed_only():
    torch.manual_seed(0)
    a = draw_fixed_targets(20, 8, seed=11)
    torch.manual_seed(123)
    torch.rand(1000)  # consume the global generator
    b = draw_fixed_targets(20, 8, seed=11)
    assert torch.equal(a, b)
    assert not torch.equal(a, draw_fixed_targets(20, 8, seed=12))


def test_gaussian_draw_has_the_variance_of_the_uniform():
    g = torch.Generator().manual_seed(2)
    expected = torch.randn(400, 50, generator=g) * (10.0 / math.sqrt(3.0))
    got = draw_fixed_targets(400, 50, "gaussian", normalize=False, seed=2)
    assert torch.equal(got, expected)
    assert abs(got.double().std().item() - 10.0 / math.sqrt(3.0)) < 0.1  # 20k draws: std error ~0.03


def test_hadamard_rows_are_the_sylvester_matrix():
    h = torch.ones(1, 1)
    for _ in range(4):
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)  # Sylvester's recursion, order 16
    assert torch.equal(hadamard_rows(16, 16), h)
    assert torch.equal(hadamard_rows(5, 16), h[:5])
    assert torch.equal(h @ h.T, 16 * torch.eye(16))
    unit = draw_fixed_targets(10, 16, "hadamard", seed=99)
    assert torch.equal(unit, h[:10] / 4.0)  # +-1/sqrt(16), exact in float32; the seed plays no part
    raw = draw_fixed_targets(10, 16, "hadamard", value_range=math.sqrt(3.0), normalize=False)
    assert torch.allclose(raw, h[:10], atol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_words=20, dim=16, init="hadamard"), "has 16 rows; 20 were asked"),
    (dict(num_words=4, dim=12, init="hadamard"), "power-of-two order"),
    (dict(num_words=4, dim=8, init="orthogonal"), "--fixed-targets-init 'orthogonal' is unknown"),
    (dict(num_words=4, dim=8, value_range=0.0), "positive number"),
    (dict(num_words=4, dim=8, value_range=-1.0), "positive number"),
    (dict(num_words=4, dim=8, value_range=float("nan")), "positive number"),
])
def test_draw_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        draw_fixed_targets(**kwargs)


def test_normalise_rows_rejects_a_zero_row():
    with pytest.raises(ValueError, match="all zeros"):
        normalise_rows(torch.zeros(2, 3))


# ---------------------------------------------------------------------------------------------- the layer
def test_layer_logits_match_a_float64_reference_and_the_sampled_rows():
    layer = FixedRandomOutput(30, 12, target_dim=8, bias_value=0.25, seed=4)
    h = torch.randn(3, 5, 12)
    ref = (layer.proj.weight.double() @ h.double().unsqueeze(-1)).squeeze(-1) @ layer.weight.double().T + 0.25
    assert torch.allclose(layer(h).double(), ref, atol=1e-5)
    ids = torch.tensor([3, 0, 29, 7])
    assert torch.allclose(layer.sampled_logits(h, ids), layer(h)[..., ids], atol=1e-6)
    logp = layer.get_normalized_probs((layer(h),), log_probs=True)
    assert torch.allclose(logp.double(), torch.log_softmax(ref, -1), atol=1e-5)


def test_layer_trains_nothing_but_the_projection():
    torch.manual_seed(0)
    same = FixedRandomOutput(40, 16, seed=3)
    assert list(same.parameters()) == [] and same.proj is None
    assert same.parameter_counts() == {"owned": 0, "trained": 0, "frozen": 40 * 16 + 40}
    assert set(same.state_dict()) == {"weight", "bias"}  # persistent buffers, saved with the model
    proj = FixedRandomOutput(40, 16, target_dim=8, bias_value=-1.5, seed=3)
    assert proj.parameter_counts() == {"owned": 16 * 8, "trained": 16 * 8, "frozen": 40 * 8 + 40}
    assert torch.equal(proj.bias, torch.full((40,), -1.5))
    w0, b0, p0 = proj.weight.clone(), proj.bias.clone(), proj.proj.weight.detach().clone()
    opt = torch.optim.Adam(proj.parameters(), lr=0.1)
    for _ in range(3):
        h = torch.randn(6, 16)
        loss = F.cross_entropy(proj(h), torch.randint(0, 40, (6,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.equal(proj.weight, w0) and torch.equal(proj.bias, b0)  # bit-identical
    assert proj.weight.grad is None and not proj.weight.requires_grad
    assert not torch.equal(proj.proj.weight, p0)  # the projection did learn
    assert sum(s["exp_avg"].numel() for s in opt.state.values()) == 16 * 8  # no optimiser state for W, b


def test_a_checkpoint_classifier_wins_over_the_options_and_says_so(caplog):
    a, b = FixedRandomOutput(10, 4, seed=1), FixedRandomOutput(10, 4, seed=2)
    with caplog.at_level("WARNING"):
        b.load_state_dict(a.state_dict())
    assert torch.equal(a.weight, b.weight)
    assert f"sha256 {fingerprint(a.weight)}" in caplog.text


def average_like_fairseq(state_dicts):
    """What fairseq's scripts/average_checkpoints.py does to each tensor: clone, add the others, divide."""
    averaged = {}
    for key in state_dicts[0]:
        total = state_dicts[0][key].clone()
        for sd in state_dicts[1:]:
            total += sd[key]
        averaged[key] = total.div_(len(state_dicts))
    return averaged


def test_averaged_and_half_precision_checkpoints_restore_the_exact_classifier(caplog):
    layer = FixedRandomOutput(300, 64, bias_value=0.3, seed=5)
    exact = layer.state_dict()
    averaged = average_like_fairseq([exact] * 3)
    assert not torch.equal(averaged["weight"], exact["weight"])  # the average is off by rounding errors ...
    fresh = FixedRandomOutput(300, 64, bias_value=0.3, seed=5)
    with caplog.at_level("WARNING"):
        fresh.load_state_dict(averaged)
        fresh.load_state_dict({k: v.half() for k, v in exact.items()})
    assert torch.equal(fresh.weight, exact["weight"]) and torch.equal(fresh.bias, exact["bias"])  # ... undone
    assert "differs" not in caplog.text


def test_a_zero_bias_is_skipped_and_a_loaded_bias_is_applied():
    layer, h = FixedRandomOutput(10, 4, seed=1), torch.randn(3, 4)
    assert torch.equal(layer(h), F.linear(h, layer.weight))
    layer.load_state_dict(FixedRandomOutput(10, 4, seed=1, bias_value=2.0).state_dict())
    assert torch.allclose(layer(h), F.linear(h, layer.weight) + 2.0, atol=1e-6)
    assert torch.allclose(layer.sampled_logits(h, torch.tensor([1, 2])), layer(h)[:, 1:3], atol=1e-6)


# ------------------------------------------------------------------------------- models built in-process
def build_model(bin_dir, argv):
    """fairseq's own option parsing and model building, without a subprocess."""
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [bin_dir, "--user-dir", USER_DIR, "--cpu"] + list(argv))
    task = tasks.setup_task(args)
    return task.build_model(args), task


@pytest.mark.parametrize("arch_args", [TINY_TRANSFORMER, TINY_LSTM], ids=["transformer", "lstm"])
def test_trained_parameters_drop_by_exactly_v_times_d(tiny_bin, arch_args):
    softmax, task = build_model(tiny_bin, arch_args + ["--output-layer", "softmax"])
    softmax_b, _ = build_model(tiny_bin, arch_args + ["--output-layer", "softmax", "--output-bias"])
    fixed, _ = build_model(tiny_bin, arch_args + ["--output-layer", "fixed"])
    fixed16, _ = build_model(tiny_bin, arch_args + ["--output-layer", "fixed", "--fixed-targets-dim", "16"])
    V = len(task.target_dictionary)
    s, sb, f, f16 = (parameter_report(m) for m in (softmax, softmax_b, fixed, fixed16))
    assert s["trained"] - f["trained"] == V * D
    assert sb["trained"] - f["trained"] == V * D + V
    assert f["frozen"] == V * D + V and f["output"] == V * D + V and f["output_trained"] == 0
    assert f["total"] == sb["total"]  # same weights, only which of them are trained differs
    assert f16["trained"] == s["trained"] - V * D + D * 16  # the learned projection 32 -> 16
    assert f16["frozen"] == V * 16 + V
    assert sum(p.numel() for p in fixed.parameters()) == f["trained"]  # nothing fixed is an nn.Parameter


def test_table3_arithmetic_multi30k_de_en(tmp_path):
    """Paper Table 3, Multi30K DE-EN: 13,893,381 learnable parameters non-fixed, 10,870,272 fixed; the difference
    is |V| (d + 1) with |V| = 5893 target words and d = 512 (the classifier's weights and bias)."""
    assert 13_893_381 - 10_870_272 == 5893 * (512 + 1)
    for lang, n in (("de", 100), ("en", 5893 - 4)):  # fairseq adds 4 special symbols
        (tmp_path / f"dict.{lang}.txt").write_text("".join(f"w{i} {n - i}\n" for i in range(n)))
    lstm = ["--arch", "outlayers_lstm", "--source-lang", "de", "--target-lang", "en", "--encoder-embed-dim", "8",
            "--encoder-hidden-size", "8", "--decoder-embed-dim", "8", "--decoder-hidden-size", "8",
            "--decoder-out-embed-dim", "512"]
    learned, task = build_model(str(tmp_path), lstm + ["--output-layer", "softmax", "--output-bias"])
    fixed, _ = build_model(str(tmp_path), lstm + ["--output-layer", "fixed"])
    assert len(task.target_dictionary) == 5893
    assert parameter_report(learned)["trained"] - parameter_report(fixed)["trained"] == 3_023_109


@pytest.mark.parametrize("argv, message", [
    (["--output-layer", "fixed", "--fixed-targets-range", "0"], "--fixed-targets-range must be in (0, 1000], got 0"),
    (["--output-layer", "fixed", "--fixed-targets-range", "-2"], "--fixed-targets-range must be in (0, 1000]"),
    (["--output-layer", "fixed", "--fixed-targets-init", "orthogonal"],
     "--fixed-targets-init 'orthogonal' is unknown; choose one of: uniform, gaussian, hadamard"),
    (["--output-layer", "fixed", "--fixed-targets-dim", "0"], "--fixed-targets-dim must be a positive"),
    (["--output-layer", "fixed", "--share-decoder-input-output-embed"], "contradicts --share-decoder-input-output"),
    (["--output-layer", "fixed", "--share-all-embeddings"], "contradicts --share-all-embeddings"),
    (["--output-layer", "fixed", "--output-bias"], "--output-layer fixed would ignore it: drop it"),
    (["--output-layer", "fixed", "--fixed-targets-init", "hadamard"],
     "power-of-two classifier dimension at least the target vocabulary size (48 words), got 32; "
     "set --fixed-targets-dim 64"),
    (["--output-layer", "softmax", "--arch", "outlayers_transformer_fixed"], "drop --output-layer"),
])
def test_bad_options_fail_with_one_line(tiny_bin, argv, message):
    with pytest.raises(OutlayersConfigError) as err:
        build_model(tiny_bin, TINY_TRANSFORMER + argv)
    assert message in str(err.value) and "\n" not in str(err.value)  # one line from outlayers-train


@pytest.mark.parametrize("arch, extra", [
    ("outlayers_transformer_small_fixed", TINY_TRANSFORMER[2:]),
    ("outlayers_transformer_fixed", TINY_TRANSFORMER[2:]),
    ("outlayers_lstm_fixed", TINY_LSTM[2:]),
    ("outlayers_lstm_luong_2x2_fixed", ["--decoder-out-embed-dim", "32", "--encoder-layers", "1",
                                        "--decoder-layers", "1", "--encoder-embed-dim", "8",
                                        "--decoder-embed-dim", "8"]),
])
def test_presets_select_the_fixed_layer(tiny_bin, arch, extra):
    model, task = build_model(tiny_bin, ["--arch", arch] + extra)
    layer = model.decoder.output_projection
    assert isinstance(layer, FixedRandomOutput) and layer.proj is None
    assert torch.equal(layer.weight, draw_fixed_targets(len(task.target_dictionary), 32, seed=1))


# ------------------------------------------------------------------------------------- through fairseq
def fixed_buffers(checkpoint):
    model = torch.load(checkpoint, map_location="cpu")["model"]
    return model["decoder.output_projection.weight"], model["decoder.output_projection.bias"]


@pytest.fixture(scope="module")
def transformer_run(tiny_bin, tmp_path_factory):
    save = str(tmp_path_factory.mktemp("fixed_transformer"))
    proc = train(tiny_bin, save, TINY_TRANSFORMER, ["--output-layer", "fixed", "--fixed-targets-seed", "7",
                                                    "--fixed-targets-bias", "0.5"], max_update=4)
    return save, proc.stdout + proc.stderr


def test_transformer_trains_with_the_classifier_untouched_and_generates(tiny_bin, transformer_run):
    save, log = transformer_run
    losses = logged_losses(log)
    assert len(losses) == 4 and losses[-1] < losses[0], losses
    ckpt = os.path.join(save, "checkpoint_last.pt")
    state = torch.load(ckpt, map_location="cpu")
    weight, bias = fixed_buffers(ckpt)
    expected = draw_fixed_targets(weight.shape[0], D, seed=7)
    assert torch.equal(weight, expected) and torch.equal(bias, torch.full((weight.shape[0],), 0.5))
    assert not torch.equal(weight, draw_fixed_targets(weight.shape[0], D, seed=1))
    assert f"seed 7, sha256 {fingerprint(expected)}" in log
    # the optimiser holds state for the trained parameters only: nothing of size |V| x d
    opt_state = state["last_optimizer_state"]["state"]
    trained = sum(v.numel() for k, v in state["model"].items() if not k.startswith("decoder.output_projection")
                  and not k.endswith(".version"))  # fairseq's 1-element format-version buffers
    assert sum(s["exp_avg"].numel() for s in opt_state.values()) == trained
    assert f"num. trained: {trained:,}" in log
    assert state["optimizer_history"][-1]["num_updates"] == 4
    _, hyps = generate(tiny_bin, ckpt)
    assert len(hyps) == 24


def test_resume_keeps_the_checkpoint_classifier(tiny_bin, transformer_run, tmp_path):
    save = str(tmp_path / "resume")
    shutil.copytree(transformer_run[0], save)
    before = fixed_buffers(os.path.join(save, "checkpoint_last.pt"))
    args = ["--output-layer", "fixed", "--fixed-targets-seed", "7", "--fixed-targets-bias", "0.5"]
    proc = train(tiny_bin, save, TINY_TRANSFORMER, args, max_update=6)
    assert "Loaded checkpoint" in proc.stdout + proc.stderr and "@ 4 updates" in proc.stdout + proc.stderr
    state = torch.load(os.path.join(save, "checkpoint_last.pt"), map_location="cpu")
    assert state["optimizer_history"][-1]["num_updates"] == 6
    after = fixed_buffers(os.path.join(save, "checkpoint_last.pt"))
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])
    assert "differs from the one these --fixed-targets-* options draw" not in proc.stdout + proc.stderr


def test_lstm_with_projection_to_hadamard_targets(tiny_bin, tmp_path):
    save = str(tmp_path / "lstm")
    proc = train(tiny_bin, save, TINY_LSTM, ["--output-layer", "fixed", "--fixed-targets-init", "hadamard",
                                             "--fixed-targets-dim", "64"], max_update=4)
    losses = logged_losses(proc.stdout + proc.stderr)
    assert len(losses) == 4 and losses[-1] < losses[0], losses
    ckpt = os.path.join(save, "checkpoint_last.pt")
    state = torch.load(ckpt, map_location="cpu")["model"]
    weight = state["decoder.output_projection.weight"]
    assert torch.equal(weight, hadamard_rows(weight.shape[0], 64) / 8.0)
    assert state["decoder.output_projection.proj.weight"].shape == (64, D)
    _, hyps = generate(tiny_bin, ckpt)
    assert len(hyps) == 24


def test_two_workers_see_the_same_classifier(tiny_bin, tmp_path):
    """Rank 1 draws its own copy; if it differed from rank 0's, its gradients -- and so the averaged update --
    would differ from one process taking the whole batch (--update-freq 2)."""
    extra = ["--output-layer", "fixed", "--fixed-targets-seed", "3", "--required-batch-size-multiple", "1"]
    train(tiny_bin, str(tmp_path / "one"), TINY_TRANSFORMER, extra + ["--update-freq", "2"], max_update=3)
    train_distributed(tiny_bin, str(tmp_path / "two"), TINY_TRANSFORMER, extra, max_update=3)
    a = torch.load(os.path.join(tmp_path / "one", "checkpoint_last.pt"), map_location="cpu")["model"]
    b = torch.load(os.path.join(tmp_path / "two", "checkpoint_last.pt"), map_location="cpu")["model"]
    assert a.keys() == b.keys()
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-5, rtol=1e-4), (key, (a[key] - b[key]).abs().max())
    weight = b["decoder.output_projection.weight"]
    assert torch.equal(weight, draw_fixed_targets(weight.shape[0], D, seed=3))


# ------------------------------------------------------------------------------------- analysis script
def _analysis_module():
    return load_script("analyse_norm_frequency.py")


def test_norm_frequency_analysis(tiny_bin, tmp_path, transformer_run, capsys, monkeypatch):
    import json

    import numpy as np
    from fairseq.data import Dictionary
    from scipy.stats import spearmanr

    analysis = _analysis_module()
    save = str(tmp_path / "softmax")
    train(tiny_bin, save, TINY_TRANSFORMER, ["--output-layer", "softmax"], max_update=4)
    ckpt, dict_path = os.path.join(save, "checkpoint_last.pt"), os.path.join(tiny_bin, "dict.en.txt")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # behave as if matplotlib were not installed
    assert analysis.main([ckpt, dict_path, "--json"]) == 0
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert "matplotlib is not installed" in out.err and result["plot"] is None
    # independent computation: rows 4.. of the learned matrix against the dictionary's counts (count >= 1)
    weight = torch.load(ckpt, map_location="cpu")["model"]["decoder.output_projection.weight"].double()
    d = Dictionary.load(dict_path)
    rows = [i for i in range(4, len(d)) if d.count[i] >= 1]
    assert result["words"] == len(rows) == 40  # 40 target words; the madeupword padding entries are left out
    rho = spearmanr(weight[rows].norm(dim=1).numpy(), np.array([d.count[i] for i in rows])).statistic
    assert result["spearman_rho"] == pytest.approx(rho, abs=1e-12)
    assert result["tensor"] == "decoder.output_projection.weight"
    # a fixed normalised classifier has no learned norms: the correlation is undefined, and said so
    assert analysis.main([os.path.join(transformer_run[0], "checkpoint_last.pt"), dict_path,
                          "--plot", str(tmp_path / "f.png")]) == 0
    assert "Spearman rho undefined" in capsys.readouterr().out
    # a dictionary of another size is refused in one line
    (tmp_path / "dict.small.txt").write_text("a 3\nb 2\n")
    with pytest.raises(SystemExit):
        analysis.main([ckpt, str(tmp_path / "dict.small.txt")])
    assert "has 6 entries; pass the target dictionary" in capsys.readouterr().err


def test_norm_frequency_plot_is_saved_with_matplotlib(tiny_bin, transformer_run, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    analysis = _analysis_module()
    plot = tmp_path / "scatter.png"
    ckpt = os.path.join(transformer_run[0], "checkpoint_last.pt")
    assert analysis.main([ckpt, os.path.join(tiny_bin, "dict.en.txt"), "--plot", str(plot)]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit):  # an existing file is not overwritten without --overwrite
        analysis.main([ckpt, os.path.join(tiny_bin, "dict.en.txt"), "--plot", str(plot)])
    assert "pass --overwrite" in capsys.readouterr().err


# ------------------------------------------------------------------------------------- frequency-prior probe
@pytest.mark.parametrize("layer", ["fixed", "joint", "tied"])
def test_output_bias_probe(tiny_bin, tmp_path, layer):
    """scripts/probe_output_bias.py: its no-bias NLL is the model's own over every validation sentence, the fitted
    bias does not raise the training NLL, and the checkpoint it writes carries that bias into fairseq's model (the
    fixed layer's frozen bias, the joint layer's learned one, a new one for a tied layer trained without a bias);
    the fitted logit scale's NLL is fairseq's own with the logits multiplied by it."""
    import json

    from fairseq import checkpoint_utils

    probe = load_script("probe_output_bias.py")
    save = str(tmp_path / layer)
    options = {"fixed": ["--output-layer", "fixed"], "joint": ["--output-layer", "joint", "--joint-dim", "16"],
               "tied": ["--output-layer", "tied"]}
    train(tiny_bin, save, TINY_TRANSFORMER, options[layer], max_update=6)
    ckpt, out_json, out_ckpt = os.path.join(save, "checkpoint_last.pt"), tmp_path / "p.json", tmp_path / "b.pt"
    assert probe.main([ckpt, "--data", tiny_bin, "--epochs", "20", "--lr", "0.1", "--json", str(out_json),
                       "--out-checkpoint", str(out_ckpt)]) == 0
    result = json.loads(out_json.read_text())

    def valid_nll(path, scale=1.0):  # independent: fairseq's own forward and normalisation, every sentence, base 2
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": tiny_bin})
        model = models[0].eval()
        task.load_dataset("valid")
        itr = task.get_batch_iterator(task.dataset("valid"), max_tokens=2000,
                                      required_batch_size_multiple=1).next_epoch_itr(shuffle=False)
        total = count = 0
        with torch.no_grad():
            for batch in itr:
                logits, extra = model(**batch["net_input"])
                lprobs = model.get_normalized_probs((logits * scale, extra), log_probs=True)
                mask = batch["target"].ne(task.target_dictionary.pad())
                total += F.nll_loss(lprobs[mask], batch["target"][mask], reduction="sum").item()
                count += int(mask.sum())
        return total / count / math.log(2), model

    plain, _ = valid_nll(ckpt)
    with_bias, model = valid_nll(str(out_ckpt))
    assert result["valid_nll_bits"]["no bias"] == pytest.approx(plain, abs=1e-4)
    assert result["valid_nll_bits"]["fitted bias"] == pytest.approx(with_bias, abs=1e-4)
    assert result["train_nll_bits"]["fitted bias"] <= result["train_nll_bits"]["no bias"]
    assert result["fitted_scale"] > 0 and result["fitted_scale"] != 1.0
    assert result["valid_nll_bits"]["fitted scale"] == pytest.approx(valid_nll(ckpt, result["fitted_scale"])[0],
                                                                      abs=2e-4)
    assert bool(model.decoder.output_projection.bias.any())  # the fitted bias is in the model generate loads
    with pytest.raises(SystemExit):  # nothing is overwritten
        probe.main([ckpt, "--data", tiny_bin, "--json", str(out_json)])


def test_output_bias_probe_puts_the_bias_where_the_model_reads_it():
    """put_bias: added to an existing bias; created with output_bias switched on in the saved configuration
    (argparse Namespace or omegaconf DictConfig) for a layer that takes --output-bias; refused otherwise."""
    from argparse import Namespace

    from omegaconf import OmegaConf

    probe = load_script("probe_output_bias.py")
    fitted = torch.tensor([0.5, -1.0, 2.0])
    state = {"model": {probe.BIAS_KEY: torch.ones(3, dtype=torch.float16)}, "cfg": {"model": Namespace()}}
    probe.put_bias(state, fitted, accepts_bias=False)
    assert state["model"][probe.BIAS_KEY].dtype == torch.float16
    assert state["model"][probe.BIAS_KEY].tolist() == [1.5, 0.0, 3.0]
    assert not hasattr(state["cfg"]["model"], "output_bias")  # nothing else changes

    hydra = OmegaConf.create({"output_layer": "tied"})
    OmegaConf.set_struct(hydra, True)  # as fairseq saves it: a new key needs open_dict
    for config in (Namespace(output_layer="tied", output_bias=False), hydra):
        state = {"model": {"decoder.embed_tokens.weight": torch.zeros(3, 2)}, "cfg": {"model": config}}
        probe.put_bias(state, fitted, accepts_bias=True)
        assert torch.equal(state["model"][probe.BIAS_KEY], fitted) and config.output_bias is True

    state = {"model": {"decoder.embed_tokens.weight": torch.zeros(3, 2)}, "cfg": {"model": Namespace()}}
    with pytest.raises(ValueError, match="needs an output layer with a per-word bias"):
        probe.put_bias(state, fitted, accepts_bias=False)
    assert probe.BIAS_KEY not in state["model"]


# ------------------------------------------------------------------------------------- learned logit scale
@pytest.mark.parametrize("arch_args", [TINY_TRANSFORMER, TINY_LSTM], ids=["transformer", "lstm"])
def test_learned_scale_is_one_trained_scalar_that_multiplies_every_logit(tiny_bin, arch_args):
    """--fixed-targets-learned-scale adds exactly one trained parameter, starts as the paper's layer (s = 1) and
    multiplies every logit by s (the frozen rows unchanged); the gradient reaches s."""
    plain, task = build_model(tiny_bin, arch_args + ["--output-layer", "fixed"])
    scaled, _ = build_model(tiny_bin, arch_args + ["--output-layer", "fixed", "--fixed-targets-learned-scale"])
    assert parameter_report(scaled)["trained"] == parameter_report(plain)["trained"] + 1
    assert parameter_report(scaled)["output_trained"] == 1
    p_layer, s_layer = plain.decoder.output_projection, scaled.decoder.output_projection
    assert p_layer.scale is None and s_layer.scale.item() == 1.0
    assert torch.equal(p_layer.weight, s_layer.weight)
    h = torch.randn(3, 4, D, dtype=torch.float64)
    p_layer.double(), s_layer.double()
    assert torch.equal(s_layer(h), p_layer(h))  # s = 1: the paper's layer
    with torch.no_grad():
        s_layer.scale.fill_(2.5)
    torch.testing.assert_close(s_layer(h), 2.5 * p_layer(h), rtol=1e-12, atol=1e-13)  # float64 rounding
    s_layer(h).logsumexp(-1).sum().backward()
    assert s_layer.scale.grad is not None and s_layer.scale.grad.item() != 0.0
    assert "learned logit scale" in s_layer.describe()


def test_learned_scale_trains_saves_and_decodes_through_fairseq(tiny_bin, tmp_path):
    save = str(tmp_path / "ckpt")
    train(tiny_bin, save, TINY_LSTM, ["--output-layer", "fixed", "--fixed-targets-learned-scale", "--lr", "0.05"],
          max_update=4)
    state = torch.load(os.path.join(save, "checkpoint_last.pt"), map_location="cpu")["model"]
    scale = state["decoder.output_projection.scale"]
    assert scale.shape == () and scale.item() != 1.0  # trained
    proc, hyps = generate(tiny_bin, os.path.join(save, "checkpoint_last.pt"))
    assert proc.returncode == 0 and len(hyps) > 0


class _Watched(argparse.Namespace):
    """A model's arguments that note the file of every read of ``fixed_targets_seed`` (the reader's own frame)."""

    def __getattribute__(self, name):
        if name == "fixed_targets_seed":
            object.__getattribute__(self, "__dict__").setdefault("_readers", set()).add(
                sys._getframe(1).f_code.co_filename)
        return object.__getattribute__(self, name)


def test_the_seed_option_goes_through_its_method_folder_and_three_core_files(tiny_bin):
    """docs/architecture.md's "one option" table: from the parsed arguments to the layer, ``--fixed-targets-seed``
    is read in ``methods/fixed/`` and in three core files at most (the registry, the build and its checks, the
    fingerprints), whatever else the build does with the other options."""
    from fairseq import options, tasks

    parser = options.get_training_parser()
    parsed = options.parse_args_and_arch(parser, [tiny_bin, "--user-dir", USER_DIR, "--cpu", *TINY_TRANSFORMER,
                                                  "--output-layer", "fixed", "--fixed-targets-seed", "7"])
    args = _Watched(**vars(parsed))
    model = tasks.setup_task(args).build_model(args)
    assert model.decoder.output_projection.seed == 7
    package = os.path.join(REPO, "fairseq_outlayers") + os.sep
    readers = {os.path.relpath(f, package) for f in vars(args)["_readers"] if f.startswith(package)}
    core = {f for f in readers if not f.startswith(os.path.join("methods", "fixed") + os.sep)}
    assert any(f.startswith(os.path.join("methods", "fixed")) for f in readers), readers
    assert core <= {os.path.join("core", f) for f in ("registry.py", "build.py", "fingerprints.py")}, readers
