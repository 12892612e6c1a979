"""The lexical dictionary for unknown-word replacement, built with fast_align.

A model with a closed target vocabulary (the word-level continuous outputs of Kumar & Tsvetkov 2019, or any
word-level baseline) writes ``<unk>`` for words outside it. The classic remedy (Luong et al. 2015, "Addressing
the rare word problem in neural machine translation"; Jean et al. 2015) replaces each generated ``<unk>`` by a
translation of the source unit the decoder attended to most, found in a lexical dictionary learned by a word
aligner on the training corpus, and copies the source word when the dictionary has no entry.

The lexicon (``python -m fairseq_outlayers.tools.pairing lexicon``) reuses the pairing tool's alignment backends
(``alignment.py``: fast_align through systran-align, or a Pharaoh file):

* links: fast_align in both directions symmetrised with grow-diag-final (``--direction both``, the default
  here), or the forward model only, or any Pharaoh file;
* c(x, y) counts the links between source unit x and target word y over the training corpus, where only
  target positions holding a *real word* count: not one of fairseq's special symbols, not a BPE piece (a
  token ending in the continuation marker ``@@``, or the last piece of a split word, i.e. a token after one
  ending in ``@@``). Source units are kept exactly as the model reads them (BPE pieces if the source is BPE'd),
  because fairseq's alignment points at those units; special symbols are left out;
* the entry of x is ``y* = argmax_y c(x, y)`` (ties: the target word more frequent in the corpus, then the
  alphabetically first), kept when ``c(x, y*) >= min_count``.

The file has one entry per line, ``x TAB y TAB c(x, y) TAB A(y|x)`` with ``A(y|x) = c(x, y) / Σ_y' c(x, y')``
over real-word targets; the replacement (and fairseq's ``utils.load_align_dict``) reads its first two columns.

The lexicon is used by the unknown-word replacement of ``outlayers-generate`` / ``outlayers-interactive
--replace-unk LEXICON`` and ``scripts/evaluate.sh --replace-unk LEXICON``; the replacement rule and the reading of
this file are in ``fairseq_outlayers/tools/evaluation/unknown_words.py``.
"""
import argparse
import os
import sys
from collections import Counter
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.outfiles import atomic_write, check_output_path
from fairseq_outlayers.tools.evaluation.unknown_words import BPE_MARKER
from fairseq_outlayers.tools.pairing.alignment import (add_aligner_options, check_aligner_available, read_pharaoh,
                                                      systran_links)
from fairseq_outlayers.methods.shared_private.word_pairs.corpus import load_dictionary, read_parallel

FAIRSEQ_SPECIALS = frozenset({"<s>", "<pad>", "</s>", "<unk>"})


# ---------------------------------------------------------------------------------------------------------
# building the lexicon


def is_special(token: str) -> bool:
    """fairseq's special symbols and the ``madeupwordNNNN`` fillers of ``--padding-factor``."""
    return token in FAIRSEQ_SPECIALS or (token.startswith("madeupword") and token[10:].isdigit())


def real_word_positions(tokens: Sequence[str], marker: str = BPE_MARKER) -> List[bool]:
    """For each token: is it a whole word (not special, not a BPE piece of a split word)?"""
    out, after_piece = [], False
    for t in tokens:
        piece = t.endswith(marker)
        out.append(not piece and not after_piece and not is_special(t))
        after_piece = piece
    return out


class Lexicon(dict):
    """{source unit: target word}, with the link counts behind each entry in ``details``:
    {source unit: (c(x, y*), A(y*|x))}."""

    def __init__(self, entries=(), details=None):
        super().__init__(entries)
        self.details: Dict[str, Tuple[int, float]] = dict(details or {})


def count_links(linked: Iterable[Tuple[List[str], List[str], List[Tuple[int, int]]]]
                ) -> Tuple[Counter, Counter, Dict[str, int]]:
    """c(x, y) over the links whose target is a real word, the corpus frequency of each real target word, and
    totals (sentences, links, kept links)."""
    pairs: Counter = Counter()
    target_freq: Counter = Counter()
    stats = {"sentences": 0, "links": 0, "kept_links": 0, "words": 0}
    for src, tgt, links in linked:
        real = real_word_positions(tgt)
        target_freq.update(t for t, r in zip(tgt, real) if r)
        stats["sentences"] += 1
        stats["links"] += len(links)
        stats["words"] += len(src) + len(tgt)
        for i, j in links:
            if real[j] and not is_special(src[i]):
                pairs[(src[i], tgt[j])] += 1
                stats["kept_links"] += 1
    return pairs, target_freq, stats


def lexicon_from_counts(pairs: Counter, target_freq: Counter, min_count: int = 1) -> Lexicon:
    """The most linked real target word of each source unit (ties: more frequent target, then alphabetical)."""
    if min_count < 1:
        raise OutlayersConfigError(f"--min-count must be at least 1, got {min_count}")
    best: Dict[str, Tuple[int, int, str]] = {}
    totals: Counter = Counter()
    for (x, y), c in pairs.items():
        totals[x] += c
        key = (-c, -target_freq[y], y)  # the smallest key wins
        if x not in best or key < best[x]:
            best[x] = key
    lex = Lexicon()
    for x, (neg_c, _, y) in best.items():
        c = -neg_c
        if c >= min_count:
            lex[x] = y
            lex.details[x] = (c, c / totals[x])
    return lex


def build_lexicon(linked, min_count: int = 1) -> Tuple[Lexicon, Dict[str, int]]:
    """Lexicon from an iterator of (source tokens, target tokens, links), links = [(i, j), ...]."""
    pairs, target_freq, stats = count_links(linked)
    lex = lexicon_from_counts(pairs, target_freq, min_count)
    stats["entries"] = len(lex)
    stats["most_links"] = max(pairs.values(), default=0)
    return lex, stats


def make_lexicon(src_text: str, tgt_text: str, aligner: str = "systran", alignment: Optional[str] = None,
                 direction: str = "both", iterations: int = 5, min_count: int = 1, log=None
                 ) -> Tuple[Lexicon, Dict[str, int]]:
    """The whole pipeline on a line-aligned training corpus (the text exactly as the model reads it)."""
    corpus = lambda: read_parallel(src_text, tgt_text)  # noqa: E731
    skipped: List[int] = []
    if aligner == "systran":
        linked = systran_links(corpus, direction=direction, iterations=iterations, log=log, skipped=skipped)
    elif aligner == "pharaoh":
        if not alignment:
            raise OutlayersConfigError("--aligner pharaoh needs --alignment FILE (Pharaoh 'i-j' links, one line "
                                       "per sentence pair)")
        linked = read_pharaoh(alignment, corpus(), log=log)
    else:
        raise OutlayersConfigError(f"--aligner must be 'systran' or 'pharaoh', not '{aligner}'")
    lex, stats = build_lexicon(linked, min_count)
    if skipped:
        stats["skipped"] = len(skipped)
    return lex, stats


def write_lexicon(path: str, lexicon: Lexicon, overwrite: bool = False):
    """``x TAB y TAB c(x, y) TAB A(y|x)`` per line, most linked source units first."""
    if os.path.exists(path) and not overwrite:
        raise OutlayersConfigError(f"'{path}' exists; choose another --out path or pass --force to overwrite it")
    order = sorted(lexicon, key=lambda x: (-lexicon.details.get(x, (0, 0.0))[0], x))
    with atomic_write(path) as f:
        for x in order:
            c, p = lexicon.details.get(x, (0, 0.0))
            f.write(f"{x}\t{lexicon[x]}\t{c}\t{p:.6f}\n")


# ---------------------------------------------------------------------------------------------------------
# command line: python -m fairseq_outlayers.tools.pairing lexicon


def build_parser():
    p = argparse.ArgumentParser(
        prog="outlayers-pairing lexicon",
        description="Build the lexical dictionary for --replace-unk (outlayers-generate / outlayers-interactive "
        "--replace-unk LEXICON, scripts/evaluate.sh --replace-unk LEXICON) from the training corpus with fast_align.")
    p.add_argument("--src-text", required=True, help="source side of the training corpus exactly as the model "
                   "reads it (tokenised; BPE'd if the model's source is BPE'd)")
    p.add_argument("--tgt-text", required=True, help="target side, line-aligned with --src-text (tokenised; "
                   "BPE pieces are never lexicon targets)")
    p.add_argument("-o", "--out", "--output", dest="out", required=True, help="lexicon file to write")

    add_aligner_options(p, direction="both")
    p.add_argument("--min-count", type=int, default=1,
                   help="keep an entry only when its source unit and target word are linked at least this "
                   "often (default: 1)")
    p.add_argument("--src-dict", help="the model's source dictionary (data-bin/dict.SRC.txt): check that "
                   "--src-text is in the model's units (most of its tokens must be in the dictionary)")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    return p


def check_source_units(src_text: str, src_dict_path: str, min_fraction: float = 0.5) -> float:
    """Fraction of --src-text tokens in the source dictionary; an error below ``min_fraction`` (the text is not
    in the units the model reads, e.g. words where the model reads BPE)."""
    if not os.path.isfile(src_text):
        raise OutlayersConfigError(f"source text '{src_text}' does not exist; pass the path of an existing file")
    d = load_dictionary(src_dict_path)
    known = total = 0
    with open(src_text, encoding="utf-8", errors="replace") as f:
        for line in f:
            for t in line.split():
                total += 1
                known += d.index(t) != d.unk()
    frac = known / total if total else 0.0
    if frac < min_fraction:
        raise OutlayersConfigError(
            f"only {100 * frac:.1f}% of the tokens of '{src_text}' are in '{src_dict_path}': the lexicon's source "
            "units must be the units the model reads; give the training source text as fairseq-preprocess saw it "
            "(e.g. after BPE)")
    return frac


def main(argv=None):
    args = build_parser().parse_args(argv)

    def log(msg):
        print(f"lexicon: {msg}", file=sys.stderr)

    try:
        if args.iterations < 1:
            raise OutlayersConfigError(f"--iterations must be at least 1, got {args.iterations}")
        check_output_path(args.out, args.force, option="--out",
                          inputs=(args.src_text, args.tgt_text, args.src_dict, args.alignment))

        check_aligner_available(args.aligner)
        if args.src_dict:
            frac = check_source_units(args.src_text, args.src_dict)
            log(f"{100 * frac:.1f}% of the source tokens are in {args.src_dict}")
        if args.min_count < 1:
            raise OutlayersConfigError(f"--min-count must be at least 1, got {args.min_count}")
        lex, stats = make_lexicon(args.src_text, args.tgt_text, aligner=args.aligner, alignment=args.alignment,
                                  direction=args.direction, iterations=args.iterations, min_count=args.min_count,
                                  log=log)
        if not lex:  # an empty lexicon replaces nothing: refused, not written
            raise OutlayersConfigError(
                f"no source unit is linked to a real target word --min-count {args.min_count} times or more (the "
                f"most linked pair has {stats['most_links']} of {stats['kept_links']} kept links, over "
                f"{stats['sentences']} sentence pairs); lower --min-count (at most {stats['most_links']} keeps an "
                "entry) or give a larger corpus; nothing written" if stats["most_links"] else
                f"no link of the alignment ends on a real target word ({stats['links']} links over "
                f"{stats['sentences']} sentence pairs); check the corpus and alignment; nothing written")
        write_lexicon(args.out, lex, overwrite=args.force)
    except OutlayersConfigError as e:
        print(f"fairseq_outlayers: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: {stats['entries']} source units with a translation, from {stats['sentences']} "
          f"sentence pairs ({stats['kept_links']} of {stats['links']} links end on a real target word)"
          + (f"; {stats['skipped']} sentence pair(s) got no links and were skipped" if stats.get("skipped") else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
