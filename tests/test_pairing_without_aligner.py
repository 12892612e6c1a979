"""Where systran-align is missing (Python 3.12 or later), the pairing and lexicon tools say in one line what to do,
before reading anything; alignments from the user's own fast_align (--aligner pharaoh) still work."""
import sys

from fairseq_outlayers.tools.pairing.__main__ import main as pairing_main
from fairseq_outlayers.tools.pairing.lexicon import main as lexicon_main
from harness import make_corpus, preprocess


def test_missing_binding_is_one_line_naming_the_pharaoh_route(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "systran_align", None)  # import systran_align now raises ImportError
    missing = str(tmp_path / "not-read.txt")  # never opened: the check comes first
    args = ["--src-text", missing, "--tgt-text", missing, "--src-dict", missing, "--tgt-dict", missing]
    assert pairing_main(args + ["-o", str(tmp_path / "pairs.txt")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fairseq_outlayers: error: ")
    assert "systran-align" in err and "--aligner pharaoh --alignment FILE" in err
    assert ("no build for Python 3.12 or later" in err) == (sys.version_info >= (3, 12))
    assert lexicon_main(["--src-text", missing, "--tgt-text", missing, "-o", str(tmp_path / "lex.txt")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--aligner pharaoh --alignment FILE" in err
    assert not (tmp_path / "pairs.txt").exists() and not (tmp_path / "lex.txt").exists()


def test_pharaoh_alignments_need_no_binding(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "systran_align", None)
    raw = make_corpus(str(tmp_path / "raw"), n_train=40, n_valid=4, n_test=4)
    data = preprocess(raw, str(tmp_path / "bin"))
    align = tmp_path / "corpus.align"
    with open(f"{raw}/train.de") as fs, open(f"{raw}/train.en") as ft:
        align.write_text("".join(" ".join(f"{i}-{i}" for i in range(min(len(a.split()), len(b.split())))) + "\n"
                                 for a, b in zip(fs, ft)))
    out = tmp_path / "pairs.txt"
    assert pairing_main(["--src-text", f"{raw}/train.de", "--tgt-text", f"{raw}/train.en", "--src-dict",
                         f"{data}/dict.de.txt", "--tgt-dict", f"{data}/dict.en.txt", "--aligner", "pharaoh",
                         "--alignment", str(align), "-o", str(out)]) == 0
    assert "aligner=pharaoh-file" in out.read_text()
