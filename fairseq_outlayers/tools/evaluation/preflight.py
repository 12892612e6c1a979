"""The checks ``scripts/evaluate.sh`` makes before it translates anything.

    python -m fairseq_outlayers.tools.evaluation.preflight --data DATA_BIN --subset test --out DIR \\
        [--checkpoint CKPT] [--raw-ref FILE] [--tok-ref FILE] [--lexicon FILE] [--rare-f1 FILE] \\
        [--test-set NAME=SRC_FILE,REF_FILE ...] [--outputs NAME ...] [--force]

* the ``--replace-unk`` lexicon is read as the replacement reads it, and must hold an entry;
* ``--raw-ref`` and ``--tok-ref`` have one line per sentence of the subset (counted in DATA_BIN's ``.idx``);
* each ``--test-set`` names two line-aligned UTF-8 files;
* no file the script writes (``--outputs``, relative to ``--out``) is a file it reads (the checkpoint, the
  references, the lexicon, the training text, the test sets, anything in DATA_BIN), with ``--force`` or not;
* the checkpoint is a fairseq checkpoint the safe loader reads, with finite weights.

One line on standard error and exit status 1 for the first problem found; nothing is printed otherwise.
"""
import argparse
import os
import sys

from fairseq_outlayers.core.checkpoint_safety import check_decodable
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.outfiles import is_input


def check(args):
    from fairseq_outlayers.tools.evaluation.scoring import parse_raw_sets, read_lines, subset_sentences
    from fairseq_outlayers.tools.evaluation.unknown_words import read_lexicon
    from fairseq_outlayers.tools.rawtext import read_text

    if args.lexicon:
        read_lexicon(args.lexicon)
    sentences = subset_sentences(args.data, args.subset)
    for option, path in (("--raw-ref", args.raw_ref), ("--tok-ref", args.tok_ref)):
        if not path:
            continue
        lines = read_lines(path, option)
        if sentences is not None and len(lines) != sentences:
            raise OutlayersConfigError(f"{option} {path} has {len(lines)} lines but the {args.subset} split of "
                                       f"{args.data} has {sentences} sentences; give the reference of the same split "
                                       "(--subset)")
    sets = parse_raw_sets(args.test_set)
    for name, (src, ref) in sorted(sets.items()):
        a, b = read_text(src, "--test-set source"), read_text(ref, "--test-set reference")
        if len(a) != len(b):
            raise OutlayersConfigError(f"--test-set '{name}': {src} has {len(a)} lines but {ref} has {len(b)}; a "
                                       "test set's source and reference files must be line-aligned")
    inputs = [args.checkpoint, args.data, args.raw_ref, args.tok_ref, args.lexicon, args.rare_f1,
              *(f for pair in sets.values() for f in pair)]
    for name in args.outputs:
        path = os.path.join(args.out, name)
        given = is_input(path, inputs)
        if given is not None:
            raise OutlayersConfigError(f"{path} (an output) is also an input of this command ('{given}'); choose "
                                       "another --out DIR (--force never overwrites an input)")
    if args.checkpoint:  # last, as it reads the file: refused, damaged or NaN weights, before any translation
        check_decodable(args.checkpoint)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fairseq_outlayers.tools.evaluation.preflight",
                                description=__doc__.strip().splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--subset", default="test")
    p.add_argument("--out", required=True)
    p.add_argument("--checkpoint", default="")
    p.add_argument("--raw-ref", default="")
    p.add_argument("--tok-ref", default="")
    p.add_argument("--lexicon", default="")
    p.add_argument("--rare-f1", default="")
    p.add_argument("--test-set", nargs="*", default=[])
    p.add_argument("--outputs", nargs="*", default=[])
    p.add_argument("--prog", default="evaluate.sh")
    args = p.parse_args(argv)
    try:
        check(args)
    except OutlayersConfigError as e:
        print(f"{args.prog}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
