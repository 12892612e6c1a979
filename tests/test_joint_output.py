"""The joint input-output output layer (Pappas et al. 2018): maths, parameter counts, special cases, the g_out(E)
cache, and train + generate through fairseq's CLIs."""
import os
import re

import pytest
import torch
import torch.nn as nn
from torch.func import functional_call

from fairseq_outlayers.methods.joint.joint_output import STRUCTURES, JointOutputLayer, joint_logits
from fairseq_outlayers.methods.baselines.softmax import TiedSoftmaxOutput
from harness import TINY_TRANSFORMER, USER_DIR, generate, logged_losses, train

V, D, DH, DJ = 13, 6, 5, 7  # d != d_h != d_j so that a transposed shape cannot pass


def _layer(structure="full", activation="tanh", d=D, dh=DH, dj=DJ, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    emb = nn.Embedding(V, d, padding_idx=1).to(dtype)
    layer = JointOutputLayer(emb, dh, joint_dim=dj, activation=activation, structure=structure).to(dtype)
    with torch.no_grad():  # non-zero biases so that a dropped bias term is caught
        for p in layer.parameters():
            if p.dim() == 1:
                p.normal_()
    return emb, layer


# -- parameter counts (eq. 16) ------------------------------------------------------------------------------------
@pytest.mark.parametrize("structure", STRUCTURES)
def test_parameter_count_matches_closed_form(structure):
    emb, layer = _layer(structure)
    closed = {  # written out by hand: projection weights + projection biases + per-word bias
        "full": D * DJ + DJ * DH + V + 2 * DJ,
        "output": D * DH + V,    # sigma(E W) h: W is d x d_h, no bias (paper eq. 7a)
        "context": D * DH + V,   # E sigma(W h): W is d x d_h, no bias (eq. 7b)
        "bilinear": D * DH + V,  # E W h (eq. 6)
    }[structure]
    counts = layer.parameter_counts()
    assert counts["owned"] == counts["trained"] == closed
    assert layer.closed_form_parameter_count()["total"] == closed
    # the embedding is referenced, not owned: no parameter of the layer has |V| rows and d columns
    assert all(p.shape != emb.weight.shape for p in layer.parameters())
    assert "weight" not in dict(layer.named_parameters()) and not any("embed" in n for n, _ in layer.named_parameters())


def test_paper_scale_parameter_count():
    """eq. 16 at the paper's De-En setting: d = d_h = 512, d_j = 512, |V| = 32,000."""
    emb = nn.Embedding(32000, 512)
    layer = JointOutputLayer(emb, 512, joint_dim=512)
    assert layer.parameter_counts()["owned"] == 512 * 512 + 512 * 512 + 32000 + 2 * 512 == 557_312


# -- forward: shapes and values ------------------------------------------------------------------------------------
@pytest.mark.parametrize("structure", STRUCTURES)
def test_shapes_and_value_against_float64_formula(structure):
    emb, layer = _layer(structure, dtype=torch.float64)
    layer.eval()
    h = torch.randn(2, 3, DH, dtype=torch.float64)
    logits = layer(h)
    assert logits.shape == (2, 3, V)
    E = emb.weight
    if structure == "full":
        U, bu, W, bv = layer.out_proj.weight, layer.out_proj.bias, layer.ctx_proj.weight, layer.ctx_proj.bias
        expected = torch.tanh(E @ U.T + bu) @ torch.tanh(h @ W.T + bv).unsqueeze(-1)
    elif structure == "output":
        U = layer.out_proj.weight
        assert U.shape == (DH, D) and layer.out_proj.bias is None
        expected = torch.tanh(E @ U.T) @ h.unsqueeze(-1)
    elif structure == "context":
        W = layer.ctx_proj.weight
        assert W.shape == (D, DH) and layer.ctx_proj.bias is None
        expected = E @ torch.tanh(h @ W.T).unsqueeze(-1)
    else:
        W = layer.ctx_proj.weight
        assert W.shape == (D, DH) and layer.ctx_proj.bias is None
        expected = E @ (h @ W.T).unsqueeze(-1)
    expected = expected.squeeze(-1) + layer.bias
    torch.testing.assert_close(logits, expected, rtol=1e-12, atol=1e-12)
    # the sampled rows are the same numbers as the full matrix's columns
    ids = torch.tensor([0, 4, 12])
    torch.testing.assert_close(layer.sampled_logits(h, ids), logits[..., ids], rtol=1e-12, atol=1e-12)
    # and the module agrees with the plain reference function
    ref = joint_logits(E, h, layer.out_proj, layer.ctx_proj, layer.bias,
                       "identity" if structure == "bilinear" else "tanh")
    torch.testing.assert_close(logits, ref, rtol=1e-12, atol=1e-12)


class _Holder(nn.Module):
    """Owns the embedding and the layer so that functional_call can swap E (which the layer reads by reference)."""

    def __init__(self, emb, layer):
        super().__init__()
        self.emb, self.layer = emb, layer

    def forward(self, h):
        return self.layer(h)


@pytest.mark.parametrize("structure,activation", [("full", "tanh"), ("full", "sigmoid"), ("output", "tanh"),
                                                  ("context", "relu"), ("bilinear", "identity")])
def test_gradcheck_float64(structure, activation):
    """Analytic gradients w.r.t. h, E and every parameter of the layer against finite differences."""
    emb, layer = _layer(structure, activation, d=3, dh=4, dj=2, dtype=torch.float64)
    holder = _Holder(emb, layer)
    names = [n for n, _ in holder.named_parameters()]
    assert "emb.weight" in names and len(names) == len(list(layer.parameters())) + 1
    params = [p.detach().clone().requires_grad_(True) for _, p in holder.named_parameters()]
    h = torch.randn(2, 4, dtype=torch.float64)
    if activation == "relu":  # keep the pre-activations away from the kink at 0
        h = h + 0.5 * torch.sign(h)
    h.requires_grad_(True)

    def f(h, *values):
        return functional_call(holder, dict(zip(names, values)), (h,))

    assert torch.autograd.gradcheck(f, (h, *params), eps=1e-6, atol=1e-7)


# -- the degenerate form is weight tying (eq. 18) ------------------------------------------------------------------
@pytest.mark.parametrize("structure", STRUCTURES)
def test_degenerate_form_equals_tied_exactly(structure):
    """identity sigma, identity projections, zero projection biases: exactly the tied model's log-probabilities
    (with the same per-word bias b)."""
    d = 8
    torch.manual_seed(1)
    emb = nn.Embedding(V, d, padding_idx=1)
    joint = JointOutputLayer(emb, d, joint_dim=d, activation="identity", structure=structure)
    tied = TiedSoftmaxOutput(emb, d, bias=True)
    with torch.no_grad():
        for proj in (joint.out_proj, joint.ctx_proj):
            if proj is not None:
                proj.weight.copy_(torch.eye(d))
                if proj.bias is not None:
                    proj.bias.zero_()
        b = torch.randn(V)
        joint.bias.copy_(b)
        tied.bias.copy_(b)
    h = torch.randn(4, 3, d)
    for mode in ("train", "eval"):
        getattr(joint, mode)(), getattr(tied, mode)()
        a = joint.get_normalized_probs((joint(h),), log_probs=True)
        t = tied.get_normalized_probs((tied(h),), log_probs=True)
        assert torch.equal(a, t), (a - t).abs().max()


def test_output_matrix_once_per_forward_in_training():
    """g_out(E) is one |V| x d_j projection per forward pass (per batch), not one per target token."""
    emb, layer = _layer("full")
    layer.train()
    seen = []
    layer.out_proj.register_forward_hook(lambda module, inputs, output: seen.append(tuple(inputs[0].shape)))
    layer(torch.randn(4, 9, DH)).sum().backward()  # 36 target positions
    assert seen == [(V, D)]
    seen.clear()
    layer.sampled_logits(torch.randn(4, 9, DH), torch.tensor([2, 3, 7]))  # sampling projects only V' rows
    assert seen == [(3, D)]


# -- the g_out(E) cache --------------------------------------------------------------------------------------------
def test_output_matrix_cache_hit_and_invalidation():
    emb, layer = _layer("full")
    h = torch.randn(2, 1, DH)
    layer.train()
    layer(h), layer(h)
    assert layer.cache_stats == {"hits": 0, "misses": 0}  # training never caches
    layer.eval()
    out1 = layer(h)  # grad enabled in eval: not cached either (the result is part of a graph)
    assert layer.cache_stats == {"hits": 0, "misses": 0}
    with torch.no_grad():
        first = layer(h)
        second = layer(h)
        assert layer.cache_stats == {"hits": 1, "misses": 1}
        assert torch.equal(first, second) and torch.allclose(first, out1)
        emb.weight[5].add_(1.0)  # in-place change of E bumps its version: the cache must miss
        third = layer(h)
        assert layer.cache_stats == {"hits": 1, "misses": 2}
        assert not torch.equal(third[..., 5], first[..., 5])
        layer.out_proj.bias.add_(0.5)  # a change of b_u as well
        fourth = layer(h)
        assert layer.cache_stats["misses"] == 3
        emb.weight.data = emb.weight.data.clone()  # new storage, same values: g_out(E) is still valid
        layer(h)
        assert layer.cache_stats == {"hits": 2, "misses": 3}
    layer.train()  # training drops the cache
    assert layer._cache is None
    layer.eval()
    with torch.no_grad():
        fifth = layer(h)
    assert layer.cache_stats["misses"] == 4
    expected = joint_logits(emb.weight, h, layer.out_proj, layer.ctx_proj, layer.bias)
    assert not torch.equal(fourth, third) and torch.allclose(fifth, expected.detach(), atol=1e-6)


def test_output_matrix_cache_sees_writes_through_data():
    """Evaluation forward, then E, U or b_u changed in place through ``.data`` (as fairseq's optimizers write; the
    version counter does not move), forward again: the logits are those of the new weights."""
    emb, layer = _layer("full")
    h = torch.randn(2, 1, DH)
    layer.eval()
    with torch.no_grad():
        for tensor in (emb.weight, layer.out_proj.weight, layer.out_proj.bias):
            layer(h)
            tensor.data.add_(0.5)
            expected = joint_logits(emb.weight, h, layer.out_proj, layer.ctx_proj, layer.bias)
            assert torch.equal(layer(h), expected)


# -- through fairseq -----------------------------------------------------------------------------------------------
def _dict_size(bin_dir, lang="en"):  # (the LSTM run of the joint layer is in test_sampled_softmax.py)
    with open(os.path.join(bin_dir, f"dict.{lang}.txt")) as f:
        return 4 + sum(1 for _ in f)  # + <s>, <pad>, </s>, <unk>


def _logged_output_params(text):
    return int(re.search(r"^\s*output\s+([\d,]+)", text, re.M).group(1).replace(",", ""))


@pytest.fixture(scope="module")
def joint_checkpoint(tiny_bin, tmp_path_factory):
    save = str(tmp_path_factory.mktemp("joint_tf"))
    proc = train(tiny_bin, save, TINY_TRANSFORMER, ["--output-layer", "joint", "--joint-dim", "24"], max_update=8)
    return save, proc


def test_transformer_train_generate(tiny_bin, joint_checkpoint):
    save, proc = joint_checkpoint
    out = proc.stdout + proc.stderr
    losses = logged_losses(out)
    assert len(losses) == 8 and losses[-1] < losses[0], losses
    v = _dict_size(tiny_bin)
    assert _logged_output_params(out) == 32 * 24 + 24 * 32 + v + 2 * 24  # eq. 16 with d = d_h = 32, d_j = 24
    ckpt = os.path.join(save, "checkpoint_last.pt")
    state = torch.load(ckpt, map_location="cpu")["model"]
    own = {k: tuple(t.shape) for k, t in state.items() if k.startswith("decoder.output_projection.")}
    assert own == {"decoder.output_projection.out_proj.weight": (24, 32),
                   "decoder.output_projection.out_proj.bias": (24,),
                   "decoder.output_projection.ctx_proj.weight": (24, 32),
                   "decoder.output_projection.ctx_proj.bias": (24,),
                   "decoder.output_projection.bias": (v,)}  # E is saved once, under the decoder's embedding
    _, hyps = generate(tiny_bin, ckpt)
    assert len(hyps) == 24


def test_generation_computes_output_matrix_once(tiny_bin, joint_checkpoint):
    """fairseq's SequenceGenerator (what fairseq-generate runs) reuses g_out(E) at every decoding step."""
    from fairseq import checkpoint_utils

    save, _ = joint_checkpoint
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [os.path.join(save, "checkpoint_last.pt")], arg_overrides={"data": tiny_bin})
    model = models[0]
    model.eval()
    layer = model.decoder.output_projection
    assert isinstance(layer, JointOutputLayer)
    task.load_dataset("test")
    itr = task.get_batch_iterator(dataset=task.dataset("test"), max_tokens=2000).next_epoch_itr(shuffle=False)
    cfg.generation.beam = 2
    cfg.generation.min_len = 5  # at least 6 decoding steps
    generator = task.build_generator(models, cfg.generation)
    calls = []
    layer.register_forward_hook(lambda module, inputs, output: calls.append(output.shape))
    n_sent = 0
    for sample in itr:
        hypos = task.inference_step(generator, models, sample)
        n_sent += len(hypos)
    assert n_sent == 24 and len(calls) >= 6
    # one decoding step = one call of the output layer; g_out(E) was computed at the first only
    assert layer.cache_stats == {"misses": 1, "hits": len(calls) - 1}, (layer.cache_stats, len(calls))
    # a change of the embedding (as an optimiser step would make) is seen by the next decoding step
    hits = layer.cache_stats["hits"]
    with torch.no_grad():
        model.decoder.embed_tokens.weight.mul_(0.5)
        task.inference_step(generator, models, next(iter(
            task.get_batch_iterator(dataset=task.dataset("test"), max_tokens=2000).next_epoch_itr(shuffle=False))))
    assert layer.cache_stats["misses"] == 2 and layer.cache_stats["hits"] > hits


def test_neighbours_script(tiny_bin, joint_checkpoint, tmp_path):
    """scripts/joint_neighbours.py against neighbours computed here in float64 from the checkpoint's tensors."""
    import subprocess
    import sys

    from harness import REPO, run

    save, _ = joint_checkpoint
    ckpt = os.path.join(save, "checkpoint_last.pt")
    script = os.path.join(REPO, "scripts", "joint_neighbours.py")
    words = ["T5", "T17", "s2"]
    proc = run([sys.executable, script, "--path", ckpt, "--data", tiny_bin, "--words", *words, "--k", "3",
                "--format", "tsv"])
    got = {}
    for line in proc.stdout.strip().splitlines()[1:]:
        q, rank, iw, _, ow, _ = line.split("\t")
        got.setdefault(q, {"input": [], "output": []})
        got[q]["input"].append(iw)
        got[q]["output"].append(ow)
    state = torch.load(ckpt, map_location="cpu")["model"]
    E = state["decoder.embed_tokens.weight"].double()
    U, bu = state["decoder.output_projection.out_proj.weight"].double(), \
        state["decoder.output_projection.out_proj.bias"].double()
    with open(os.path.join(tiny_bin, "dict.en.txt")) as f:
        symbols = ["<s>", "<pad>", "</s>", "<unk>"] + [line.split()[0] for line in f]
    for name, M in (("input", E), ("output", torch.tanh(E @ U.T + bu))):
        M = M / M.norm(dim=1, keepdim=True)
        for w in words:
            q = symbols.index(w)
            sims = M @ M[q]
            sims[:4] = -2
            sims[q] = -2
            assert got[w][name] == [symbols[i] for i in sims.argsort(descending=True)[:3].tolist()], (name, w)
    bad = subprocess.run([sys.executable, script, "--path", ckpt, "--data", tiny_bin, "--words", "nosuchword"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "query word 'nosuchword' is not in the target dictionary" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_presets_and_options(tiny_bin):
    from fairseq import options

    def parse(extra):
        parser = options.get_training_parser()
        return options.parse_args_and_arch(parser, [tiny_bin, "--user-dir", USER_DIR, "--cpu"] + extra)

    args = parse(["--arch", "outlayers_lstm_luong_2x2_joint"])
    assert (args.output_layer, args.joint_dim, args.joint_activation, args.joint_structure, args.joint_dropout,
            args.joint_no_word_bias) == ("joint", 512, "tanh", "full", 0.0, False)
    assert args.decoder_layers == 2 and args.decoder_embed_dim == 512
    args = parse(["--arch", "outlayers_transformer_iwslt_de_en_joint", "--joint-dim", "2048"])
    assert args.output_layer == "joint" and args.joint_dim == 2048 and args.decoder_ffn_embed_dim == 1024
    from fairseq_outlayers.errors import OutlayersConfigError

    with pytest.raises(OutlayersConfigError, match="is a preset of --output-layer joint"):
        parse(["--arch", "outlayers_transformer_small_joint", "--output-layer", "tied"])
    # the bias ablation: exactly |V| parameters fewer, and no bias in the logits
    from fairseq_outlayers.core.build import build_core_output_layer

    emb = nn.Embedding(7, 4)
    layers = {}
    for flag in ([], ["--joint-no-word-bias"]):
        args = parse(["--arch", "outlayers_lstm_luong_2x2_joint", "--joint-dim", "6"] + flag)
        layers[bool(flag)] = build_core_output_layer(args, None, emb, 4)
    assert layers[False].bias is not None and layers[True].bias is None
    count = {k: sum(p.numel() for p in v.parameters()) for k, v in layers.items()}
    assert count[False] - count[True] == 7
    with torch.no_grad():
        layers[False].bias.copy_(torch.arange(7.0))
    layers[True].load_state_dict({k: v for k, v in layers[False].state_dict().items() if k != "bias"})
    h = torch.randn(2, 3, 4)
    torch.testing.assert_close(layers[False](h) - torch.arange(7.0), layers[True](h), rtol=0, atol=1e-5)


def test_bad_joint_dim_is_one_line_error(tiny_bin, tmp_path):
    proc = train(tiny_bin, str(tmp_path / "x"), extra=["--output-layer", "joint", "--joint-dim", "0"], check=False,
                 cli="outlayers-train")
    assert proc.returncode != 0
    assert "--joint-dim must be a positive integer, got 0" in proc.stderr
    assert "Traceback" not in proc.stderr
    with pytest.raises(ValueError):
        JointOutputLayer(nn.Embedding(5, 4), 4, joint_dim=-3)
    from argparse import Namespace

    from fairseq_outlayers.errors import OutlayersConfigError
    from fairseq_outlayers.core.build import build_core_output_layer
    from fairseq_outlayers.core.registry import apply_defaults
    from fairseq_outlayers.core.registry import get_output_layer_spec

    # each value is checked once, by the layer's constructor; the core names the seam in the one-line error
    for bad, message in ((dict(joint_dim=-1), "--output-layer joint: --joint-dim must be a positive integer, "
                          "got -1"),
                         (dict(joint_dropout=1.0), "--output-layer joint: --joint-dropout must be in [0, 1), got 1.0"),
                         (dict(joint_activation="gelu"), "--output-layer joint: --joint-activation 'gelu' is unknown"),
                         (dict(joint_structure="deep"), "--output-layer joint: --joint-structure 'deep' is unknown")):
        args = Namespace(output_layer="joint", **bad)
        apply_defaults(get_output_layer_spec("joint"), args)
        with pytest.raises(OutlayersConfigError, match=re.escape(message)):
            build_core_output_layer(args, None, nn.Embedding(5, 4), 4)
