"""The sampled-softmax (negative sampling) criterion: the sampled vocabulary, equality with the full softmax at
ratio 1, a float64 reference, gradients only on sampled rows, seeding, errors, and fairseq CLI runs."""
import math
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from fairseq_outlayers.losses.sampled_softmax import SampledSoftmaxCriterion, sampled_softmax_loss
from fairseq_outlayers.losses.negative_sampling import mix_seed, sample_vocabulary, sampling_correction
from fairseq_outlayers.errors import OutlayersConfigError
from harness import TINY_LSTM, TINY_TRANSFORMER, USER_DIR, generate, layer_data, logged_losses, softmax_layers, train


# -- the sampled vocabulary -----------------------------------------------------------------------------------------
def test_sample_vocabulary_contents():
    gen = torch.Generator().manual_seed(3)
    targets = torch.tensor([[5, 17, 17, 1], [90, 2, 1, 1]])
    ids, remapped = sample_vocabulary(targets, 100, 0.25, pad=1, generator=gen)
    assert ids.numel() == 25 and torch.equal(ids, torch.sort(torch.unique(ids)).values)  # 25 distinct, sorted
    assert set(targets.flatten().tolist()) | {1} <= set(ids.tolist())  # every target and pad are in V'
    assert torch.equal(ids[remapped], targets)  # remapping is exact
    # more positives than the ratio allows: V' is just the positives
    ids, _ = sample_vocabulary(targets, 100, 0.01, pad=1, generator=gen)
    assert ids.tolist() == [1, 2, 5, 17, 90]
    # ratio 1 is the whole vocabulary in order, and the targets are unchanged
    ids, remapped = sample_vocabulary(targets, 100, 1.0, pad=1, generator=gen)
    assert torch.equal(ids, torch.arange(100)) and torch.equal(remapped, targets)
    with pytest.raises(ValueError):
        sample_vocabulary(targets, 100, 0.0)
    with pytest.raises(ValueError):
        sample_vocabulary(targets, 100, 1.5)


def test_negatives_are_uniform_and_reproducible():
    targets = torch.tensor([0, 1, 2, 3])
    counts = torch.zeros(40)
    for seed in range(2000):
        ids, _ = sample_vocabulary(targets, 40, 0.5, generator=torch.Generator().manual_seed(seed))
        counts[ids] += 1
    assert torch.all(counts[:4] == 2000)  # positives always
    neg = counts[4:] / 2000  # 16 of 36 negatives each time: inclusion probability 4/9
    assert torch.all((neg - 16 / 36).abs() < 0.05), neg
    a = sample_vocabulary(targets, 40, 0.5, generator=torch.Generator().manual_seed(7))[0]
    b = sample_vocabulary(targets, 40, 0.5, generator=torch.Generator().manual_seed(7))[0]
    c = sample_vocabulary(targets, 40, 0.5, generator=torch.Generator().manual_seed(8))[0]
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert len({mix_seed(1, 0, 0), mix_seed(1, 1, 0), mix_seed(1, 0, 1), mix_seed(2, 0, 0)}) == 4


def test_sampled_loss_against_float64_reference():
    torch.manual_seed(0)
    full = torch.randn(6, 30, dtype=torch.float64)
    targets = torch.tensor([3, 3, 8, 1, 29, 0])
    ids, remapped = sample_vocabulary(targets, 30, 0.4, pad=1, generator=torch.Generator().manual_seed(1))
    loss, nll = sampled_softmax_loss(full[:, ids], remapped, 0.0, ignore_index=int((ids == 1).nonzero()))
    keep = targets != 1
    ref = -(full[keep, targets[keep]] - torch.logsumexp(full[keep][:, ids], dim=-1)).sum()
    assert loss.dtype == torch.float32  # computed like fairseq, in float32 at least
    assert math.isclose(float(nll), float(ref), rel_tol=1e-6)
    per_position, _ = sampled_softmax_loss(full[:, ids], remapped, 0.0, ignore_index=int((ids == 1).nonzero()),
                                           reduce=False)
    assert per_position.numel() == 6 and float(per_position[3]) == 0.0  # position 3 is padding
    assert math.isclose(float(per_position.sum()), float(loss), rel_tol=1e-6)
    # label smoothing spreads eps over the |V'| sampled classes (fairseq's formula, eps_i = eps / (|V'| - 1))
    eps, n = 0.1, ids.numel()
    lp = F.log_softmax(full[keep][:, ids], dim=-1)
    nll_i = -lp.gather(1, remapped[keep].unsqueeze(1)).squeeze(1)
    ref_ls = ((1 - eps - eps / (n - 1)) * nll_i + eps / (n - 1) * -lp.sum(-1)).sum()
    loss_ls, _ = sampled_softmax_loss(full[:, ids], remapped, eps, ignore_index=int((ids == 1).nonzero()))
    assert math.isclose(float(loss_ls), float(ref_ls), rel_tol=1e-6)


# -- the criterion on real models ------------------------------------------------------------------------------------
SOFTMAX_LAYERS = softmax_layers()


def _setup(tiny_bin, extra, arch=TINY_TRANSFORMER):
    from fairseq import options, tasks

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [tiny_bin, "--user-dir", USER_DIR, "--cpu", *arch, *extra])
    task = tasks.setup_task(args)
    torch.manual_seed(0)
    model = task.build_model(args)
    task.load_dataset("train")
    itr = task.get_batch_iterator(dataset=task.dataset("train"), max_tokens=400).next_epoch_itr(shuffle=False)
    return args, task, model, next(itr)


def _criterion(task, ratio, eps=0.0, correction="none"):
    return SampledSoftmaxCriterion(task, sentence_avg=False, sample_ratio=ratio, label_smoothing=eps,
                                   sample_correction=correction)


@pytest.mark.parametrize("layer", SOFTMAX_LAYERS)
def test_ratio_one_equals_full_softmax(tiny_bin, tiny_bin_joined, layer):
    """--sample-ratio 1 gives fairseq's label-smoothed cross-entropy and the same gradients, bit for bit."""
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    _, task, model, sample = _setup(layer_data(layer, tiny_bin, tiny_bin_joined), ["--output-layer", layer])
    model.train()
    ref_crit = LabelSmoothedCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)
    ref_loss, ref_size, ref_log = ref_crit(model, sample)
    ref_loss.backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    loss, size, log = _criterion(task, 1.0, eps=0.1)(model, sample)
    loss.backward()
    assert torch.equal(loss, ref_loss) and torch.equal(log["nll_loss"], ref_log["nll_loss"])
    assert size == ref_size and log["sampled_vocab"] == len(task.target_dictionary)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads.keys() == ref_grads.keys()
    for n in grads:
        assert torch.equal(grads[n], ref_grads[n]), n


@pytest.mark.parametrize("correction", ["none", "logq"])
def test_only_sampled_rows_get_gradients_and_loss_matches_reference(tiny_bin, correction):
    _, task, model, sample = _setup(tiny_bin, ["--output-layer", "softmax"])
    model.train()
    crit = _criterion(task, 0.9, correction=correction)  # the tiny batch's targets: ~80 % of V
    torch.manual_seed(11)  # the criterion seeds its own generator from this (fairseq: --seed + num_updates)
    loss, _, log = crit(model, sample)
    loss.backward()
    v = len(task.target_dictionary)
    n_sampled = log["sampled_vocab"]
    target = sample["target"]
    assert n_sampled == max(math.ceil(0.9 * v), len(set(target.flatten().tolist()) | {task.target_dictionary.pad()}))
    rows = model.decoder.output_projection.weight.grad.abs().sum(1) > 0
    sampled = set(rows.nonzero().flatten().tolist())
    pad = task.target_dictionary.pad()
    assert set(target.flatten().tolist()) - {pad} <= sampled  # every target row is trained
    # float64 reference from the full logits restricted to the same V' (recovered by re-seeding identically)
    crit2 = _criterion(task, 0.9, correction=correction)
    torch.manual_seed(11)
    gen = crit2._generator(target.device)
    ids, remapped = sample_vocabulary(target, v, 0.9, pad=pad, generator=gen)
    assert sampled == set(ids.tolist())  # exactly the rows of V' (all in the normaliser) and nothing else
    with torch.no_grad():
        features, _ = model(**sample["net_input"], features_only=True)
        full = model.decoder.output_projection(features).double().view(-1, v)
    t = target.view(-1)
    keep = t != pad
    # logq: the drawn negatives' logits gain log((V - |targets + pad|) / |negatives|), the targets' nothing
    positives = set(t.tolist()) | {pad}
    negatives = torch.tensor([i not in positives for i in ids.tolist()])
    offset = torch.zeros(len(ids), dtype=torch.float64)
    if correction == "logq":
        offset[negatives] = math.log((v - len(positives)) / int(negatives.sum()))
    assert int(negatives.sum()) > 0
    ref = -(full[keep, t[keep]] - torch.logsumexp(full[keep][:, ids] + offset, dim=-1)).sum()
    assert math.isclose(float(loss), float(ref), rel_tol=1e-5)


def test_sampling_correction_offsets_and_unbiased_normaliser():
    """logq offsets are 0 on the batch's targets and pad and log((V - |P|) / n_neg) on the drawn negatives, and the
    corrected normaliser over V' averages to the full softmax's normaliser over many draws, where the uncorrected
    one falls short by the mass of the words left out."""
    v, pad = 30, 1
    targets = torch.tensor([[4, 7, 7, 9], [12, 4, 2, 1]])
    positives = {1, 2, 4, 7, 9, 12}
    scores = torch.randn(v, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    full = float(scores.exp().sum())
    gen = torch.Generator().manual_seed(3)
    corrected, plain, draws = 0.0, 0.0, 4000
    for _ in range(draws):
        ids, _ = sample_vocabulary(targets, v, 0.5, pad=pad, generator=gen)
        offsets = sampling_correction(ids, targets, v, pad)
        negative = torch.tensor([i not in positives for i in ids.tolist()])
        assert int(negative.sum()) == 15 - 6 and not bool(offsets[~negative].any())
        assert torch.allclose(offsets[negative], torch.full((9,), math.log(24 / 9)))
        corrected += float((scores[ids] + offsets.double()).exp().sum()) / draws
        plain += float(scores[ids].exp().sum()) / draws
    expected_plain = sum(math.exp(scores[i]) for i in positives) + 9 / 24 * sum(
        math.exp(scores[i]) for i in range(v) if i not in positives)
    assert corrected == pytest.approx(full, rel=0.01) and plain == pytest.approx(expected_plain, rel=0.01)
    assert plain < 0.8 * full
    everything, _ = sample_vocabulary(targets, v, 1.0, pad=pad)
    assert not bool(sampling_correction(everything, targets, v, pad).any())  # no negatives, no correction


def test_validation_uses_full_softmax_and_seeding(tiny_bin, monkeypatch):
    _, task, model, sample = _setup(tiny_bin, ["--output-layer", "joint", "--joint-dim", "16"])
    crit = _criterion(task, 0.9)  # the tiny batch's targets already cover ~80 % of V: leave room for negatives
    model.eval()
    with torch.no_grad():
        loss, _, log = crit(model, sample)
        lprobs = model.get_normalized_probs(model(**sample["net_input"]), log_probs=True)
    t = sample["target"]
    ref = -lprobs.gather(-1, t.unsqueeze(-1)).squeeze(-1)[t != task.target_dictionary.pad()].sum()
    assert log["sampled_vocab"] == len(task.target_dictionary) and torch.allclose(loss, ref)
    model.train()

    def run(seed, rank=0):
        import fairseq.distributed.utils as dist_utils

        monkeypatch.setattr(dist_utils, "get_global_rank", lambda: rank)
        fresh = _criterion(task, 0.9)  # as in a new run
        torch.manual_seed(seed)  # what fairseq's trainer does before every update (--seed + num_updates)
        return [float(fresh(model, sample)[0]) for _ in range(2)]  # two micro-batches of one update

    a, b = run(5), run(5)
    assert a == b  # reproducible from the seed
    assert a[0] != a[1]  # each micro-batch of an update draws its own negatives
    assert run(5, rank=1) != a  # each worker draws its own negatives
    assert run(6) != a


def test_bad_ratio_and_non_softmax_layer(tiny_bin, tmp_path):
    for ratio in (0.0, -0.5, 1.01):
        with pytest.raises(OutlayersConfigError, match="--sample-ratio must be in"):
            SampledSoftmaxCriterion(None, sentence_avg=False, sample_ratio=ratio)

    class NotSoftmax(nn.Module):
        is_softmax = False

    class Model(nn.Module):
        pass

    from argparse import Namespace

    model = Model()
    model.decoder = nn.Module()
    model.decoder.output_projection = NotSoftmax()
    model.outlayers_args = Namespace(output_layer="continuous")
    with pytest.raises(OutlayersConfigError, match="needs a softmax-type output layer .* is 'continuous'"):
        SampledSoftmaxCriterion.output_layer_of(model)
    del model.outlayers_args
    model.decoder.output_projection = nn.Linear(3, 4)  # a stock fairseq projection is not accepted either
    with pytest.raises(OutlayersConfigError, match="needs a softmax-type output layer"):
        SampledSoftmaxCriterion.output_layer_of(model)
    proc = train(tiny_bin, str(tmp_path / "x"), extra=["--criterion", "sampled_softmax", "--sample-ratio", "1.5"],
                 check=False, cli="outlayers-train")
    assert proc.returncode != 0 and "--sample-ratio must be in (0, 1]" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- through fairseq's CLIs ------------------------------------------------------------------------------------------
def test_lstm_joint_ablation_with_sampling_then_generate(tiny_bin, tmp_path):
    """LSTM + joint layer (context-structure ablation, joint dropout) trained with 50 % sampling and label
    smoothing through fairseq-train, then fairseq-generate."""
    import re

    save = str(tmp_path / "ckpt")
    proc = train(tiny_bin, save, TINY_LSTM, ["--output-layer", "joint", "--joint-structure", "context",
                                             "--joint-dropout", "0.1", "--criterion", "sampled_softmax",
                                             "--sample-ratio", "0.5", "--label-smoothing", "0.1"], max_update=8)
    out = proc.stdout + proc.stderr
    losses = logged_losses(out)
    assert len(losses) == 8 and losses[-1] < losses[0], losses
    with open(os.path.join(tiny_bin, "dict.en.txt")) as f:
        v = 4 + sum(1 for _ in f)
    owned = int(re.search(r"^\s*output\s+([\d,]+)", out, re.M).group(1).replace(",", ""))
    assert owned == 32 * 32 + v  # eq. 7b: W (d x d_h), per-word bias
    valid = out.split("valid on 'valid' subset")[1].splitlines()[0]
    assert f"vocab {v} " in valid  # validation used the full softmax
    _, hyps = generate(tiny_bin, os.path.join(save, "checkpoint_last.pt"))
    assert len(hyps) == 24


def test_sample_correction_from_the_command_line(tiny_bin, tmp_path):
    """fairseq-train --sample-correction logq trains and keeps the choice in the checkpoint; another value is
    refused by fairseq's option parser, naming the choices."""
    from fairseq_outlayers.core import checkpoint_safety  # noqa: F401  (safe torch.load of fairseq checkpoints)

    extra = ["--output-layer", "tied", "--criterion", "sampled_softmax", "--sample-ratio", "0.9"]
    train(tiny_bin, str(tmp_path / "logq"), extra=extra + ["--sample-correction", "logq"], max_update=2)
    state = torch.load(os.path.join(tmp_path / "logq", "checkpoint_last.pt"), map_location="cpu")
    assert state["cfg"]["criterion"]["sample_correction"] == "logq"
    proc = train(tiny_bin, str(tmp_path / "bad"), extra=extra + ["--sample-correction", "log"], max_update=2,
                 check=False)
    assert proc.returncode != 0 and "invalid choice: 'log'" in proc.stderr and "'logq'" in proc.stderr
