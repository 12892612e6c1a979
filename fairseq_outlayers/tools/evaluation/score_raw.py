"""Score a checkpoint on raw test sets, each prepared with the training data's own tokeniser, case and BPE.

    python -m fairseq_outlayers.tools.evaluation.score_raw --checkpoint CKPT --data DATA_BIN \\
        --test-set flickr2017=test_2017_flickr.de,test_2017_flickr.en [NAME=SRC,REF ...] --out DIR

For each set: OUT/NAME/hyp.detok (the translations) and OUT/NAME/scores.json (sacreBLEU with its signature,
tokenised BLEU); one line per set on standard output. ``scripts/evaluate.sh --test-set`` calls this.
"""
import argparse
import json
import os
import sys

from fairseq_outlayers import value_checks as checks
from fairseq_outlayers.core.checkpoint_safety import check_decodable
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.outfiles import _inside, write_text


def _check_outputs(out: str, sets, inputs):
    """Each set's folder OUT/NAME, written into, holds none of the command's inputs and lies inside none: one
    line naming both before any work (nothing a command reads is written over)."""
    inputs = list(inputs) + [p for pair in sets.values() for p in pair]
    for name in sorted(sets):
        work = os.path.join(out, name)
        for given in inputs:
            if given and os.path.exists(given) and (_inside(given, work) or _inside(work, given)):
                raise OutlayersConfigError(f"--out '{out}': the folder of set '{name}' ('{work}') would write "
                                           f"among an input of this command ('{given}'); give another --out "
                                           "(nothing a command reads is written over)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairseq_outlayers.tools.evaluation.score_raw",
                                     description=__doc__.strip().splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", required=True, help="the data directory the checkpoint was trained on")
    parser.add_argument("--test-set", nargs="+", required=True, metavar="NAME=SRC_FILE,REF_FILE")
    parser.add_argument("--out", required=True, help="a folder per set is written here")
    parser.add_argument("--beam", type=checks.BEAM, default=5)
    parser.add_argument("--lenpen", type=checks.FINITE, default=1.0)
    parser.add_argument("--batch-size", type=checks.POSITIVE_INT, default=128)
    args = parser.parse_args(argv)
    from fairseq_outlayers.tools.evaluation.scoring import evaluate, parse_raw_sets
    from fairseq_outlayers.tools.rawtext import Preparation

    try:
        if not os.path.isfile(args.checkpoint):
            raise OutlayersConfigError(f"--checkpoint '{args.checkpoint}' does not exist")

        check_decodable(args.checkpoint)  # refused, damaged or NaN weights: before any set is prepared
        sets = parse_raw_sets(args.test_set)
        _check_outputs(args.out, sets, [args.checkpoint, args.data])
        prep = Preparation.from_data(args.data)
        for name, (src, ref) in sorted(sets.items()):
            work = os.path.join(args.out, name)
            scores, _, hyps, _ = evaluate(prep, args.data, args.checkpoint, work, ref, src, args.beam, args.lenpen,
                                       args.batch_size)
            scores.update(source=src, reference=ref, preparation=prep.describe(), generate=" ".join(
                scores["generate"]))
            write_text(os.path.join(work, "hyp.detok"), "".join(h + "\n" for h in hyps))
            write_text(os.path.join(work, "scores.json"), json.dumps(scores, indent=2) + "\n")
            print(f"{name}: sacreBLEU {scores['sacrebleu']:.2f} ({scores['sacrebleu_signature']}), tokenised BLEU "
                  f"{scores['tokenized_bleu']:.2f}, {scores['sentences']} sentences -> {work}/")
    except OutlayersConfigError as e:
        print(f"score_raw: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
