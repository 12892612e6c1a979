#!/usr/bin/env python
"""Train target-language word vectors for ``--output-layer continuous`` (Kumar & Tsvetkov 2019) with gensim.

The paper uses word2vec or fastText vectors (m = 300) trained on large monolingual corpora; fastText was
better (Table 1). Pretrained vectors cannot be downloaded everywhere, so this script trains them on any
tokenised text -- the target side of the training corpus, ideally plus more monolingual text of the same
tokenisation -- and writes the word2vec/fastText text format (``.vec``) that ``--target-vectors`` reads.

    python scripts/train_target_vectors.py --input train.tok.en [--input mono.tok.en] --output en.vec \\
        [--algorithm fasttext|word2vec] [--dim 300] [--dict data-bin/dict.en.txt]

With ``--algorithm fasttext --dict DICT`` every word of the fairseq dictionary gets a vector (words rarer than
``--min-count`` from their character n-grams), so coverage is complete. Every sentence ends with fairseq's
``</s>`` while training (``--no-eos`` to leave it out), so the end of a sentence has a vector learned from its
contexts, like any word, rather than an arbitrary direction the decoder has to learn to hit. With ``--workers 1``
the file is the same on every run and, since the OpenBLAS kernel gensim's arithmetic runs on is pinned
(``--blas-core``), on every x86-64 machine with AVX2 and the same gensim/numpy/scipy versions. Needs
``pip install gensim``.
"""
import argparse
import collections
import logging
import os
import re
import sys
import time

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.textfiles import text_lines


EOS = "</s>"  # fairseq's end-of-sentence symbol


def read_sentences(paths, eos=EOS):
    """A re-iterable corpus streamed from disk (gensim makes several passes); with ``eos`` every sentence ends
    with that symbol, so the end of a sentence gets a vector learned from the words that precede it."""
    class Corpus:
        def __iter__(self):
            for path in paths:
                for _, line in text_lines(path):
                    words = line.split()
                    if words:
                        yield words + [eos] if eos else words

    return Corpus()


def _lines(path, option):
    """(line number, line) of an input file, one at a time; a line that is not UTF-8 ends the script in one line."""
    try:
        yield from text_lines(path, "convert the file to UTF-8 first (e.g. iconv -f latin1 -t utf-8)", option)
    except OutlayersConfigError as e:
        sys.exit(f"error: {e}")


def check_input(path, counts=None):
    """Read an --input file once before training: every line UTF-8, at least one word; returns its line count.
    ``counts`` (a Counter), when given, is updated with the file's word counts."""
    if not os.path.isfile(path):
        sys.exit(f"error: --input {path}: no such file")
    words = lines = 0
    for lines, line in _lines(path, "--input"):
        tokens = line.split()
        words += len(tokens)
        if counts is not None:
            counts.update(tokens)
    if words == 0:
        sys.exit(f"error: --input {path} is empty (no words); give tokenised text, one sentence per line")
    return lines


#: gensim's FastText default: character n-grams are hashed into this many vectors
FASTTEXT_BUCKETS = 2_000_000


def check_memory(args, counts):
    """Refuse a --dim whose vectors would not fit in memory (before gensim allocates them): float32 vectors of the
    words kept (input and output weights; fastText also its n-gram buckets)."""
    from fairseq_outlayers.value_checks import check_fits

    kept = sum(1 for c in counts.values() if c >= args.min_count) + (0 if args.no_eos else 1)
    if args.algorithm == "fasttext":
        per_unit, what = 4 * (3 * kept + FASTTEXT_BUCKETS), f"{kept:,d} words and {FASTTEXT_BUCKETS:,d} n-gram buckets"
    else:
        per_unit, what = 4 * 2 * kept, f"{kept:,d} words (input and output vectors)"
    try:
        check_fits("--dim", args.dim, per_unit, what, "use --dim 300 (the paper's) or a few hundred")
    except OutlayersConfigError as e:
        sys.exit(f"error: {e}")


def dictionary_words(path):
    if not os.path.isfile(path):
        sys.exit(f"error: --dict {path}: no such file")
    words, seen = [], set()
    for n, line in _lines(path, "--dict"):
        line = line.rstrip("\r\n")
        # as fairseq's Dictionary.add_from_file reads it: 'word count', optionally '#fairseq:overwrite'
        word, _, count = line.rpartition(" ")
        overwrite = count == "#fairseq:overwrite"
        if overwrite:
            word, _, count = word.rpartition(" ")
        if not word or not count.isdigit():
            sys.exit(f"error: --dict {path} line {n}: expected 'word count' (a fairseq dict.*.txt, as "
                     f"fairseq-preprocess writes it), got {line[:60]!r}; --dict takes the dictionary, not "
                     "training text (that goes to --input)")
        if word in seen and not overwrite:
            sys.exit(f"error: --dict {path} line {n}: the word {word!r} is listed a second time; a fairseq "
                     "dictionary lists each word once (is it training text? that goes to --input)")
        seen.add(word)
        words.append(word)
    if not words:
        sys.exit(f"error: --dict {path} is empty; give the fairseq dict.*.txt of the target side")
    return words


#: the OpenBLAS kernel pinned by default: AVX2 + FMA, which nearly every x86-64 CPU since 2013 has. The Multi30k
#: vectors of the ledger's continuous table (digest ed9c82a1aad9bffd) come out of it on any such machine.
PORTABLE_CORE = "Haswell"


def _cpu_flags():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def pin_blas_core(core, environ=os.environ, loaded=None):
    """Set OPENBLAS_CORETYPE to ``core`` for the OpenBLAS that numpy/scipy load next, so gensim's dot products
    round the same on every machine; returns what the run uses, in words. Not pinned: ``core`` 'native', a value
    already in the environment, a CPU without AVX2/FMA (``PORTABLE_CORE`` would not run there), or OpenBLAS already
    loaded in this process (``loaded``: the names of the loaded modules, sys.modules by default)."""
    loaded = sys.modules if loaded is None else loaded
    if environ.get("OPENBLAS_CORETYPE"):
        return f"{environ['OPENBLAS_CORETYPE']} (OPENBLAS_CORETYPE from the environment)"
    if core == "native":
        return "OpenBLAS's choice for this CPU (--blas-core native: vectors of this machine)"
    if "numpy" in loaded or "scipy" in loaded:
        print(f"warning: numpy was loaded before --blas-core {core} could be set; the vectors use OpenBLAS's "
              "kernel for this CPU (run the script as a command, or set OPENBLAS_CORETYPE)", file=sys.stderr)
        return "OpenBLAS's choice for this CPU (loaded before it could be pinned)"
    if core == PORTABLE_CORE and not {"avx2", "fma"} <= _cpu_flags():
        print(f"warning: this CPU lacks AVX2/FMA, so --blas-core {core} cannot run; the vectors use OpenBLAS's "
              "kernel for this CPU and may differ from other machines'", file=sys.stderr)
        return "OpenBLAS's choice for this CPU (no AVX2/FMA)"
    environ["OPENBLAS_CORETYPE"] = core
    return f"{core} (pinned)"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--input", action="append", required=True,
                   help="tokenised text, one sentence per line (repeat for several files)")
    p.add_argument("--output", required=True, help="vectors in the .vec text format")
    p.add_argument("--algorithm", choices=["fasttext", "word2vec"], default="fasttext")
    p.add_argument("--dim", type=int, default=300, help="vector size m (the paper: 300)")
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--min-count", type=int, default=1, help="ignore rarer words while training")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--cbow", action="store_true", help="CBOW instead of skip-gram")
    p.add_argument("--negative", type=int, default=5, help="negative samples")
    p.add_argument("--min-n", type=int, default=3, help="fastText: shortest character n-gram")
    p.add_argument("--max-n", type=int, default=6, help="fastText: longest character n-gram")
    p.add_argument("--dict", help="fairseq target dictionary: also write a vector for every word in it "
                   "(fastText builds unseen words from n-grams; word2vec can only report them)")
    p.add_argument("--no-eos", action="store_true",
                   help=f"do not append {EOS} to every sentence (then {EOS} gets no trained vector and the model "
                   "uses a fixed random unit vector for it)")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                   help="training threads (default: cores - 1); 1 gives the same vectors on every run, and on every "
                   "x86-64 machine with AVX2 and the same gensim/numpy/scipy versions with the pinned --blas-core; "
                   "more threads are faster and make every run differ")
    p.add_argument("--blas-core", default=PORTABLE_CORE,
                   help="the OpenBLAS kernel gensim's vector arithmetic runs on (OPENBLAS_CORETYPE): OpenBLAS "
                   "otherwise picks one per CPU (AVX-512, AVX2, ...) and their roundings differ, so the same command "
                   f"gives other vectors on another machine; {PORTABLE_CORE} (AVX2) runs on nearly every x86-64 CPU "
                   "of the last decade and is used where the CPU has AVX2 and FMA; 'native' leaves OpenBLAS's "
                   "choice. An OPENBLAS_CORETYPE already set in the environment wins")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    args = p.parse_args(argv)
    blas_core = pin_blas_core(args.blas_core)  # before anything loads numpy or scipy
    for name in ("dim", "window", "epochs", "negative", "min_n", "workers"):
        if getattr(args, name) < 1:
            sys.exit(f"error: --{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.min_count < 1:
        sys.exit(f"error: --min-count must be at least 1, got {args.min_count}")
    if args.max_n < args.min_n:
        sys.exit(f"error: --max-n ({args.max_n}) must be at least --min-n ({args.min_n})")
    from fairseq_outlayers.outfiles import atomic_write, check_output_path

    try:
        check_output_path(args.output, args.force, inputs=args.input + [args.dict], option="--output")
    except OutlayersConfigError as e:
        sys.exit(f"error: {e}")
    counts = collections.Counter()
    for path in args.input:
        check_input(path, counts)
    check_memory(args, counts)
    dict_words = dictionary_words(args.dict) if args.dict else []
    try:
        from gensim.models import FastText, Word2Vec
    except ImportError:
        sys.exit("error: this script needs gensim: pip install gensim")
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(message)s", level=logging.INFO)
    corpus = read_sentences(args.input, eos=None if args.no_eos else EOS)
    common = dict(vector_size=args.dim, window=args.window, min_count=args.min_count, workers=args.workers,
                  sg=0 if args.cbow else 1, negative=args.negative, epochs=args.epochs, seed=args.seed)
    start = time.time()
    try:
        if args.algorithm == "fasttext":
            model = FastText(sentences=corpus, min_n=args.min_n, max_n=args.max_n, **common)
        else:
            model = Word2Vec(sentences=corpus, **common)
    except RuntimeError as e:  # gensim: an empty vocabulary
        sys.exit(f"error: gensim could not train ({e}); no word occurs --min-count {args.min_count} times in "
                 f"{', '.join(args.input)}: lower --min-count or give more text")
    kv = model.wv
    words = list(kv.index_to_key)
    extra, unseen = [], []
    if args.dict:
        known = set(words)
        for w in dict_words:
            if w not in known and not re.match(r"^madeupword\d{4}$", w):  # fairseq's filler entries
                (extra if args.algorithm == "fasttext" else unseen).append(w)
    with atomic_write(args.output) as f:
        f.write(f"{len(words) + len(extra)} {args.dim}\n")
        for w in words + extra:
            f.write(w + " " + " ".join(f"{x:.6f}" for x in kv[w]) + "\n")
    print(f"wrote {len(words) + len(extra):,d} vectors of size {args.dim} to {args.output} "
          f"({args.algorithm}, {time.time() - start:.0f} s; {len(extra):,d} dictionary words from n-grams; "
          f"OpenBLAS kernel {blas_core})")
    if unseen:
        print(f"{len(unseen):,d} dictionary words have no vector (word2vec, --min-count {args.min_count}); "
              "they will share <unk>'s vector", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
