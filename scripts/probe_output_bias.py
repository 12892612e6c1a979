"""How much of a trained translation model's validation loss a per-word output bias alone removes: the frequency-prior
probe of docs/fixed-targets.md.

The fixed random classifier of Shalev et al. (2021) has no learned bias and, with normalised rows, no vector norms:
nothing in the output layer can say that "a" is more frequent than "trombone". This script freezes a trained model,
learns only a bias ``b`` (one value per target word, initialised to 0) on top of its output layer from the training
data, and reports the validation NLL (bits per target token, fairseq's ``nll_loss``) without ``b``, with the log
unigram frequency as ``b`` and with the fitted ``b``, and the rank correlation of the fitted ``b`` with word counts.
It also fits a single scale ``s`` on the logits (a learned temperature, ``s * logits``, initialised to 1) the same
way, and reports its validation NLL and value and the mean norm of the decoder features: a layer whose logits are
bounded (unit-norm fixed rows: ``|logit| <= ||h||``) and cannot reach the sharpness the data asks for gains from
``s > 1``.

    python scripts/probe_output_bias.py work/ledger/tiny-fixed.seed1/checkpoint_best.pt \\
        [--data work/multi30k/data-bin/de-en] [--epochs 3] [--json probe.json] [--out-checkpoint fixed+bias.pt]

``--out-checkpoint`` writes a copy of the checkpoint whose output layer has the fitted bias, for ``fairseq-generate``:
added to the layer's own per-word bias (the fixed classifier's frozen one, the joint layer's learned one, a
softmax/tied layer trained with ``--output-bias``), or, for a softmax/tied layer trained without one, as a new bias
with ``--output-bias`` turned on in the checkpoint's configuration; an existing file is never overwritten. That is
also the step after training with ``--criterion sampled_softmax``, whose models lack the frequency prior
(docs/joint-output.md: +1.39 test BLEU for the joint layer, +1.16 for tying, on Multi30k, three seeds). It runs
on the CPU and keeps the decoder features of the ``--train-sentences`` in memory. The validation NLL with ``b = 0``
is the model's own over every validation sentence; fairseq-train's ``valid nll_loss`` reads lower (2.36 against
2.405 bits on the tiny softmax) because its batching drops the last 1014 mod 8 = 6 sentences of Multi30k's
validation set (``--required-batch-size-multiple 8``, fairseq issue #5036; the same batching gives 2.3596 here).
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CHUNK = 8192


def load(checkpoint, data):
    import fairseq_outlayers  # noqa: F401  (registers the package and allow-lists its checkpoints)
    from fairseq import checkpoint_utils

    overrides = {"data": data} if data else {}
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides=overrides)
    model = models[0].eval()
    return model, task, cfg


@torch.no_grad()
def features(model, task, split, max_tokens, max_sentences=None):
    """(decoder features of every target token, target ids) of a split, teacher-forced, dropout off."""
    task.load_dataset(split)
    dataset = task.dataset(split)
    itr = task.get_batch_iterator(dataset, max_tokens=max_tokens, ignore_invalid_inputs=False,
                                  seed=1).next_epoch_itr(shuffle=False)
    pad = task.target_dictionary.pad()
    feats, targets, seen = [], [], 0
    for batch in itr:
        net = batch["net_input"]
        encoder_out = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        x, _ = model.decoder(net["prev_output_tokens"], encoder_out=encoder_out, features_only=True)
        mask = batch["target"].ne(pad)
        feats.append(x[mask].float())
        targets.append(batch["target"][mask])
        seen += batch["nsentences"]
        if max_sentences and seen >= max_sentences:
            break
    return torch.cat(feats), torch.cat(targets)


def nll_bits(layer, feats, targets, bias=None, scale=None):
    """Mean negative log-likelihood of the targets in bits, the output layer's logits (times ``scale``) plus
    ``bias``."""
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(targets), CHUNK):
            logits = layer(feats[i:i + CHUNK]).float()
            if scale is not None:
                logits = logits * scale
            if bias is not None:
                logits = logits + bias
            total += F.cross_entropy(logits, targets[i:i + CHUNK], reduction="sum").item()
    return total / len(targets) / math.log(2)


def fit_on_logits(layer, feats, targets, init, apply, epochs, lr, seed=1):
    """Parameters ``init`` of ``apply(logits, param)`` over the frozen layer's logits, Adam on the training tokens'
    cross-entropy (the layer's logits are computed chunk by chunk, never all kept)."""
    param = init.clone().requires_grad_(True)
    opt = torch.optim.Adam([param], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    chunks = range(0, len(targets), CHUNK)
    for _ in range(epochs):
        for j in torch.randperm(len(chunks), generator=gen).tolist():
            with torch.no_grad():
                logits = layer(feats[chunks[j]:chunks[j] + CHUNK]).float()
            opt.zero_grad()
            F.cross_entropy(apply(logits, param), targets[chunks[j]:chunks[j] + CHUNK]).backward()
            opt.step()
    return param.detach()


def fit_bias(layer, feats, targets, vocab, epochs, lr, seed=1):
    """A bias over the frozen layer's logits."""
    return fit_on_logits(layer, feats, targets, torch.zeros(vocab), lambda z, b: z + b, epochs, lr, seed)


def fit_scale(layer, feats, targets, epochs, lr, seed=1):
    """One scale on the frozen layer's logits (fitted as its logarithm, from 0)."""
    return fit_on_logits(layer, feats, targets, torch.zeros(()), lambda z, s: z * s.exp(), epochs, lr, seed).exp()


BIAS_KEY = "decoder.output_projection.bias"


def put_bias(state, bias, accepts_bias):
    """Put the fitted ``bias`` into a checkpoint's ``state`` (in place): added to the output layer's own bias, or
    stored as a new one with ``output_bias`` switched on in the saved configuration when the layer was trained
    without one and its kind takes ``--output-bias`` (``accepts_bias``). Raises ValueError otherwise."""
    weights = state["model"]
    if BIAS_KEY in weights:
        weights[BIAS_KEY] = weights[BIAS_KEY] + bias.to(weights[BIAS_KEY].dtype)
        return
    if not accepts_bias:
        raise ValueError("--out-checkpoint needs an output layer with a per-word bias or one that takes "
                         "--output-bias (softmax, tied, tied-all)")
    dtype = next(v.dtype for v in weights.values() if torch.is_floating_point(v))
    weights[BIAS_KEY] = bias.to(dtype)
    from omegaconf import DictConfig, open_dict

    for config in (state.get("args"), (state.get("cfg") or {}).get("model")):
        if isinstance(config, DictConfig):
            with open_dict(config):
                config.output_bias = True
        elif config is not None:
            config.output_bias = True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--data", default=None, help="binarised data (default: the checkpoint's own --data)")
    parser.add_argument("--train-sentences", type=int, default=None, help="fit on the first N training sentences")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    parser.add_argument("--out-checkpoint", default=None,
                        help="a copy of the checkpoint with the fitted bias added to the output layer's own per-word "
                        "bias (fixed, joint, or a layer trained with --output-bias)")
    args = parser.parse_args(argv)
    for path in (args.json, args.out_checkpoint):
        if path and os.path.exists(path):
            parser.error(f"{path} exists; give another name (nothing is overwritten)")
    from scipy.stats import spearmanr

    from fairseq_outlayers.outfiles import atomic_write, write_text

    model, task, cfg = load(args.checkpoint, args.data)
    layer = model.decoder.output_projection
    own = dict(layer.named_buffers(recurse=False), **dict(layer.named_parameters(recurse=False)))
    from fairseq_outlayers.models.registry import OUTPUT_LAYER_REGISTRY

    spec = OUTPUT_LAYER_REGISTRY.get(getattr(cfg.model, "output_layer", None))
    accepts_bias = getattr(own.get("bias"), "shape", None) == (len(task.target_dictionary),) or bool(
        spec and spec.output_bias)
    if args.out_checkpoint and not accepts_bias:
        parser.error(f"--out-checkpoint needs an output layer with a per-word bias or one that takes --output-bias "
                     f"(softmax, tied, tied-all); this checkpoint's is {type(layer).__name__} without one")
    vocab = len(task.target_dictionary)
    train_x, train_y = features(model, task, "train", args.max_tokens, args.train_sentences)
    valid_x, valid_y = features(model, task, "valid", args.max_tokens)
    counts = torch.bincount(train_y, minlength=vocab).double()
    unigram = torch.log(counts + 1).float()
    bias = fit_bias(layer, train_x, train_y, vocab, args.epochs, args.lr)
    scale = fit_scale(layer, train_x, train_y, args.epochs, args.lr)
    seen = counts > 0
    rho = spearmanr(bias[seen].numpy(), counts[seen].numpy()).correlation
    out = {"checkpoint": args.checkpoint, "layer": type(layer).__name__, "train_sentences": args.train_sentences,
           "train_tokens": len(train_y),
           "valid_tokens": len(valid_y),
           "valid_nll_bits": {"no bias": round(nll_bits(layer, valid_x, valid_y), 4),
                              "log unigram bias": round(nll_bits(layer, valid_x, valid_y, unigram), 4),
                              "fitted bias": round(nll_bits(layer, valid_x, valid_y, bias), 4),
                              "fitted scale": round(nll_bits(layer, valid_x, valid_y, scale=scale), 4)},
           "train_nll_bits": {"no bias": round(nll_bits(layer, train_x, train_y), 4),
                              "fitted bias": round(nll_bits(layer, train_x, train_y, bias), 4)},
           "spearman_bias_count": round(float(rho), 4), "fitted_scale": round(float(scale), 4),
           "valid_feature_norm_mean": round(valid_x.norm(dim=1).mean().item(), 3),
           "epochs": args.epochs, "lr": args.lr}
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        write_text(args.json, text + "\n")
    if args.out_checkpoint:
        state = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
        put_bias(state, bias, accepts_bias)
        with atomic_write(args.out_checkpoint, "wb") as f:
            torch.save(state, f)
        print(f"wrote {args.out_checkpoint}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
