#!/usr/bin/env python
"""Do learned target-vector norms follow word frequency? (Shalev et al. 2021, section 3.2 and Figure 2.)

The paper reads the softmax as ``||w_j|| ||f|| cos(w_j, f) + b_j`` and finds that a learned output vector's norm
``||w_j||`` is rank-correlated with how often word j occurs in the training data (Spearman 0.76-0.93 on its
translation models). This script measures that on any fairseq checkpoint with an output matrix:

    python scripts/analyse_norm_frequency.py checkpoints/checkpoint_best.pt data-bin/dict.en.txt

It reads the output matrix from the checkpoint (``decoder.output_projection.weight`` of ``--output-layer softmax``
or fixed; the decoder input embedding for tied layers; any tensor with ``--key``), takes each word's training
count from the fairseq dictionary file (the counts fairseq-preprocess wrote), leaves out the special symbols and
words with a count below ``--min-count`` (fairseq's ``madeupword`` padding entries have count 0), prints the
Spearman correlation (``scipy.stats.spearmanr``) and saves a scatter plot if matplotlib is installed.
"""
import argparse
import json
import os
import sys

TIED_LAYERS = ("tied", "tied-all")


def checkpoint_model_args(state):
    """The model options stored in a fairseq checkpoint (``cfg.model`` or, for old checkpoints, ``args``)."""
    cfg = state.get("cfg")
    model_args = cfg.get("model") if isinstance(cfg, dict) else getattr(cfg, "model", None)
    return model_args if model_args is not None else state.get("args")


def output_matrix(state, key=None):
    """(name, tensor) of the output matrix stored in a loaded fairseq checkpoint ``state``."""
    weights = state["model"]
    if key is not None:
        if key not in weights:
            raise KeyError(f"no tensor '{key}' in the checkpoint; its 2-D tensors are: "
                           + ", ".join(k for k, v in weights.items() if getattr(v, "dim", lambda: 0)() == 2))
        return key, weights[key]
    layer = getattr(checkpoint_model_args(state), "output_layer", None)
    if layer in TIED_LAYERS and "decoder.embed_tokens.weight" in weights:
        return "decoder.embed_tokens.weight", weights["decoder.embed_tokens.weight"]
    for name in ("decoder.output_projection.weight", "decoder.fc_out.weight", "decoder.embed_out"):
        if name in weights:
            return name, weights[name]
    raise KeyError(f"no output matrix found (output layer '{layer}'); pass --key with the name of the |V| x d "
                   "tensor to analyse")


def word_counts(dictionary, min_count=1):
    """(row indices, training counts, words) of the dictionary's non-special entries seen >= min_count times."""
    rows, counts, words = [], [], []
    for i in range(dictionary.nspecial, len(dictionary)):
        if dictionary.count[i] >= min_count:
            rows.append(i)
            counts.append(dictionary.count[i])
            words.append(dictionary[i])
    return rows, counts, words


def norm_frequency_correlation(matrix, counts, rows):
    """Spearman's rank correlation between the L2 norms of ``matrix[rows]`` and ``counts``; (rho, p, norms).

    rho is NaN when the norms (to 1e-6 relative) or the counts are all equal, e.g. a fixed normalised classifier."""
    import numpy as np
    from scipy.stats import spearmanr

    norms = np.linalg.norm(matrix.detach().double().cpu().numpy()[rows], axis=1)
    if np.ptp(norms) <= 1e-6 * np.abs(norms).max() or len(set(counts)) < 2:
        return float("nan"), float("nan"), norms
    result = spearmanr(norms, counts)
    return float(result.statistic if hasattr(result, "statistic") else result[0]), float(result.pvalue), norms


def save_scatter(path, counts, norms, rho, title):
    """Figure 2 of the paper: norm against training count (log scale). Returns False without matplotlib."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq's import leaves the root logger verbose
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401  (makes matplotlib.ticker available)

    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(counts, norms, s=4, alpha=0.5)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # decade labels only
    ax.set_xlabel("training count of the word")
    ax.set_ylabel("L2 norm of its output vector")
    ax.set_title(f"{title}\nSpearman rho = {rho:.3f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("checkpoint", help="a checkpoint written by fairseq-train")
    parser.add_argument("dictionary", help="its target dictionary with counts (data-bin/dict.<tgt>.txt)")
    parser.add_argument("--key", help="name of the |V| x d tensor in the checkpoint (default: found from the "
                        "output layer)")
    parser.add_argument("--min-count", type=int, default=1,
                        help="leave out words seen fewer times in training (default: 1, drops padding entries)")
    parser.add_argument("--plot", help="where to save the scatter plot (default: CHECKPOINT without .pt + "
                        "'.norm_frequency.png')")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing plot file")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    for path, what in ((args.checkpoint, "checkpoint"), (args.dictionary, "dictionary")):
        if not os.path.isfile(path):
            parser.error(f"{what} '{path}' does not exist")
    plot = args.plot or os.path.splitext(args.checkpoint)[0] + ".norm_frequency.png"
    if os.path.exists(plot) and not args.overwrite:
        parser.error(f"plot file '{plot}' exists; pass --overwrite to replace it or --plot PATH for another file")

    import torch

    import fairseq_outlayers.models  # noqa: F401  (allow-lists the classes in fairseq checkpoints for a safe load)
    from fairseq.data import Dictionary

    from fairseq_outlayers.core.checkpoint_safety import read

    state = read(args.checkpoint)  # weights-only: a crafted or damaged file is refused with one line
    try:
        name, matrix = output_matrix(state, args.key)
    except KeyError as e:
        parser.error(f"{args.checkpoint}: {e.args[0]}")
    try:
        dictionary = Dictionary.load(args.dictionary)
    except Exception as e:  # fairseq raises ValueError/RuntimeError on malformed lines
        parser.error(f"cannot read the dictionary '{args.dictionary}': {e}")
    if matrix.dim() != 2 or matrix.shape[0] != len(dictionary):
        parser.error(f"'{name}' in {args.checkpoint} has shape {tuple(matrix.shape)} but '{args.dictionary}' has "
                     f"{len(dictionary)} entries; pass the target dictionary the checkpoint was trained with")
    rows, counts, _words = word_counts(dictionary, args.min_count)
    if len(rows) < 3:
        parser.error(f"only {len(rows)} words have a count >= {args.min_count} in '{args.dictionary}'")
    rho, p, norms = norm_frequency_correlation(matrix, counts, rows)
    layer = getattr(checkpoint_model_args(state), "output_layer", None) or "softmax"
    result = {"checkpoint": args.checkpoint, "tensor": name, "output_layer": layer, "words": len(rows),
              "spearman_rho": None if rho != rho else rho, "p_value": None if p != p else p,  # NaN: undefined
              "norm_min": float(norms.min()), "norm_max": float(norms.max())}
    saved = save_scatter(plot, counts, norms, rho, f"{os.path.basename(args.checkpoint)}: {name}")
    result["plot"] = plot if saved else None
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.checkpoint}: {name} ({layer} output layer), {len(rows)} words with count >= {args.min_count}")
        print(f"norms from {result['norm_min']:.4f} to {result['norm_max']:.4f}")
        if rho != rho:  # NaN
            print("Spearman rho undefined: the norms are all equal (a fixed, normalised classifier has no "
                  "learned norms)")
        else:
            print(f"Spearman rho(norm, count) = {rho:.4f} (p = {p:.3g}); the paper reports 0.76-0.93 for "
                  "learned output vectors")
            if layer == "fixed":
                print("(a fixed classifier's norms are drawn at random, not learned: the paper's Figure 2, right)")
    if saved:
        print(f"scatter plot saved to {plot}", file=sys.stderr)
    else:
        print("matplotlib is not installed, so no scatter plot was saved (the correlation above does not need it); "
              "pip install matplotlib to get the plot", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from fairseq_outlayers.errors import one_line_errors

    sys.exit(one_line_errors(main)())
