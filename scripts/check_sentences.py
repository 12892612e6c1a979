#!/usr/bin/env python3
"""Sentence lengths of the user documents: README.md at most 40 words a sentence; docs/*.md, the lab notebooks
(docs/notes/*.md) and the benchmark pages (docs/benchmarks/*.md) at most 60.

    python scripts/check_sentences.py                  # README.md, docs/*.md, notes and benchmarks, their limits
    python scripts/check_sentences.py --max 30 FILE    # any files, one limit
    python scripts/check_sentences.py --top 5          # also list each file's five longest sentences

Prints ``FILE:LINE: N words: the first words ...`` for every sentence over its limit and exits 1 if there is one.
Tables, code (fenced blocks, and a benchmark page's ``Command: `...``` line), headings and HTML comments are not
prose and are left out. A sentence ends at
``.``, ``?`` or ``!`` followed by a space and a capital, a digit, a quote, a bracket or a backtick, or at the end
of a paragraph or list item. Link targets ``[text](url)`` count as their text.
"""
import argparse
import glob
import os
import re
import sys
from typing import Iterator, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMITS = (("README.md", 40), ("docs/*.md", 60), ("docs/notes/*.md", 60), ("docs/benchmarks/*.md", 60))

_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_END = re.compile(r"(?<=[.?!])[*_)\"']*\s+(?=[A-Z0-9`\"'(\[*_])")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
#: a benchmark page's command line (its header, as the scripts write it): code, like a fenced block
_COMMAND = re.compile(r"^Command: `[^`]+`\.?\s*$")


def paragraphs(text: str) -> Iterator[Tuple[int, str]]:
    """(first line number, text) of every prose paragraph or list item."""
    buf: List[str] = []
    start = 0
    fence = None
    comment = False

    def flush():
        nonlocal buf
        if buf:
            yield start, " ".join(buf)
        buf = []

    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence):
                fence = None
            continue
        if comment:
            comment = "-->" not in stripped
            continue
        if stripped.startswith("```") or stripped.startswith("~~~"):
            yield from flush()
            fence = stripped[:3]
            continue
        if stripped.startswith("<!--"):
            yield from flush()
            comment = "-->" not in stripped
            continue
        if (not stripped or stripped.startswith("|") or stripped.startswith("#") or line.startswith("    ")
                or _COMMAND.match(line)):
            yield from flush()
            continue
        if _ITEM.match(line):
            yield from flush()
            stripped = _ITEM.sub("", line).strip()
        if not buf:
            start = lineno
        buf.append(stripped)
    yield from flush()


def sentences(text: str) -> Iterator[Tuple[int, int, str]]:
    """(line, word count, sentence) of every prose sentence of a Markdown text."""
    for lineno, para in paragraphs(text):
        para = _LINK.sub(r"\1", para)
        for sentence in _END.split(para):
            words = sentence.split()
            if words:
                yield lineno, len(words), sentence


def check(path: str, limit: int, top: int = 0) -> List[str]:
    with open(path, encoding="utf-8") as f:
        found = list(sentences(f.read()))
    rel = os.path.relpath(path, ROOT) if path.startswith(ROOT) else path
    out = [f"{rel}:{line}: {n} words (limit {limit}): {' '.join(s.split()[:12])} ..."
           for line, n, s in found if n > limit]
    if top:
        for line, n, s in sorted(found, key=lambda x: -x[1])[:top]:
            print(f"  {rel}:{line}: {n} words: {' '.join(s.split()[:10])} ...")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("files", nargs="*", help="Markdown files (default: README.md, docs/*.md, docs/notes/*.md "
                        "and docs/benchmarks/*.md)")
    parser.add_argument("--max", type=int, help="the limit for the files given (default: 40 for README.md, "
                        "60 for the others)")
    parser.add_argument("--top", type=int, default=0, help="also print each file's N longest sentences")
    args = parser.parse_args(argv)
    if args.files:
        jobs = [(f, args.max or (40 if os.path.basename(f) == "README.md" else 60)) for f in args.files]
    else:
        jobs = [(f, args.max or limit) for pattern, limit in LIMITS
                for f in sorted(glob.glob(os.path.join(ROOT, pattern)))]
    problems = []
    for path, limit in jobs:
        if not os.path.isfile(path):
            print(f"check_sentences: error: '{path}' is not a file", file=sys.stderr)
            return 2
        problems += check(path, limit, args.top)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} sentence(s) over the limit: split them (one idea a sentence)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
