"""``outlayers-fit-bias CHECKPOINT --out NEW.pt [--data DIR] [--train-sentences N]``: give a trained model the
per-word output bias its training left out, fitted from training data with the model frozen.

The step after training with negative sampling: a model trained on a sampled softmax lacks the
frequency prior of the full one (docs/joint-output.md: on Multi30k the fit gives the joint layer trained with 25 %
negative sampling +1.39 test BLEU over three seeds, tying +1.16; a model trained with the full softmax gains
nothing). The bias (one value per target word, from 0) is fitted by Adam on the cross-entropy of the first N
training sentences and added to the output layer's own bias, or stored as a new one with ``--output-bias`` switched
on in the checkpoint for a softmax/tied layer trained without one. ``NEW.pt`` is an ordinary checkpoint for
``fairseq-generate``; it is written atomically and never over an existing file. Prints the validation and training
NLL (bits per target token) before and after, as JSON. Runs on the GPU when there is one (``--device cpu`` to keep
it on the CPU); the decoder features of the N sentences are kept in that device's memory.
"""
import argparse
import glob
import json
import os
import sys

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.outfiles import check_output_dir
from fairseq_outlayers.value_checks import Range

#: Adam moves each bias by about --lr per update, and a fitted bias is a few nats: larger steps only oscillate
LR = Range(0, 10, low_open=True, why="Adam moves each bias by about --lr per update")


def missing_splits(data: str, splits=("train", "valid")):
    """The splits of ``splits`` that a data-bin directory (fairseq's first path of ``a:b:c``) has no binarised file
    of (``SPLIT.SRC-TGT.LANG.idx``, or ``SPLIT1...`` for a split in several parts)."""

    folder = data.split(os.pathsep)[0]
    return [s for s in splits if not glob.glob(os.path.join(glob.escape(folder), f"{s}.*.idx"))
            and not glob.glob(os.path.join(glob.escape(folder), f"{s}[0-9]*.*.idx"))]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="outlayers-fit-bias", description=__doc__.strip().splitlines()[0])
    parser.add_argument("checkpoint", help="a checkpoint written by fairseq-train (e.g. checkpoints/checkpoint_best.pt)")
    parser.add_argument("--out", required=True, help="the checkpoint to write (must not exist)")
    parser.add_argument("--data", help="data-bin directory of the training data (default: the one recorded in the "
                        "checkpoint)")
    parser.add_argument("--train-sentences", type=int, default=10000,
                        help="fit on the first N training sentences (default 10000, the setting measured in "
                        "docs/joint-output.md; 0: all)")
    parser.add_argument("--epochs", type=int, default=3, help="passes over them (default 3)")
    parser.add_argument("--lr", type=float, default=0.05, help="Adam learning rate (default 0.05)")
    parser.add_argument("--max-tokens", type=int, default=4096, help="tokens per batch when reading features")
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when a GPU is visible, else cpu)")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.checkpoint):
        parser.error(f"checkpoint '{args.checkpoint}' does not exist; pass the path of a .pt file written by "
                     "fairseq-train")
    if os.path.exists(args.out):
        parser.error(f"--out '{args.out}' exists; give another name (nothing is overwritten)")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        parser.error(f"--out '{args.out}': its directory does not exist")

    try:
        check_output_dir(args.out, "--out")  # a file can be created there: checked before the fit (minutes)
    except OutlayersConfigError as e:
        parser.error(str(e))
    if args.data is not None and not os.path.isdir(args.data):
        parser.error(f"--data '{args.data}' is not a directory; pass the data-bin directory used for training")
    if args.data is not None:
        missing = missing_splits(args.data)
        if missing:
            parser.error(f"--data '{args.data}' has no binarised {' or '.join(missing)} split ({missing[0]}.SRC-TGT.*."
                         "idx/.bin); the bias is fitted on the training split and measured on the validation split: "
                         "pass the data-bin directory fairseq-preprocess wrote for training")
    for name in ("train_sentences", "epochs", "max_tokens"):
        value = getattr(args, name)
        if value < (0 if name == "train_sentences" else 1):
            parser.error(f"--{name.replace('_', '-')} must be {'>= 0' if name == 'train_sentences' else '>= 1'}, "
                         f"not {value}")
    if not LR.contains(args.lr):  # inf or nan would write an all-NaN bias
        parser.error(LR.message("--lr", args.lr, "give e.g. the default 0.05"))
    if args.device is not None and not (args.device == "cpu" or args.device.split(":")[0] == "cuda"):
        parser.error(f"--device must be cpu, cuda or cuda:N, not '{args.device}'")

    from fairseq_outlayers.tools.output_bias import default_device, fit_output_bias

    try:
        figures = fit_output_bias(args.checkpoint, args.out, data=args.data,
                                  train_sentences=args.train_sentences or None, epochs=args.epochs, lr=args.lr,
                                  max_tokens=args.max_tokens, device=args.device or default_device())
    except ValueError as e:
        parser.error(str(e))
    print(json.dumps(figures, indent=2))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
