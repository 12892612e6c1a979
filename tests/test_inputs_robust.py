"""Inputs of the evaluation and pairing tools checked before the work: an empty --replace-unk lexicon,
`pairing lexicon --min-count` that would keep nothing, a Pharaoh file without links, train_target_vectors.py
--dict given training text, and scripts/evaluate.sh's lexicon, --raw-ref length, --test-set pair and outputs
checked before it translates."""
import os
import subprocess
import sys
import types

import pytest

from harness import REPO, load_script

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.tools.evaluation.unknown_words import load_lexicon, read_lexicon
from fairseq_outlayers.tools.pairing import lexicon as L
from fairseq_outlayers.tools.pairing.alignment import read_pharaoh

SRC = ["das Haus ist rot", "die Katze", "das Haus"]
TGT = ["the house is red", "the cat", "the house"]


def write(path, lines):
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return str(path)


def _last_line(err):
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("INFO")]
    assert "Traceback" not in err, err
    return lines[-1]


@pytest.mark.parametrize("content", ["", "\n\n   \n"])
def test_an_empty_replace_unk_lexicon_is_refused(tmp_path, content):
    lex = tmp_path / "lex.txt"
    lex.write_text(content)
    with pytest.raises(OutlayersConfigError, match=f"--replace-unk lexicon '{lex}' has no entry"):
        load_lexicon(str(lex))
    assert load_lexicon("@@ ") == {} and load_lexicon(None) is None  # a bare --replace-unk: copy only


def test_lexicon_min_count_that_keeps_nothing_is_refused_and_nothing_written(tmp_path, capsys):
    s, t = write(tmp_path / "s", SRC), write(tmp_path / "t", TGT)
    a = write(tmp_path / "a", ["0-0 1-1 2-2 3-3", "0-0 1-1", "0-0 1-1"])
    out = tmp_path / "lex.txt"
    base = ["--src-text", s, "--tgt-text", t, "--aligner", "pharaoh", "--alignment", a, "--out", str(out)]
    assert L.main(base + ["--min-count", "1000000"]) == 1
    assert _last_line(capsys.readouterr().err) == (
        "fairseq_outlayers: error: no source unit is linked to a real target word --min-count 1000000 times or more "
        "(the most linked pair has 2 of 8 kept links, over 3 sentence pairs); lower --min-count (at most 2 keeps an "
        "entry) or give a larger corpus; nothing written")
    assert not out.exists()
    assert L.main(base + ["--min-count", "0"]) == 1
    assert "--min-count must be at least 1, got 0" in capsys.readouterr().err
    assert L.main(base + ["--min-count", "2"]) == 0 and read_lexicon(str(out)) == {"das": "the", "Haus": "house"}


def test_a_pharaoh_file_without_links_is_refused_and_blank_lines_are_warned_of(tmp_path, capsys):
    s, t = write(tmp_path / "s", SRC), write(tmp_path / "t", TGT)
    blank = write(tmp_path / "blank", ["", "", ""])
    corpus = [(x.split(), y.split()) for x, y in zip(SRC, TGT)]
    with pytest.raises(OutlayersConfigError, match=f"alignment file '{blank}' holds no link in its 3 lines"):
        list(read_pharaoh(blank, iter(corpus)))
    assert L.main(["--src-text", s, "--tgt-text", t, "--aligner", "pharaoh", "--alignment", blank, "--out",
                   str(tmp_path / "lex.txt")]) == 1
    assert "holds no link in its 3 lines (all blank)" in capsys.readouterr().err
    partly = write(tmp_path / "partly", ["0-0 1-1", "", "0-0"])
    heard = []
    linked = list(read_pharaoh(partly, iter(corpus), log=heard.append))
    assert [len(x[2]) for x in linked] == [2, 0, 1]
    assert heard == [f"warning: {partly}: 1 of 3 sentence pairs have no link (blank lines 2); their words are "
                     "paired by meaning from the other lines only"]
    assert L.main(["--src-text", s, "--tgt-text", t, "--aligner", "pharaoh", "--alignment", partly, "--out",
                   str(tmp_path / "lex.txt")]) == 0
    assert "1 of 3 sentence pairs have no link (blank lines 2)" in capsys.readouterr().err


def test_the_pairing_tool_refuses_a_pharaoh_file_without_links(tmp_path, capsys, tiny_raw, tiny_bin):
    from fairseq_outlayers.tools.pairing.__main__ import main

    n = sum(1 for _ in open(os.path.join(tiny_raw, "train.de")))
    blank = write(tmp_path / "blank", [""] * n)
    out = tmp_path / "pairs.txt"
    assert main(["--src-text", os.path.join(tiny_raw, "train.de"), "--tgt-text", os.path.join(tiny_raw, "train.en"),
                 "--src-dict", os.path.join(tiny_bin, "dict.de.txt"), "--tgt-dict",
                 os.path.join(tiny_bin, "dict.en.txt"), "-o", str(out), "--aligner", "pharaoh", "--alignment",
                 blank]) == 1
    assert f"holds no link in its {n} lines (all blank)" in _last_line(capsys.readouterr().err)
    assert not out.exists()


@pytest.fixture
def ttv(monkeypatch):
    def no_training(*args, **kwargs):
        raise AssertionError("training started before --dict was checked")

    models = types.ModuleType("gensim.models")
    models.FastText = models.Word2Vec = no_training
    monkeypatch.setitem(sys.modules, "gensim.models", models)
    return load_script("train_target_vectors.py")


@pytest.mark.parametrize("content, expected", [
    ("a man is riding a bike .\ntwo dogs play\n", "line 1: expected 'word count' (a fairseq dict.*.txt, as "
     "fairseq-preprocess writes it), got 'a man is riding a bike .'; --dict takes the dictionary, not training text"),
    ("the 10\nhouse 5\nthe 3\n", "line 3: the word 'the' is listed a second time"),
    ("", "is empty; give the fairseq dict.*.txt"),
    ("house\n", "line 1: expected 'word count'"),
])
def test_train_target_vectors_dict_given_training_text_is_refused(ttv, tmp_path, content, expected):
    text = tmp_path / "train.en"
    text.write_text("a house\nthe cat\n")
    d = tmp_path / "dict.en.txt"
    d.write_text(content)
    with pytest.raises(SystemExit) as e:
        ttv.main(["--input", str(text), "--output", str(tmp_path / "v.vec"), "--dict", str(d)])
    assert f"--dict {d}" in str(e.value.code) and expected in str(e.value.code)


def test_train_target_vectors_reads_a_fairseq_dictionary(tmp_path):
    script = load_script("train_target_vectors.py")
    d = tmp_path / "dict.en.txt"
    d.write_text("<unk> 1 #fairseq:overwrite\nthe 10\nhouse 5\n<unk> 0 #fairseq:overwrite\n")
    assert script.dictionary_words(str(d)) == ["<unk>", "the", "house", "<unk>"]


# ----------------------------------------------------------------------------------------------------------
# scripts/evaluate.sh: checked before translating


def _evaluate(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run(["bash", os.path.join(REPO, "scripts", "evaluate.sh"), *args], capture_output=True,
                          text=True, timeout=300, env=env)


def test_evaluate_checks_lexicon_references_test_sets_and_outputs_before_translating(tmp_path, tiny_raw, tiny_bin):
    ckpt = tmp_path / "checkpoint_best.pt"
    ckpt.write_bytes(b"never loaded: every case stops before fairseq-generate")
    out = tmp_path / "eval"
    ref = os.path.join(tiny_raw, "test.en")
    base = [str(ckpt), tiny_bin, "--out", str(out), "--cpu"]
    empty = tmp_path / "lex.txt"
    empty.write_text("\n")
    short = write(tmp_path / "short.en", open(ref).read().splitlines()[:20])
    src5 = write(tmp_path / "x.de", ["a"] * 5)
    ref4 = write(tmp_path / "x.en", ["b"] * 4)
    cases = [
        (["--replace-unk", str(empty)], f"--replace-unk lexicon '{empty}' has no entry"),
        (["--raw-ref", short], f"--raw-ref {short} has 20 lines but the test split of {tiny_bin} has 24 sentences"),
        (["--tok-ref", short, "--subset", "test"], f"--tok-ref {short} has 20 lines"),
        (["--test-set", f"x={src5},{ref4}"], f"--test-set 'x': {src5} has 5 lines but {ref4} has 4"),
    ]
    for extra, expected in cases:
        proc = _evaluate(*base, *extra)
        assert proc.returncode == 1 and expected in _last_line(proc.stderr), proc.stderr
        assert "fairseq-generate" not in proc.stdout
    # an output that is a file the script reads: refused with --force too
    out.mkdir()
    mine = write(out / "hyp.detok", ["the reference, kept where an output would go"] * 24)
    proc = _evaluate(*base, "--raw-ref", mine, "--force")
    assert proc.returncode == 1 and f"{out}/hyp.detok (an output) is also an input" in _last_line(proc.stderr)
    assert open(mine).read().startswith("the reference, kept")
    assert "fairseq-generate" not in proc.stdout
