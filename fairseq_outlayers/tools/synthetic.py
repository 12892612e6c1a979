"""A synthetic parallel corpus: the fallback when no real data can be had, and the tests' tiny corpus.

The "translation" is learnable: the target is the source reversed, each word replaced by its own translation;
the first ``shared_words`` words are identical on both sides (like numbers or names), which gives a
word pairing a same-word-form category to find.

    python -m fairseq_outlayers.tools.synthetic --out DIR --src de --tgt en --splits train:29000 val:1014
"""
import argparse
import os
import random

from fairseq_outlayers import value_checks


def write_corpus(out_dir, splits, src="de", tgt="en", vocab=40, shared_words=4, seed=0, min_len=3, max_len=9):
    """``splits``: sequence of (name, number of sentences). Writes NAME.SRC / NAME.TGT under ``out_dir``."""
    rng = random.Random(seed)
    os.makedirs(out_dir, exist_ok=True)
    src_words = [f"s{i}" for i in range(vocab)]
    translate = {w: (w if i < shared_words else f"T{i}") for i, w in enumerate(src_words)}
    for split, n in splits:
        with open(os.path.join(out_dir, f"{split}.{src}"), "w", encoding="utf-8") as fs, \
                open(os.path.join(out_dir, f"{split}.{tgt}"), "w", encoding="utf-8") as ft:
            for _ in range(n):
                active = src_words[: rng.randint(vocab // 2, vocab)]  # a Zipf-like skew of frequencies
                sent = [rng.choice(active) for _ in range(rng.randint(min_len, max_len))]
                fs.write(" ".join(sent) + "\n")
                ft.write(" ".join(translate[w] for w in reversed(sent)) + "\n")
    return out_dir



def write_alignment(out_dir, split, path, src="de", tgt="en"):
    """The exact word alignment of a split of ``write_corpus`` as a Pharaoh ``i-j`` file: source word i is
    target word n-1-i (the target is the source reversed). For ``outlayers-pairing --aligner pharaoh``."""
    with open(os.path.join(out_dir, f"{split}.{src}"), encoding="utf-8") as fs, \
            open(os.path.join(out_dir, f"{split}.{tgt}"), encoding="utf-8") as ft, \
            open(path, "w", encoding="utf-8") as out:
        for a, b in zip(fs, ft):
            n = len(a.split())
            if len(b.split()) != n:
                raise ValueError(f"{out_dir}/{split}: a sentence pair of unequal lengths; not write_corpus output")
            out.write(" ".join(f"{i}-{n - 1 - i}" for i in range(n)) + "\n")
    return path

def main(argv=None):
    parser = argparse.ArgumentParser(description="write a synthetic parallel corpus")
    parser.add_argument("--out", required=True)
    parser.add_argument("--src", default="de")
    parser.add_argument("--tgt", default="en")
    parser.add_argument("--splits", nargs="+", default=["train:29000", "val:1014", "test:1000"],
                        help="NAME:SENTENCES pairs")
    parser.add_argument("--vocab", type=value_checks.POSITIVE_INT, default=2000)
    parser.add_argument("--seed", type=value_checks.NON_NEGATIVE_INT, default=0)
    args = parser.parse_args(argv)
    splits = []
    for item in args.splits:
        name, _, n = item.partition(":")
        if not (n.isascii() and n.isdigit()):
            parser.error(f"--splits item '{item}' is not NAME:SENTENCES (e.g. train:29000)")
        splits.append((name, int(n)))
    write_corpus(args.out, splits, args.src, args.tgt, vocab=args.vocab, seed=args.seed)


if __name__ == "__main__":
    main()
