"""``outlayers-vectors`` (``python -m fairseq_outlayers.tools.vectors``): target word vectors for
``--output-layer continuous``::

    outlayers-vectors report DATA-BIN/dict.en.txt vectors.en.vec [--min-coverage 0.5]   # coverage, as training sees it
    outlayers-vectors random DATA-BIN/dict.en.txt random.en.300d.vec --dim 300 --seed 1  # random unit vectors
    outlayers-vectors export CHECKPOINT vectors.out.vec                                  # a trained model's word matrix
"""
import argparse
import sys

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.target_vectors import load_target_table
from fairseq_outlayers.tools.export_vectors import add_export_parser, export_target_vectors
from fairseq_outlayers.tools.random_vectors import add_random_parser, write_random_vectors
from fairseq_outlayers.value_checks import Range
from fairseq_outlayers.word_pairs.corpus import load_dictionary


def main(argv=None):
    parser = argparse.ArgumentParser(prog="outlayers-vectors",
                                     description="Target word vectors for --output-layer continuous.")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="align a vector file to a fairseq dictionary and print the coverage")
    rep.add_argument("dictionary", help="the target dictionary, e.g. data-bin/dict.en.txt")
    rep.add_argument("vectors", help="word2vec/fastText .vec text file, or a .bin model (needs gensim)")
    rep.add_argument("--min-coverage", type=Range(0, 1), default=0.5,
                     help="fail below this fraction of dictionary words with a vector (default: 0.5)")
    rep.add_argument("--center", action="store_true", help="centre the vectors as --target-vectors-center does")
    add_export_parser(sub)
    add_random_parser(sub)
    args = parser.parse_args(argv)
    try:
        print(_run(args))
    except OutlayersConfigError as e:
        print(f"fairseq_outlayers: error: {e}", file=sys.stderr)
        return 1
    return 0


def _run(args) -> str:
    """One subcommand; what it prints."""
    if args.command == "random":
        n = write_random_vectors(args.dictionary, args.output, args.dim, args.seed, args.force)
        return f"wrote {n:,} random unit vectors of size {args.dim} to {args.output}"
    if args.command == "export":
        n = export_target_vectors(args.checkpoint, args.output, args.matrix, args.data, args.force)
        return f"wrote {n:,} vectors to {args.output}"
    table = load_target_table(load_dictionary(args.dictionary), args.vectors, args.min_coverage, center=args.center)
    return "\n".join(table.report.lines())


if __name__ == "__main__":
    sys.exit(main())
