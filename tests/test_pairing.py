"""Word pairing of shared-private embeddings: the algorithm, A(y|x), the aligners, the file format, the tool."""
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.methods.shared_private.word_pairs import (index_maps, lambdas_from_string, load_dictionary, pair_words, read_pairing,
                                       read_parallel, write_pairing)
from fairseq_outlayers.tools.pairing import make_pairing
from fairseq_outlayers.tools.pairing.alignment import LexicalTable, estimate_probabilities, forward_viterbi, read_pharaoh
from fairseq_outlayers.tools.pairing.alignment import train_fast_align, write_fast_align_input
from harness import NO_ALIGNER

# --------------------------------------------------------------------------------------------------------
# the algorithm on hand-written probabilities


def test_pair_words_categories_order_and_threshold():
    src = [("der", 50), ("gift", 20), ("geschenk", 10), ("3", 8), ("berlin", 5), ("laden", 3), ("sonnenuhr", 2),
           ("xyz", 1)]
    tgt = [("the", 60), ("gift", 15), ("poison", 12), ("3", 9), ("berlin", 4), ("report", 3), ("fiehlt", 2)]
    probs = {
        "der": {"the": 0.9, "poison": 0.1},
        "gift": {"poison": 0.6, "gift": 0.3, "the": 0.1},   # homograph: meaning first
        "geschenk": {"gift": 0.8, "the": 0.2},
        "3": {"3": 0.04, "the": 0.03},                       # below the threshold: left to the form stage
        "berlin": {"the": 0.5, "berlin": 0.4},               # 'the' is taken: next best aligned candidate
        "laden": {"report": 0.01},
    }
    pairing = pair_words(src, tgt, probs, threshold=0.05)
    got = [(p.category, p.src, p.tgt) for p in pairing.pairs]
    assert got == [
        ("lm", "der", "the"), ("lm", "gift", "poison"), ("lm", "geschenk", "gift"), ("lm", "berlin", "berlin"),
        ("wf", "3", "3"),
        ("ur", "laden", "report"), ("ur", "sonnenuhr", "fiehlt"),
    ]
    assert pairing.counts() == {"lm": 4, "wf": 1, "ur": 2}
    assert pairing.src_unpaired == 1 and pairing.tgt_unpaired == 0  # 'xyz' stays private
    scores = {(p.src, p.tgt): p.score for p in pairing.pairs}
    assert scores[("gift", "poison")] == 0.6 and scores[("3", "3")] == 0.04 and scores[("sonnenuhr", "fiehlt")] == 0.0


def test_threshold_moves_words_between_categories():
    src, tgt = [("a", 3), ("b", 2)], [("A", 3), ("b", 2)]
    probs = {"a": {"A": 0.5}, "b": {"A": 0.3, "b": 0.2}}
    assert [p.category for p in pair_words(src, tgt, probs, 0.05).pairs] == ["lm", "lm"]  # b -> b by meaning
    assert [(p.category, p.src, p.tgt) for p in pair_words(src, tgt, probs, 0.6).pairs] == [
        ("wf", "b", "b"), ("ur", "a", "A")]
    with pytest.raises(OutlayersConfigError, match="threshold"):
        pair_words(src, tgt, probs, 1.5)


# --------------------------------------------------------------------------------------------------------
# A(y|x) from links, Pharaoh files


def _write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return str(path)


def _dict(path, words):
    return _write(path, [f"{w} {c}" for w, c in words])


def test_link_count_estimator_from_pharaoh(tmp_path):
    s = _write(tmp_path / "c.de", ["haus klein", "haus", "haus groß"])
    t = _write(tmp_path / "c.en", ["house small", "home", "big house"])
    a = _write(tmp_path / "c.align", ["0-0 1-1", "0-0", "0-1 1-0"])
    probs, counter = estimate_probabilities(read_pharaoh(a, read_parallel(s, t)))
    assert counter.links == 5 and counter.sentences == 3
    assert probs["haus"] == {"house": 2 / 3, "home": 1 / 3}
    assert probs["klein"] == {"small": 1.0} and probs["groß"] == {"big": 1.0}


def test_pharaoh_errors_name_file_and_line(tmp_path):
    s = _write(tmp_path / "c.de", ["a b", "c"])
    t = _write(tmp_path / "c.en", ["x y", "z"])
    bad = _write(tmp_path / "bad.align", ["0-0 1-1", "0-3"])
    with pytest.raises(OutlayersConfigError, match=r"bad.align:2: link 0-3 is outside"):
        list(read_pharaoh(bad, read_parallel(s, t)))
    junk = _write(tmp_path / "junk.align", ["0:0"])
    with pytest.raises(OutlayersConfigError, match=r"junk.align:1: '0:0' is not a Pharaoh link"):
        list(read_pharaoh(junk, read_parallel(s, t)))
    short = _write(tmp_path / "short.align", ["0-0"])
    with pytest.raises(OutlayersConfigError, match="has 1 lines but the corpus has more"):
        list(read_pharaoh(short, read_parallel(s, t)))


def test_corpus_errors(tmp_path):
    s = _write(tmp_path / "c.de", ["a b", "c"])
    t = _write(tmp_path / "c.en", ["x y"])
    with pytest.raises(OutlayersConfigError, match="not line-aligned"):
        list(read_parallel(s, t))
    latin = tmp_path / "l.en"
    latin.write_bytes(b"x y\ngro\xdf\n")
    with pytest.raises(OutlayersConfigError, match=r"l.en:2: not valid UTF-8"):
        list(read_parallel(s, str(latin)))


# --------------------------------------------------------------------------------------------------------
# fast_align through systran-align: the homograph case and the forward Viterbi against a loop reference

LEXICON = [("das", "the"), ("gift", "poison"), ("ist", "is"), ("gefährlich", "dangerous"), ("ein", "a"),
           ("geschenk", "gift"), ("für", "for"), ("kinder", "children"), ("3", "3"), (".", "."),
           ("rot", "red"), ("haus", "house")]


def _homograph_corpus(tmp_path, n=120, seed=3):
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        words = rng.sample(LEXICON, rng.randint(3, 6))
        src.append(" ".join(d for d, _ in words))
        tgt.append(" ".join(e for _, e in words))
    s, t = _write(tmp_path / "train.de", src), _write(tmp_path / "train.en", tgt)
    from fairseq.data import Dictionary

    for path, side in ((s, 0), (t, 1)):
        d = Dictionary()
        for line in open(path, encoding="utf-8"):
            for w in line.split():
                d.add_symbol(w)
        d.finalize(padding_factor=1)
        d.save(str(tmp_path / f"dict.{'de' if side == 0 else 'en'}.txt"))
    return s, t, str(tmp_path / "dict.de.txt"), str(tmp_path / "dict.en.txt")


@pytest.mark.parametrize("direction", ["forward", "both"])
def test_homograph_pairs_by_meaning_with_fast_align(tmp_path, direction):
    pytest.importorskip("systran_align", reason=NO_ALIGNER)
    s, t, ds, dt = _homograph_corpus(tmp_path)
    pairing, timing = make_pairing(s, t, ds, dt, direction=direction)
    pairs = {p.src: (p.category, p.tgt) for p in pairing.pairs}
    assert pairs["gift"] == ("lm", "poison")  # not ('wf', 'gift'): the paper's German Gift / English poison
    assert pairs["geschenk"] == ("lm", "gift")
    assert all(pairs[d] == ("lm", e) for d, e in LEXICON), pairs
    assert timing["sentences"] == 120


def _viterbi_reference(table, src, tgt, p0=0.08, tension=4.0):
    """fast_align's forward Viterbi written as its loops, in float64."""
    m, n = len(src), len(tgt)
    links = []
    for j in range(1, n + 1):
        y = tgt[j - 1]
        best_i, best = 0, p0 * float(table.lookup(np.array(table.null_id), np.array(y)))
        z = sum(np.exp(-tension * abs(i / m - j / n)) for i in range(1, m + 1))
        for i in range(1, m + 1):
            prior = (1 - p0) * np.exp(-tension * abs(i / m - j / n)) / z
            score = float(table.lookup(np.array(src[i - 1]), np.array(y))) * prior
            if score > best:
                best_i, best = i, score
        if best_i:
            links.append((best_i - 1, j - 1))
    return links


def test_forward_viterbi_matches_loop_reference(tmp_path):
    pytest.importorskip("systran_align", reason=NO_ALIGNER)
    s, t, _, _ = _homograph_corpus(tmp_path, n=60)
    inp, fwd, bwd = (str(tmp_path / x) for x in ("in", "fwd", "bwd"))
    write_fast_align_input(read_parallel(s, t), inp)
    train_fast_align(inp, fwd, bwd)
    table = LexicalTable(fwd)
    corpus = list(read_parallel(s, t)) + [(["gift", "unbekannt"], ["poison", "unknown", "words"])]
    S, T = [table.ids(a) for a, _ in corpus], [table.ids(b) for _, b in corpus]
    fast = forward_viterbi(table, S, T)
    assert fast == [_viterbi_reference(table, a, b) for a, b in zip(S, T)]
    assert sum(len(x) for x in fast) > 0.8 * sum(len(b) for b in T)
    # the table is a distribution over targets for a frequent source word (pruned entries aside)
    row = table.keys // table.vocab_size == table.word_id["gift"]
    assert 0.9 < table.probs[row].sum() <= 1.0 + 1e-5


# --------------------------------------------------------------------------------------------------------
# the file format and its checks against the dictionaries


@pytest.fixture
def tiny_pairing(tmp_path):
    pytest.importorskip("systran_align", reason=NO_ALIGNER)
    s, t, ds, dt = _homograph_corpus(tmp_path)
    pairing, _ = make_pairing(s, t, ds, dt)
    path = str(tmp_path / "pairs.txt")
    write_pairing(path, pairing)
    return path, ds, dt


def test_file_round_trip_and_index_maps(tiny_pairing):
    path, ds, dt = tiny_pairing
    pairing = read_pairing(path)
    assert pairing.counts() == {"lm": 12, "wf": 0, "ur": 0}
    src_dict, tgt_dict = load_dictionary(ds), load_dictionary(dt)
    maps = index_maps(pairing, src_dict, tgt_dict, path)
    pairs = dict(zip((src_dict[i] for i in maps["lm"][0]), (tgt_dict[j] for j in maps["lm"][1])))
    assert pairs["gift"] == "poison"
    header = open(path, encoding="utf-8").read().splitlines()[:6]
    assert header[0].startswith("# fairseq_outlayers shared-private pairing")
    assert "lm=12 wf=0 ur=0" in header[4]
    with pytest.raises(OutlayersConfigError, match="exists; choose another -o path or pass --force"):
        write_pairing(path, pairing)


def test_bad_pairing_files(tiny_pairing, tmp_path):
    path, ds, dt = tiny_pairing
    lines = open(path, encoding="utf-8").read().splitlines()
    dup = _write(tmp_path / "dup.txt", lines + ["ur\tgift\tred\t0"])
    with pytest.raises(OutlayersConfigError, match=r"dup.txt:\d+: the pairing is not one-to-one: source token 'gift'"):
        read_pairing(dup)
    bad_cat = _write(tmp_path / "cat.txt", lines[:6] + ["xx\ta\tb\t0"])
    with pytest.raises(OutlayersConfigError, match=r"cat.txt:7: unknown category 'xx'"):
        read_pairing(bad_cat)
    edited = lines[:4] + ["# counts: lm=0 wf=0 ur=2 unpaired-source=0 unpaired-target=0"] + lines[5:6]
    missing = _write(tmp_path / "miss.txt", edited + ["ur\tnichtda\tred\t0", "ur\tauchnicht\t.\t0"])
    with pytest.raises(OutlayersConfigError, match="2 source token\\(s\\) are not in the source dictionary"):
        index_maps(read_pairing(missing), load_dictionary(ds), load_dictionary(dt), missing)
    other = load_dictionary(ds)
    other.add_symbol("neu")
    with pytest.raises(OutlayersConfigError, match="source dictionary .* is not the one .* re-run"):
        index_maps(read_pairing(path), other, load_dictionary(dt), path)
    with pytest.raises(OutlayersConfigError, match="not a pairing file"):
        read_pairing(ds)


def test_lambdas_parsing():
    assert lambdas_from_string("0.9,0.7,0.5") == (0.9, 0.7, 0.5)
    for bad in ("0.9,0.7", "1.2,0,0", "a,b,c", "-0.1,0,0"):
        with pytest.raises(OutlayersConfigError, match="three numbers in \\[0, 1\\]"):
            lambdas_from_string(bad)


def test_console_tool(tmp_path, capsys):
    pytest.importorskip("systran_align", reason=NO_ALIGNER)
    s, t, ds, dt = _homograph_corpus(tmp_path)
    out = str(tmp_path / "p.txt")
    cmd = [sys.executable, "-m", "fairseq_outlayers.tools.pairing", "--src-text", s, "--tgt-text", t, "--src-dict", ds,
           "--tgt-dict", dt, "-o", out]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "lexical meaning (lm)" in proc.stdout and "words/s" in proc.stderr
    assert "embedding parameters at d=512, decoder WT" in proc.stdout
    before = open(out, encoding="utf-8").read()
    from fairseq_outlayers.tools.pairing.__main__ import main  # the same entry point, in-process (fast)

    assert main(cmd[3:]) == 1
    assert "exists" in capsys.readouterr().err
    assert open(out, encoding="utf-8").read() == before  # nothing overwritten
    short = _write(tmp_path / "short.en", ["the"])
    assert main(cmd[3:6] + [short] + cmd[7:-1] + [str(tmp_path / "q.txt")]) == 1
    assert "not line-aligned" in capsys.readouterr().err and not os.path.exists(tmp_path / "q.txt")


# --------------------------------------------------------------------------------------------------------
# slow: the real Multi30k training set

MULTI30K = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data",
                        "multi30k")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isfile(os.path.join(MULTI30K, "train.de")), reason="Multi30k not available")
def test_multi30k_word_pairing(tmp_path):
    pytest.importorskip("systran_align", reason=NO_ALIGNER)
    from fairseq.data import Dictionary
    from sacremoses import MosesTokenizer

    paths = {}
    for lang in ("de", "en"):
        tok = MosesTokenizer(lang=lang)
        d = Dictionary()
        paths[lang] = str(tmp_path / f"train.{lang}")
        with open(os.path.join(MULTI30K, f"train.{lang}"), encoding="utf-8") as f, \
                open(paths[lang], "w", encoding="utf-8") as out:
            for line in f:
                toks = tok.tokenize(line.strip().lower(), escape=False)
                out.write(" ".join(toks) + "\n")
                for w in toks:
                    d.add_symbol(w)
        d.finalize(padding_factor=1)
        d.save(str(tmp_path / f"dict.{lang}.txt"))
    pairing, timing = make_pairing(paths["de"], paths["en"], str(tmp_path / "dict.de.txt"),
                                   str(tmp_path / "dict.en.txt"))
    pairs = {p.src: (p.category, p.tgt) for p in pairing.pairs}
    for de, en in (("mann", "man"), ("hund", "dog"), ("frau", "woman"), ("haus", "house"), ("wasser", "water")):
        assert pairs[de] == ("lm", en), (de, pairs.get(de))
    c = pairing.counts()
    assert c["lm"] > 8000 and c["wf"] > 10 and timing["sentences"] == 29000
