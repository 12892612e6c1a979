#!/usr/bin/env python
"""Word F1 by training frequency for two or more systems side by side (the rare-word analysis of Kumar &
Tsvetkov 2019, Table 5 / Figure 2).

    python scripts/rare_word_f1.py --train work/multi30k/tok/train.en \\
        --ref work/multi30k/tok/test_2016_flickr.en \\
        --hyp softmax=work/results/softmax-word.seed1/test.hyp --hyp vmf=work/results/continuous-vmf.seed1/test.hyp

    # every seed of two ledger rows (detokenised hypotheses, gzipped or not): F1 per seed, the mean in the table
    python scripts/rare_word_f1.py --train work/multi30k/tok/train.en --ref work/multi30k/tok/test_2016_flickr.en \
        --lowercase --tokenize en --hyp "softmax=docs/results/runs/tiny-softmax.seed*.test2016.hyp*" \
        --hyp "fixed=docs/results/runs/tiny-fixed.seed*.test2016.hyp*"

Every file is tokenised text, one sentence per line, in the same tokenisation (the hypotheses as fairseq-generate
prints them after --remove-bpe; the reference and training text as the preparation script wrote them), except
that with --tokenize LANG the hypotheses are detokenised text (the ledger's) and are Moses-tokenised here as the
preparation script tokenises. A word's bucket is how often it occurs in --train (unseen, 1, 2, 3, 4, 5-9, 10-99,
100-999, 1000+); in each sentence a word matches min(count in hypothesis, count in reference) times; precision and
recall per bucket, F1 in percent. A system given several files (comma-separated or a glob pattern: its seeds) has
the mean F1 over them in the table and every seed's in the JSON. The last line counts the distinct words used
(the vocabulary usage of Shalev et al. 2021, Table 1). The table (markdown) goes to stdout and, with --output, to
a file; --json writes the numbers.
"""
import argparse
import glob
import json
import os
import sys
from collections import Counter

from fairseq_outlayers.tools.evaluation.score_translations import word_f1_by_frequency  # noqa: E402

from fairseq_outlayers.errors import OutlayersConfigError  # noqa: E402
from fairseq_outlayers.tools.evaluation.scoring import check_same_length  # noqa: E402
from fairseq_outlayers.outfiles import check_output_path, write_text  # noqa: E402


def read_lines(path, what, lowercase=False):
    from fairseq_outlayers.tools.evaluation.scoring import read_lines as read

    try:
        lines = read(path, what)
    except OutlayersConfigError as e:
        sys.exit(f"rare_word_f1.py: error: {e}")
    return [line.lower() for line in lines] if lowercase else lines


def parse_hyp(spec):
    """NAME=FILE[,FILE...] or FILE -> (name, [files]); a file given as a glob pattern is every match, sorted."""
    name, sep, paths = spec.partition("=")
    if not sep:
        name, paths = os.path.basename(os.path.dirname(os.path.abspath(spec))) or spec, spec
    files = []
    for path in paths.split(","):
        matches = sorted(glob.glob(path)) if glob.has_magic(path) else [path]
        if not matches:
            sys.exit(f"rare_word_f1.py: error: --hyp {path}: no file matches")
        files.extend(matches)
    return name, files


def f1_table(train_counts, refs, systems):
    """{system: per-bucket F1 (the mean over the system's files), with every file's F1 when there are several}
    and the markdown table with one F1 column per system (and the difference of the last two when there are two
    or more); ``systems`` is [(name, [hypotheses of one file, ...])]."""
    scores = {}
    for name, runs in systems:
        per_run = [word_f1_by_frequency(hyps, refs, train_counts) for hyps in runs]
        types = [len({w for line in hyps for w in line.split()}) for hyps in runs]
        if len(runs) == 1:
            scores[name] = dict(per_run[0], distinct_words=types[0])
            continue
        scores[name] = {bucket: {"f1": round(sum(r[bucket]["f1"] for r in per_run) / len(runs), 2),
                                 "f1_per_file": [r[bucket]["f1"] for r in per_run],
                                 "ref_words": first["ref_words"],
                                 "hyp_words_per_file": [r[bucket]["hyp_words"] for r in per_run]}
                        for bucket, first in per_run[0].items()}
        scores[name]["distinct_words"] = round(sum(types) / len(types), 1)
        scores[name]["distinct_words_per_file"] = types
    names = [name for name, _ in systems]
    runs = {name: len(r) for name, r in systems}
    head = ["training frequency", "reference words"] + [
        f"F1 {n}" + (f" (mean of {runs[n]})" if runs[n] > 1 else "") for n in names]
    if len(names) >= 2:
        head.append(f"{names[-1]} - {names[-2]}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for bucket, first in scores[names[0]].items():
        if not isinstance(first, dict):
            continue
        cells = [bucket, f"{first['ref_words']:,}"] + [f"{scores[n][bucket]['f1']:.2f}" for n in names]
        if len(names) >= 2:
            cells.append(f"{scores[names[-1]][bucket]['f1'] - scores[names[-2]][bucket]['f1']:+.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    used = [scores[n]["distinct_words"] for n in names]
    number = "{:,}".format if all(isinstance(u, int) for u in used) else "{:,.1f}".format
    cells = ["distinct words used", f"{len({w for line in refs for w in line.split()}):,}"] + [number(u) for u in used]
    if len(names) >= 2:
        cells.append(("+" if used[-1] >= used[-2] else "-") + number(abs(used[-1] - used[-2])))
    lines.append("| " + " | ".join(cells) + " |")
    return scores, "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--train", required=True, help="tokenised training target text (defines the buckets)")
    p.add_argument("--ref", required=True, help="tokenised reference translations")
    p.add_argument("--hyp", action="append", required=True, metavar="[NAME=]FILE[,FILE...]",
                   help="tokenised system output, one per system (repeat); several files or a glob pattern (quoted): "
                   "the system's seeds, F1 averaged over them")
    p.add_argument("--lowercase", action="store_true", help="lowercase the reference and hypotheses")
    p.add_argument("--tokenize", metavar="LANG", help="the hypotheses are detokenised (e.g. the ledger's): "
                   "Moses-tokenise them in LANG as the preparation script does")
    p.add_argument("--output", help="also write the markdown table here")
    p.add_argument("--json", help="write the per-bucket numbers here")
    p.add_argument("--force", action="store_true", help="overwrite --output / --json if they exist")
    args = p.parse_args(argv)
    inputs = [args.train, args.ref] + [f for spec in args.hyp for f in parse_hyp(spec)[1]]
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
    tokenise = None
    if args.tokenize:
        from sacremoses import MosesTokenizer

        tokeniser = MosesTokenizer(lang=args.tokenize)
        tokenise = lambda line: tokeniser.tokenize(line, return_str=True, escape=True)  # noqa: E731
    systems = []
    for spec in args.hyp:
        name, paths = parse_hyp(spec)
        runs = []
        for path in paths:
            hyps = read_lines(path, "--hyp")
            try:
                check_same_length(path, hyps, "--hyp", refs, f"--ref {args.ref} has")
            except OutlayersConfigError as e:
                sys.exit(f"rare_word_f1.py: error: {e}")
            hyps = [tokenise(h) for h in hyps] if tokenise else hyps
            runs.append([h.lower() for h in hyps] if args.lowercase else hyps)
        systems.append((name, runs))
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
