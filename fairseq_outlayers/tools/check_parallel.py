"""Check raw parallel text before it is tokenised: both sides exist, are UTF-8, and have the same line count.

    python -m fairseq_outlayers.tools.check_parallel DIR --src de --tgt en --splits train val test

Fails with one line naming the file (and the line, for bad UTF-8) and what to do.
"""
import argparse
import os
import sys

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.textfiles import text_lines


def count_lines_utf8(path):
    n = 0
    try:
        for n, _line in text_lines(path, "re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"):
            pass
    except OutlayersConfigError as e:
        raise SystemExit(f"check_parallel: {e}") from None
    return n


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--splits", nargs="+", required=True)
    args = parser.parse_args(argv)
    for split in args.splits:
        paths = [os.path.join(args.dir, f"{split}.{lang}") for lang in (args.src, args.tgt)]
        for p in paths:
            if not os.path.isfile(p):
                raise SystemExit(f"check_parallel: {p} does not exist; expected {split}.{args.src} and "
                                 f"{split}.{args.tgt} in {args.dir}")
        counts = [count_lines_utf8(p) for p in paths]
        if counts[0] != counts[1]:
            raise SystemExit(f"check_parallel: {paths[0]} has {counts[0]} lines but {paths[1]} has {counts[1]}; "
                             "the two sides must be line-aligned (one sentence pair per line)")
        if counts[0] == 0:
            raise SystemExit(f"check_parallel: {paths[0]} is empty")
        print(f"check_parallel: {split}: {counts[0]} sentence pairs, UTF-8, aligned", file=sys.stderr)


if __name__ == "__main__":
    main()
