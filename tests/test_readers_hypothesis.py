"""Property-based tests (hypothesis) of every file reader and the command-line argument checks.

Each reader gets valid files corrupted at random -- truncated, bytes replaced, lines dropped or repeated, wrong
types, wrong counts, Latin-1 bytes, empty -- and must either raise the package's own ``OutlayersConfigError``
(one line naming the file) or return a result that is not silently different from the original: a truncated
file is either reported (error or warning) or read exactly as a prefix of the original. Readers are called
in-process; every test has a bounded number of examples so the module runs in well under a minute.
"""
import atexit
import os
import shutil
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.tools.evaluation.unknown_words import read_lexicon
from fairseq_outlayers.methods.shared_private.word_pairs import load_dictionary, read_pairing, read_parallel
from fairseq_outlayers.tools.pairing.alignment import read_pharaoh
from fairseq_outlayers.methods.continuous.target_vectors import load_target_table

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FEW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

WORDS = ["the", "house", "cat", "is", "red", "a", "dog", "Berlin", "gift", "poison"]
DICT_TEXT = "".join(f"{w} {20 - k}\n" for k, w in enumerate(WORDS))


_DIR = tempfile.mkdtemp(prefix="outlayers-hypothesis-")
atexit.register(shutil.rmtree, _DIR, True)


def _tmp(data: bytes, name: str) -> str:
    path = os.path.join(_DIR, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _dictionary():
    from fairseq.data import Dictionary

    d = Dictionary()
    for w in WORDS:
        d.add_symbol(w)
    return d


# -------------------------------------------------------------------------------------------------------------
# corruption strategies shared by the readers

@st.composite
def corrupted(draw, original: bytes):
    """(kind, bytes): one random corruption of a valid file."""
    kind = draw(st.sampled_from(["truncate", "replace_byte", "drop_line", "repeat_line", "latin1", "empty",
                                 "insert_token", "swap_lines"]))
    lines = original.split(b"\n")
    if kind == "truncate":
        return kind, original[: draw(st.integers(0, len(original)))]
    if kind == "replace_byte":
        pos = draw(st.integers(0, len(original) - 1))
        return kind, original[:pos] + bytes([draw(st.integers(0, 255))]) + original[pos + 1:]
    if kind == "drop_line":
        k = draw(st.integers(0, len(lines) - 1))
        return kind, b"\n".join(lines[:k] + lines[k + 1:])
    if kind == "repeat_line":
        k = draw(st.integers(0, len(lines) - 1))
        return kind, b"\n".join(lines[:k + 1] + lines[k:])
    if kind == "latin1":
        k = draw(st.integers(0, len(lines) - 1))
        return kind, b"\n".join(lines[:k] + [lines[k] + "\xe9".encode("latin-1")] + lines[k + 1:])
    if kind == "empty":
        return kind, draw(st.sampled_from([b"", b"\n", b"\n\n  \n"]))
    if kind == "insert_token":
        k = draw(st.integers(0, len(lines) - 1))
        token = draw(st.sampled_from([b"x", b"nan", b"-1", b"1e999", b"\t", b"||| ", b"0", b"12 300"]))
        return kind, b"\n".join(lines[:k] + [token + b" " + lines[k]] + lines[k + 1:])
    i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
    lines[i], lines[j] = lines[j], lines[i]
    return kind, b"\n".join(lines)


def _prefix_lines(data: bytes, original: bytes) -> bool:
    """``data`` is the original cut at a line end (possibly without its final newline)."""
    return original.startswith(data) and (data == original or original[len(data):len(data) + 1] == b"\n"
                                          or data.endswith(b"\n"))


# -------------------------------------------------------------------------------------------------------------
# vectors, text format

VEC_ROWS = [(w, np.round(np.random.default_rng(k).normal(size=4), 4)) for k, w in enumerate(WORDS[:8] + ["zebra"])]
VEC_TEXT = (f"{len(VEC_ROWS)} 4\n" + "".join(w + " " + " ".join(f"{x:.4f}" for x in v) + "\n"
                                              for w, v in VEC_ROWS)).encode()


def _vectors(path):
    return load_target_table(_dictionary(), path, min_coverage=0.0)


@FAST
@given(corrupted(VEC_TEXT))
@example(("drop_line", VEC_TEXT[:VEC_TEXT.rindex(b"zebra")]))  # the last vector line missing
def test_vector_text_reader(case):
    kind, data = case
    path = _tmp(data, "v.vec")
    try:
        table = _vectors(path)
    except OutlayersConfigError as e:
        assert path in str(e) and "\n" not in str(e)
        return
    assert table.table.shape == (len(_dictionary()), table.report.dim)
    assert np.isfinite(table.table.numpy()).all()
    if data != VEC_TEXT and kind in ("truncate", "drop_line", "repeat_line") and data.strip():
        # fewer or more vector lines than the header announces: always reported
        body = [x for x in data.split(b"\n")[1:] if x.strip()]
        if len(body) != len(VEC_ROWS) and data.split(b"\n")[0] == b"9 4":
            assert table.report.warnings, data


@FEW
@given(st.integers(0, 12), st.integers(1, len(WORDS)))
def test_vector_header_counts_always_checked(stated, actual):
    rows = "".join(f"{w} 1 {k} 0\n" for k, w in enumerate(WORDS[:actual]))
    table = _vectors(_tmp(f"{stated} 3\n{rows}".encode(), "v.vec"))
    assert bool(table.report.warnings) == (stated != actual)


@FEW
@given(st.data())
def test_vector_binary_reader(data):
    gensim = pytest.importorskip("gensim")
    kv = gensim.models.KeyedVectors(vector_size=4)
    kv.add_vectors([w for w, _ in VEC_ROWS], np.stack([v for _, v in VEC_ROWS]).astype(np.float32))
    path = os.path.join(_DIR, "v.bin")
    kv.save_word2vec_format(path, binary=True)
    original = open(path, "rb").read()
    kind, corrupt = data.draw(corrupted(original))
    with open(path, "wb") as f:
        f.write(corrupt)
    try:
        table = _vectors(path)
    except OutlayersConfigError as e:
        assert path in str(e) and "\n" not in str(e)
        return
    assert np.isfinite(table.table.numpy()).all()


# -------------------------------------------------------------------------------------------------------------
# pairing files

PAIRS = [("lm", "Haus", "house", "0.5"), ("lm", "Katze", "cat", "0.9"), ("wf", "Berlin", "Berlin", "1"),
         ("ur", "rot", "red", "0")]
PAIRING_TEXT = ("\n".join([
    "# fairseq_outlayers shared-private pairing, format 1",
    f"# source-dictionary: sha256={'a' * 64} symbols=12", f"# target-dictionary: sha256={'b' * 64} symbols=12",
    "# made-with: aligner=pharaoh-file", "# counts: lm=2 wf=1 ur=1 unpaired-source=0 unpaired-target=0",
    "# columns: category, source token, target token, A(y|x) (tab-separated)"]
    + ["\t".join(p) for p in PAIRS]) + "\n").encode()


@FAST
@given(corrupted(PAIRING_TEXT))
@example(("truncate", PAIRING_TEXT[:PAIRING_TEXT.rindex(b"\nur")]))  # cut at a line end: one pair fewer
def test_pairing_reader(case):
    kind, data = case
    path = _tmp(data, "pairs.txt")
    try:
        pairing = read_pairing(path)
    except OutlayersConfigError as e:
        assert path in str(e) and "\n" not in str(e)
        return
    got = [(p.category, p.src, p.tgt) for p in pairing.pairs]
    assert all(0.0 <= p.score <= 1.0 for p in pairing.pairs)
    if kind in ("truncate", "drop_line", "repeat_line", "empty"):
        # never a silently smaller or larger pairing: the same pairs (the cut fell in a header or a score)
        assert sorted(got) == sorted((c, s, t) for c, s, t, _ in PAIRS), data


@FEW
@given(st.lists(st.tuples(st.sampled_from(["lm", "wf", "ur"]), st.sampled_from(WORDS), st.sampled_from(WORDS),
                          st.floats(allow_nan=True, allow_infinity=True)), max_size=6))
def test_pairing_reader_on_generated_files(rows):
    head = PAIRING_TEXT.decode().split("\n")[:6]
    text = "\n".join(head + [f"{c}\t{s}\t{t}\t{a}" for c, s, t, a in rows]) + "\n"
    path = _tmp(text.encode(), "pairs.txt")
    try:
        pairing = read_pairing(path)
    except OutlayersConfigError:
        return
    assert all(0.0 <= p.score <= 1.0 for p in pairing.pairs) and pairing.pairs


# -------------------------------------------------------------------------------------------------------------
# lexicons

LEXICON_TEXT = b"Haus\thouse\t12\t0.800000\nKatze\tcat\t7\t0.700000\nrot\tred\t3\t0.500000\n"
LEXICON = {"Haus": "house", "Katze": "cat", "rot": "red"}


@FAST
@given(corrupted(LEXICON_TEXT))
@example(("truncate", LEXICON_TEXT[:LEXICON_TEXT.index(b"\tcat") + 3]))  # '...Katze<TAB>ca': a cut target word
def test_lexicon_reader(case):
    kind, data = case
    path = _tmp(data, "lex.txt")
    try:
        lex = read_lexicon(path)
    except OutlayersConfigError as e:
        assert path in str(e) and "\n" not in str(e)
        return
    # a cut-short file is read as whole lines of the original, or refused (a cut inside the very first line is
    # not detectable: 'source target' without a line end is a valid two-column lexicon)
    if kind == "truncate" and b"\n" in data:
        assert all(LEXICON.get(x) == y for x, y in lex.items()), (data, lex)


# -------------------------------------------------------------------------------------------------------------
# alignment input: the parallel text and a Pharaoh file

SRC_TEXT = b"das Haus ist rot\ndie Katze\nBerlin\n"
TGT_TEXT = b"the house is red\nthe cat\nBerlin\n"
PHARAOH = b"0-0 1-1 2-2 3-3\n0-0 1-1\n0-0\n"


@FAST
@given(corrupted(SRC_TEXT), corrupted(TGT_TEXT))
def test_parallel_text_reader(src_case, tgt_case):
    s, t = _tmp(src_case[1], "train.de"), _tmp(tgt_case[1], "train.en")
    try:
        pairs = list(read_parallel(s, t))
    except OutlayersConfigError as e:
        assert (s in str(e) or t in str(e)) and "\n" not in str(e)
        return
    assert all(isinstance(a, list) and isinstance(b, list) for a, b in pairs)
    assert all("|||" not in a and "|||" not in b for a, b in pairs)


@FAST
@given(corrupted(PHARAOH))
def test_pharaoh_reader(case):
    path = _tmp(case[1], "align.txt")
    corpus = [(x.split(), y.split()) for x, y in zip(SRC_TEXT.decode().splitlines(), TGT_TEXT.decode().splitlines())]
    try:
        linked = list(read_pharaoh(path, iter(corpus)))
    except OutlayersConfigError as e:
        assert path in str(e) and "\n" not in str(e)
        return
    assert len(linked) == len(corpus)
    for src, tgt, links in linked:
        assert all(0 <= i < len(src) and 0 <= j < len(tgt) for i, j in links)


# -------------------------------------------------------------------------------------------------------------
# dictionaries

@FAST
@given(corrupted(DICT_TEXT.encode()))
def test_dictionary_reader(case):
    kind, data = case
    path = _tmp(data, "dict.en.txt")
    try:
        d = load_dictionary(path)
    except OutlayersConfigError as e:
        assert path in str(e) and "\n" not in str(e)
        return
    assert len(d) >= d.nspecial


# -------------------------------------------------------------------------------------------------------------
# command-line argument checks: a one-line error (exit 1 or argparse's exit 2) or success, never a traceback

ANY_NUMBER = st.one_of(st.integers(-5, 5).map(str), st.floats(allow_nan=True, allow_infinity=True).map(str),
                       st.sampled_from(["", "x", "1e999", "-0", "0x10", " 3"]))


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    paths = {}
    for name, data in (("train.de", SRC_TEXT), ("train.en", TGT_TEXT), ("align.txt", PHARAOH)):
        paths[name] = str(d / name)
        with open(paths[name], "wb") as f:
            f.write(data)
    from fairseq.data import Dictionary

    for lang, text in (("de", SRC_TEXT), ("en", TGT_TEXT)):
        dic = Dictionary()
        for w in text.decode().split():
            dic.add_symbol(w)
        paths[f"dict.{lang}.txt"] = str(d / f"dict.{lang}.txt")
        dic.save(paths[f"dict.{lang}.txt"])
    paths["dir"] = str(d)
    return paths


def _run_cli(main, argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse
        rc = e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if rc not in (0, None):
        assert rc in (1, 2), rc
        assert [x for x in err.splitlines() if "error" in x], err
    return rc


@FEW
@given(option=st.sampled_from(["--threshold", "--iterations", "--report-dim"]), value=ANY_NUMBER,
       out=st.sampled_from(["new", "missing-dir", "input"]))
def test_pairing_cli_arguments(small_corpus, capsys, option, value, out):
    from fairseq_outlayers.tools.pairing.__main__ import main

    p = small_corpus
    target = {"new": os.path.join(_DIR, "p.txt"),
              "missing-dir": os.path.join(p["dir"], "nope", "p.txt"), "input": p["train.de"]}[out]
    argv = ["--src-text", p["train.de"], "--tgt-text", p["train.en"], "--src-dict", p["dict.de.txt"],
            "--tgt-dict", p["dict.en.txt"], "--aligner", "pharaoh", "--alignment", p["align.txt"], "-o", target,
            "--force", option, value]
    rc = _run_cli(main, argv, capsys)
    if out != "new":
        assert rc in (1, 2)
    assert open(p["train.de"], "rb").read() == SRC_TEXT


@FEW
@given(option=st.sampled_from(["--min-count", "--iterations"]), value=ANY_NUMBER)
def test_lexicon_cli_arguments(small_corpus, capsys, option, value):
    from fairseq_outlayers.tools.pairing.lexicon import main

    p = small_corpus
    out = os.path.join(_DIR, "lex.txt")
    _run_cli(main, ["--src-text", p["train.de"], "--tgt-text", p["train.en"], "--aligner", "pharaoh",
                    "--alignment", p["align.txt"], "-o", out, option, value], capsys)


@FEW
@given(value=ANY_NUMBER)
def test_vectors_cli_arguments(small_corpus, capsys, value):
    from fairseq_outlayers.tools.vectors import main

    vec = _tmp(VEC_TEXT, "v.vec")
    _run_cli(main, ["report", small_corpus["dict.en.txt"], vec, "--min-coverage", value], capsys)


@FEW
@given(option=st.sampled_from(["--dim", "--window", "--epochs", "--min-count", "--min-n", "--max-n", "--negative"]),
       value=ANY_NUMBER)
@example(option="--dim", value="0")
@example(option="--dim", value="-3")
def test_train_target_vectors_cli_arguments(small_corpus, capsys, monkeypatch, option, value):
    """Every argument check runs before training (gensim is a stub that fails if training starts)."""
    import importlib.util
    import types

    models = types.ModuleType("gensim.models")

    class Trained(Exception):
        pass

    def train(*args, **kwargs):
        raise Trained

    models.FastText = models.Word2Vec = train
    monkeypatch.setitem(sys.modules, "gensim.models", models)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("ttv", os.path.join(root, "scripts", "train_target_vectors.py"))
    ttv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ttv)
    out = os.path.join(_DIR, "ttv.vec")
    try:
        ttv.main(["--input", small_corpus["train.en"], "--output", out, option, value])
    except Trained:  # the arguments were valid: training would start
        assert int(value) >= 1 or option == "--max-n", (option, value)
        return
    except SystemExit as e:
        assert e.code == 2 or (isinstance(e.code, str) and e.code.startswith("error: ") and "\n" not in e.code)
    assert "Traceback" not in capsys.readouterr().err
    assert not os.path.exists(out)
