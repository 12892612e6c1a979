"""The pairing tool: bounded aligner memory, no silent drops, early output checks, strict pairing reader."""
import os
import random
import resource
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.methods.shared_private.word_pairs import read_pairing
from fairseq_outlayers.tools.pairing.__main__ import main as pairing_main
from fairseq_outlayers.tools.pairing.alignment import LexicalTable, forward_viterbi
from fairseq_outlayers.tools.pairing.lexicon import main as lexicon_main
from harness import NO_ALIGNER


def _write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(x + "\n" for x in lines))
    return str(path)


def _corpus(tmp_path, n=300, long_line=None, seed=0):
    """n lines of a word-by-word 'translation' (source wK, target WK) with separate dictionaries; line 151
    replaced by ``long_line`` = (source tokens, target tokens) when given."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(60)]
    src = [[rng.choice(vocab) for _ in range(rng.randint(4, 10))] for _ in range(n)]
    tgt = [[w.upper() for w in s] for s in src]
    if long_line:
        src[150], tgt[150] = long_line
    s = _write(tmp_path / "train.de", [" ".join(x) for x in src])
    t = _write(tmp_path / "train.en", [" ".join(x) for x in tgt])
    from fairseq.data import Dictionary

    paths = []
    for lines, lang in ((src, "de"), (tgt, "en")):
        d = Dictionary()
        for words in lines:
            for w in words:
                d.add_symbol(w)
        d.finalize(padding_factor=1)
        paths.append(str(tmp_path / f"dict.{lang}.txt"))
        d.save(paths[-1])
    return s, t, paths[0], paths[1]


def _args(s, t, ds, dt, out, *more):
    return ["--src-text", s, "--tgt-text", t, "--src-dict", ds, "--tgt-dict", dt, "-o", str(out), *more]


def _table(vocab=64, seed=0):
    rng = np.random.default_rng(seed)
    table = object.__new__(LexicalTable)
    table.vocab_size, table.null_id = vocab + 1, 1
    table.keys = np.unique(rng.integers(0, (vocab + 1) ** 2, 2000))
    table.probs = rng.random(len(table.keys))
    return table, rng


# ----------------------------------------------------------------------------------------------------------
# memory


def test_forward_viterbi_memory_is_bounded_for_a_3000_token_line():
    """The old aligner allocated (sentences, m, n) float64 arrays: 3 x 3000 x 3000 x 8 bytes = 216 MB each,
    1.3 GB at the peak for these three lines (23 GB for a 300-line corpus). Now a constant: < 150 MB."""
    table, rng = _table()
    src = [list(rng.integers(2, 64, 8)), list(rng.integers(2, 64, 3000)), list(rng.integers(2, 64, 5))]
    tgt = [list(rng.integers(2, 64, 7)), list(rng.integers(2, 64, 3000)), list(rng.integers(2, 64, 6))]
    tracemalloc.start()
    try:
        links = forward_viterbi(table, src, tgt)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 150 * 2 ** 20, f"peak {peak / 2 ** 20:.0f} MB"
    assert len(links) == 3 and len(links[1]) > 0
    assert all(0 <= i < 3000 and 0 <= j < 3000 for i, j in links[1])


def test_forward_viterbi_slices_give_the_same_links():
    """Cutting the work into groups and target slices changes nothing (every target position is independent)."""
    table, rng = _table(seed=1)
    src = [list(rng.integers(2, 64, rng.integers(1, 80))) for _ in range(40)]
    tgt = [list(rng.integers(2, 64, rng.integers(1, 80))) for _ in range(40)]
    whole = forward_viterbi(table, src, tgt, max_cells=10 ** 9)
    for cells in (1, 7, 97, 5000):
        assert forward_viterbi(table, src, tgt, max_cells=cells) == whole


def test_pairing_cli_aligns_a_3000_token_line_under_1gb(tmp_path):
    pytest.importorskip("systran_align", reason=NO_ALIGNER)
    long_src = [f"w{k % 60}" for k in range(3000)]
    s, t, ds, dt = _corpus(tmp_path, long_line=(long_src, [w.upper() for w in long_src]))
    out = tmp_path / "pairs.txt"
    code = ("import resource, sys; from fairseq_outlayers.tools.pairing.__main__ import main; rc = main(sys.argv[1:]); "
            "print('PEAK_MB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr); "
            "sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, *_args(s, t, ds, dt, out)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    peak = float(proc.stderr.rsplit("PEAK_MB", 1)[1].split()[0])
    assert peak < 1024, f"peak RSS {peak:.0f} MB"
    assert read_pairing(str(out)).counts()["lm"] == 60


def test_direction_both_never_drops_a_line_silently(tmp_path, capsys):
    """systran_align's symmetrised aligner gives a 3,000-token line of one repeated word no link at all (and a
    positive log-probability): the line is skipped with a warning naming it, and counted in the report."""
    pytest.importorskip("systran_align", reason=NO_ALIGNER)
    s, t, ds, dt = _corpus(tmp_path, long_line=(["w1"] * 3000, ["W1"] * 3000))
    out = tmp_path / "pairs.txt"
    assert pairing_main(_args(s, t, ds, dt, out, "--direction", "both")) == 0
    err = capsys.readouterr().err
    assert "line 151 (3000 source, 3000 target tokens)" in err and "skipped" in err
    assert "1 sentence pair(s) got no links and were skipped (lines 151)" in err
    assert read_pairing(str(out)).info["skipped-lines"] == "1"
    lex = tmp_path / "lex.txt"
    assert lexicon_main(["--src-text", s, "--tgt-text", t, "-o", str(lex)]) == 0
    captured = capsys.readouterr()
    assert "line 151" in captured.err and "1 sentence pair(s) got no links and were skipped" in captured.out


# ----------------------------------------------------------------------------------------------------------
# text that does not match the dictionaries; output paths


def test_swapped_text_is_warned_before_aligning(tmp_path, capsys):
    pytest.importorskip("systran_align", reason=NO_ALIGNER)
    s, t, ds, dt = _corpus(tmp_path, n=60)
    assert pairing_main(_args(t, s, ds, dt, tmp_path / "p.txt")) == 0
    err = capsys.readouterr().err
    assert "source and target look swapped" in err and f"'{t}'" in err
    assert err.index("look swapped") < err.index("training fast_align")
    other = _write(tmp_path / "bpe.de", ["x@@ y@@ z"] * 60)
    assert pairing_main(_args(other, t, ds, dt, tmp_path / "q.txt")) == 0
    err = capsys.readouterr().err
    assert f"only 0.0% of the tokens of the source text '{other}' are in '{ds}'" in err
    assert pairing_main(_args(s, t, ds, dt, tmp_path / "r.txt")) == 0
    assert "warning" not in capsys.readouterr().err


def test_output_in_missing_directory_fails_before_aligning(tmp_path, capsys):
    s, t, ds, dt = _corpus(tmp_path, n=30)
    out = tmp_path / "no" / "such" / "pairs.txt"
    assert pairing_main(_args(s, t, ds, dt, out)) == 1
    err = capsys.readouterr().err
    assert f"'{tmp_path / 'no' / 'such'}' does not exist; create it" in err
    assert "training fast_align" not in err and err.count("\n") == 1
    assert lexicon_main(["--src-text", s, "--tgt-text", t, "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "does not exist; create it" in err and "training fast_align" not in err


@pytest.mark.parametrize("which", ["src_text", "tgt_text", "src_dict", "tgt_dict"])
def test_output_naming_an_input_is_refused_even_with_force(tmp_path, capsys, which):
    s, t, ds, dt = _corpus(tmp_path, n=30)
    target = {"src_text": s, "tgt_text": t, "src_dict": ds, "tgt_dict": dt}[which]
    before = open(target, encoding="utf-8").read()
    assert pairing_main(_args(s, t, ds, dt, target, "--force")) == 1
    err = capsys.readouterr().err
    assert "is also an input of this command" in err and "--force never overwrites an input" in err
    assert open(target, encoding="utf-8").read() == before
    # through another spelling of the same path
    alias = os.path.join(os.path.dirname(target), ".", os.path.basename(target))
    assert pairing_main(_args(s, t, ds, dt, alias, "--force")) == 1
    if which in ("src_text", "tgt_text"):
        assert lexicon_main(["--src-text", s, "--tgt-text", t, "-o", target, "--force"]) == 1
        assert "is also an input" in capsys.readouterr().err
    assert open(target, encoding="utf-8").read() == before


def test_output_is_written_atomically(tmp_path, capsys, monkeypatch):
    """A failure while writing leaves the previous file complete and no temporary file behind."""
    pytest.importorskip("systran_align", reason=NO_ALIGNER)
    s, t, ds, dt = _corpus(tmp_path, n=30)
    out = tmp_path / "p.txt"
    assert pairing_main(_args(s, t, ds, dt, out)) == 0
    before = out.read_text()
    from fairseq_outlayers.methods.shared_private.word_pairs import pairs

    def broken(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(pairs.Pairing, "counts", broken)
    with pytest.raises(KeyboardInterrupt):
        pairs.write_pairing(str(out), read_pairing(str(out)), overwrite=True)
    monkeypatch.undo()
    assert out.read_text() == before and sorted(os.listdir(tmp_path)) == sorted(
        ["train.de", "train.en", "dict.de.txt", "dict.en.txt", "p.txt"])


# ----------------------------------------------------------------------------------------------------------
# the pairing reader used at training time (methods/shared_private/register.py calls read_pairing)


def _header(n_src=10, n_tgt=10, counts="lm=1 wf=1 ur=0"):
    return ["# fairseq_outlayers shared-private pairing, format 1",
            f"# source-dictionary: sha256={'a' * 64} symbols={n_src}",
            f"# target-dictionary: sha256={'b' * 64} symbols={n_tgt}",
            "# made-with: aligner=pharaoh-file", f"# counts: {counts} unpaired-source=0 unpaired-target=0",
            "# columns: category, source token, target token, A(y|x) (tab-separated)"]


def test_pairing_with_header_and_no_pairs_is_an_error(tmp_path):
    path = _write(tmp_path / "empty.txt", _header())
    with pytest.raises(OutlayersConfigError, match="has a header but no pairs"):
        read_pairing(path)
    path = _write(tmp_path / "blank.txt", _header() + ["", "  "])
    with pytest.raises(OutlayersConfigError, match="has a header but no pairs"):
        read_pairing(path)


@pytest.mark.parametrize("score", ["-0.5", "nan", "NaN", "inf", "-inf", "1.5", "-0"])
def test_pairing_scores_must_be_probabilities(tmp_path, score):
    path = _write(tmp_path / "p.txt", _header() + ["lm\tHaus\thouse\t0.5", f"wf\tBerlin\tBerlin\t{score}"])
    if score == "-0":
        assert read_pairing(path).pairs[1].score == 0.0
        return
    with pytest.raises(OutlayersConfigError, match=rf"p.txt:8: score '{score}' is not a probability"):
        read_pairing(path)


def test_pairing_header_numbers_and_empty_tokens(tmp_path):
    bad = _header(n_src="x")
    path = _write(tmp_path / "h.txt", bad + ["lm\tHaus\thouse\t0.5", "wf\tBerlin\tBerlin\t1"])
    with pytest.raises(OutlayersConfigError, match="header 'source-dictionary symbols=x' is not a non-negative"):
        read_pairing(path)
    path = _write(tmp_path / "e.txt", _header() + ["lm\t\thouse\t0.5", "wf\tBerlin\tBerlin\t1"])
    with pytest.raises(OutlayersConfigError, match="e.txt:7: empty source token"):
        read_pairing(path)


def test_pairing_cut_at_a_line_end_is_an_error(tmp_path):
    """The header's counts per category must match the pairs: a file cut short at a line end (or a pair deleted)
    would otherwise train with fewer shared words without a word."""
    lines = _header(counts="lm=2 wf=1 ur=0") + ["lm\tHaus\thouse\t0.5", "lm\tKatze\tcat\t0.9", "wf\tBerlin\tBerlin\t1"]
    assert read_pairing(_write(tmp_path / "ok.txt", lines)).counts() == {"lm": 2, "wf": 1, "ur": 0}
    with pytest.raises(OutlayersConfigError, match="the header says 'lm=2 wf=1 ur=0' but the file holds lm=2 wf=0"):
        read_pairing(_write(tmp_path / "cut.txt", lines[:-1]))


def test_pairing_missing_file_bad_score_and_special_symbols(tmp_path):
    """The reader's other refusals, each one line naming the file (and line): a missing file, a score that is not
    a number, a pair naming a special symbol; and the pairs of one category."""
    from fairseq.data import Dictionary

    from fairseq_outlayers.methods.shared_private.word_pairs import dictionary_hash, index_maps

    with pytest.raises(OutlayersConfigError, match=r"pairing file '.*none.txt' does not exist; make it with"):
        read_pairing(str(tmp_path / "none.txt"))
    path = _write(tmp_path / "p.txt", _header() + ["lm\tHaus\thouse\t0.5", "wf\tBerlin\tBerlin\tabc"])
    with pytest.raises(OutlayersConfigError, match=r"p.txt:8: score 'abc' is not a number"):
        read_pairing(path)
    src, tgt = Dictionary(), Dictionary()
    for word in ("Haus", "Berlin"):
        src.add_symbol(word)
    tgt.add_symbol("house")
    header = [line.replace("a" * 64, dictionary_hash(src)).replace("b" * 64, dictionary_hash(tgt))
              for line in _header(n_src=len(src), n_tgt=len(tgt))]
    path = _write(tmp_path / "s.txt", header + ["lm\tHaus\thouse\t0.5", "wf\t</s>\t</s>\t1"])
    pairing = read_pairing(path)
    assert [p.src for p in pairing.by_category("wf")] == ["</s>"] and len(pairing.by_category("lm")) == 1
    with pytest.raises(OutlayersConfigError, match=r"s.txt': special symbol in pair \(</s>, </s>\)"):
        index_maps(pairing, src, tgt, path=path)


def test_a_missing_parallel_text_is_one_line_naming_it(tmp_path):
    from fairseq_outlayers.methods.shared_private.word_pairs.corpus import read_parallel

    real = _write(tmp_path / "train.en", ["a b"])
    with pytest.raises(OutlayersConfigError, match=r"'.*train.de' does not exist; pass the path of an existing file"):
        list(read_parallel(str(tmp_path / "train.de"), real))
