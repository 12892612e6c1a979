#!/usr/bin/env python
"""Choose the beam-search score scale of a continuous-output model on the VALIDATION set.

Beam search scores each word by log_softmax(êᵀe(w)) = log_softmax(κ·cos(ê, e(w))) for a vMF model, or by
log_softmax(s·cos) with ``--continuous-score-scale s``. A model trained with the released vMF loss keeps κ near
10, which makes those scores flat: beam 5 then scores below nearest-neighbour decoding (beam 1). This script
decodes the validation subset once per candidate scale (``none`` = the model's own κ; a number s = the fixed
scale, passed to fairseq-generate as ``--model-overrides "{'continuous_score_scale': s}"``) and length penalty,
scores each with sacreBLEU against the raw validation references, and writes a table; the best setting is then
used on the test set. It never reads test data.

    python scripts/tune_continuous_decoding.py --checkpoint work/vmf-sweep/released.seed1/checkpoint_last.pt \\
        --data-bin work/multi30k/data-bin/de-en-word --raw-ref work/multi30k/raw/val.en --lowercase \\
        --beam 5 --scales none 10 20 40 --lenpens 1.0 -o work/tune-released.seed1.json
"""
import argparse
import json
import os
import sys
import tempfile

from fairseq_outlayers import value_checks
from fairseq_outlayers.core.checkpoint_safety import check_decodable
from fairseq_outlayers.tools.evaluation.scoring import score_subset
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.outfiles import atomic_write, check_output_path


def parse_scale(text):
    if text == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"scale '{text}' is neither 'none' nor a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"scale {text} must be > 0 (or 'none' for the model's own κ)")
    return value


def decode(args, scale, lenpen, work_dir):
    extra = [] if scale is None else ["--model-overrides", repr({"continuous_score_scale": scale})]
    name = f"valid.beam{args.beam}.scale{scale}.lenpen{lenpen}.hyp"
    scores = score_subset(args.data_bin, args.checkpoint, os.path.join(work_dir, name), args.raw_ref, args.beam,
                          lenpen, args.batch_size, args.subset, extra, lowercase=True if args.lowercase else None,
                          tgt=args.lang)
    return {"scale": scale, "lenpen": lenpen, "bleu": scores["sacrebleu"], "signature": scores["sacrebleu_signature"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data-bin", required=True)
    parser.add_argument("--raw-ref", required=True, help="raw (untokenised) references of --subset")
    parser.add_argument("--subset", default="valid", help="the subset to tune on (default valid; never test)")
    parser.add_argument("--lang", default="en", help="target language of the detokeniser (default en)")
    parser.add_argument("--lowercase", action="store_true", help="lowercase the references (the data was)")
    parser.add_argument("--beam", type=value_checks.BEAM, default=5)
    parser.add_argument("--scales", type=parse_scale, nargs="+", default=[None, 10.0, 20.0, 40.0],
                        help="'none' (the model's own κ) and/or fixed scales s > 0")
    parser.add_argument("--lenpens", type=value_checks.FINITE, nargs="+", default=[1.0])
    parser.add_argument("--batch-size", type=value_checks.POSITIVE_INT, default=128)
    parser.add_argument("-o", "--output", required=True, help="JSON table of the settings and their BLEU")
    parser.add_argument("--force", action="store_true", help="overwrite --output")
    args = parser.parse_args(argv)
    if args.subset.startswith("test"):
        parser.error(f"--subset {args.subset}: tune on validation data, never on the test set")
    for option, path in (("--checkpoint", args.checkpoint), ("--raw-ref", args.raw_ref)):
        if not os.path.isfile(path):
            parser.error(f"{option} '{path}' is not a file")
    if not os.path.isdir(args.data_bin):
        parser.error(f"--data-bin '{args.data_bin}' is not a directory")
    try:
        check_output_path(args.output, args.force, inputs=[args.checkpoint, args.raw_ref], option="-o")
    except OutlayersConfigError as e:
        parser.error(str(e))

    rows = []
    try:
        check_decodable(args.checkpoint)  # refused, damaged or NaN weights: one line before any decoding
        with tempfile.TemporaryDirectory(prefix="tune-continuous-") as work_dir:
            for lenpen in args.lenpens:
                for scale in args.scales:
                    row = decode(args, scale, lenpen, work_dir)
                    rows.append(row)
                    print(f"scale {'κ (model)' if scale is None else scale:>10}  lenpen {lenpen:4.2f}  "
                          f"{args.subset} BLEU {row['bleu']:.2f}", flush=True)
    except OutlayersConfigError as e:  # the checkpoint, or a decode that failed (e.g. an override it refuses)
        parser.exit(1, f"{parser.prog}: error: {e}\n")
    best = max(rows, key=lambda r: r["bleu"])
    result = {"checkpoint": args.checkpoint, "subset": args.subset, "beam": args.beam, "rows": rows, "best": best}
    with atomic_write(args.output) as f:
        json.dump(result, f, indent=2)
    scale = "the model's own κ (no override)" if best["scale"] is None else \
        f"--model-overrides \"{{'continuous_score_scale': {best['scale']:g}}}\""
    print(f"best on {args.subset}: BLEU {best['bleu']:.2f} with {scale}, --lenpen {best['lenpen']:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
