#!/usr/bin/env python
"""Word F1 by training frequency for two or more systems side by side (the rare-word analysis of Kumar &
Tsvetkov 2019, Table 5 / Figure 2).

    python scripts/rare_word_f1.py --train work/multi30k/tok/train.en \\
        --ref work/multi30k/tok/test_2016_flickr.en \\
        --hyp softmax=work/results/softmax-word.seed1/test.hyp --hyp vmf=work/results/continuous-vmf.seed1/test.hyp

Every file is tokenised text, one sentence per line, in the same tokenisation (the hypotheses as fairseq-generate
prints them after --remove-bpe; the reference and training text as the preparation script wrote them). A word's
bucket is how often it occurs in --train (unseen, 1, 2, 3, 4, 5-9, 10-99, 100-999, 1000+); in each sentence a
word matches min(count in hypothesis, count in reference) times; precision and recall per bucket, F1 in percent.
The table (markdown) goes to stdout and, with --output, to a file; --json writes the numbers.
"""
import argparse
import json
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from score_translations import word_f1_by_frequency  # noqa: E402

from fairseq_outlayers.errors import OutlayersConfigError  # noqa: E402
from fairseq_outlayers.outfiles import check_output_path, write_text  # noqa: E402


def read_lines(path, what, lowercase=False):
    if not os.path.isfile(path):
        sys.exit(f"rare_word_f1.py: error: {what} {path}: no such file")
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    return [line.lower() for line in lines] if lowercase else lines


def parse_hyp(spec):
    name, sep, path = spec.partition("=")
    if not sep:
        name, path = os.path.basename(os.path.dirname(os.path.abspath(spec))) or spec, spec
    return name, path


def f1_table(train_counts, refs, systems):
    """{system: word_f1_by_frequency(...)} and the markdown table with one F1 column per system (and the
    difference of the last two when there are two or more)."""
    scores = {name: word_f1_by_frequency(hyps, refs, train_counts) for name, hyps in systems}
    names = [name for name, _ in systems]
    head = ["training frequency", "reference words"] + [f"F1 {n}" for n in names]
    if len(names) >= 2:
        head.append(f"{names[-1]} - {names[-2]}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for bucket, first in scores[names[0]].items():
        cells = [bucket, f"{first['ref_words']:,}"] + [f"{scores[n][bucket]['f1']:.2f}" for n in names]
        if len(names) >= 2:
            cells.append(f"{scores[names[-1]][bucket]['f1'] - scores[names[-2]][bucket]['f1']:+.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return scores, "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--train", required=True, help="tokenised training target text (defines the buckets)")
    p.add_argument("--ref", required=True, help="tokenised reference translations")
    p.add_argument("--hyp", action="append", required=True, metavar="[NAME=]FILE",
                   help="tokenised system output, one per system (repeat)")
    p.add_argument("--lowercase", action="store_true", help="lowercase the reference and hypotheses")
    p.add_argument("--output", help="also write the markdown table here")
    p.add_argument("--json", help="write the per-bucket numbers here")
    p.add_argument("--force", action="store_true", help="overwrite --output / --json if they exist")
    args = p.parse_args(argv)
    inputs = [args.train, args.ref] + [parse_hyp(spec)[1] for spec in args.hyp]
    for option, path in (("--output", args.output), ("--json", args.json)):
        if path:
            try:  # before any reading: a missing directory, an existing file without --force, an input file
                check_output_path(path, args.force, inputs=inputs, option=option)
            except OutlayersConfigError as e:
                sys.exit(f"rare_word_f1.py: error: {e}")
    train_counts = Counter()
    for line in read_lines(args.train, "--train", args.lowercase):
        train_counts.update(line.split())
    refs = read_lines(args.ref, "--ref", args.lowercase)
    systems = []
    for spec in args.hyp:
        name, path = parse_hyp(spec)
        hyps = read_lines(path, "--hyp", args.lowercase)
        if len(hyps) != len(refs):
            sys.exit(f"rare_word_f1.py: error: --hyp {path} has {len(hyps)} lines but --ref {args.ref} has "
                     f"{len(refs)}; give the output for the same test set (all sentences, in order)")
        systems.append((name, hyps))
    if len({name for name, _ in systems}) != len(systems):
        sys.exit("rare_word_f1.py: error: two --hyp have the same name; name them NAME=FILE")
    scores, table = f1_table(train_counts, refs, systems)
    print(table)
    if args.output:
        write_text(args.output, table + "\n")
    if args.json:
        write_text(args.json, json.dumps(scores, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
