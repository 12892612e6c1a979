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
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from fairseq_outlayers.tools.output_bias import (BIAS_KEY, features, fit_bias, fit_scale, load,  # noqa: E402,F401
                                       nll_bits, put_bias)
from fairseq_outlayers.tools.output_bias import accepts_bias as layer_accepts_bias  # noqa: E402
from fairseq_outlayers.tools.output_bias import write_checkpoint  # noqa: E402
from fairseq_outlayers import value_checks  # noqa: E402
from fairseq_outlayers.errors import OutlayersConfigError, one_line_errors  # noqa: E402
from fairseq_outlayers.outfiles import check_output_dir  # noqa: E402


@one_line_errors
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--data", default=None, help="binarised data (default: the checkpoint's own --data)")
    parser.add_argument("--train-sentences", type=value_checks.POSITIVE_INT, default=None, help="fit on the first N training sentences")
    parser.add_argument("--epochs", type=value_checks.POSITIVE_INT, default=3)
    parser.add_argument("--lr", type=value_checks.LEARNING_RATE, default=0.05)
    parser.add_argument("--max-tokens", type=value_checks.POSITIVE_INT, default=4096)
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    parser.add_argument("--out-checkpoint", default=None,
                        help="a copy of the checkpoint with the fitted bias added to the output layer's own per-word "
                        "bias (fixed, joint, or a layer trained with --output-bias)")
    args = parser.parse_args(argv)
    for path in (args.json, args.out_checkpoint):
        if path and os.path.exists(path):
            parser.error(f"{path} exists; give another name (nothing is overwritten)")
        if path:
            try:
                check_output_dir(path, "--json" if path == args.json else "--out-checkpoint")
            except OutlayersConfigError as e:
                parser.error(str(e))
    from scipy.stats import spearmanr

    from fairseq_outlayers.outfiles import write_text

    model, task, cfg = load(args.checkpoint, args.data)
    layer = model.decoder.output_projection
    accepts_bias = layer_accepts_bias(model, task, cfg)
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
        write_checkpoint(args.checkpoint, args.out_checkpoint, bias, accepts_bias, model)
        print(f"wrote {args.out_checkpoint}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
