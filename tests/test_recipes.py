"""The shell recipes: scripts/prepare-*.sh on tiny fake raw corpora in the official layouts (offline path),
the --force / never-overwrite rule, one-line errors on bad input, scripts/train.sh and scripts/evaluate.sh end
to end on a 300-line slice of Multi30k, and the recipe table (configs/DATASET/METHOD.yaml) against fairseq's parser.
"""
import collections
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import sacrebleu
import torch

from fairseq_outlayers.tools import corpus_tools, recipes
from fairseq_outlayers.tools.evaluation import score_translations
from fairseq_outlayers.tools.evaluation.unknown_words import source_words
from harness import NO_ALIGNER, REPO, once_per_session, run, tool

SCRIPTS = os.path.join(REPO, "scripts")
MULTI30K = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "multi30k"))

TINY = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
        "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2",
        "--decoder-attention-heads", "2", "--max-tokens", "1500", "--cpu", "--num-workers", "0",
        "--no-epoch-checkpoints", "--no-progress-bar", "--log-interval", "1"]


def bash(script, *args, env=None, check=True):
    return run(["bash", os.path.join(SCRIPTS, script), *args], env=env, check=check)


# ---------------------------------------------------------------------------------------------------------------
# fake raw corpora in the official layouts, filled with Multi30k sentences (real text, real tokenisation)
# ---------------------------------------------------------------------------------------------------------------
def sentences(lang, n, start=0):
    path = os.path.join(MULTI30K, f"train.{lang}")
    if not os.path.exists(path):  # no shared/ data beside this checkout: line-aligned synthetic sentences
        import random

        def sentence(i):
            rng = random.Random(i)  # same length and word choice in every language for line i
            return " ".join(f"{lang}{rng.randrange(20000)}" for _ in range(rng.randint(4, 14))) + " ."

        return [sentence(i) for i in range(start, start + n)]
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for _, line in zip(range(start + n), f)]
    return lines[start:]


def write(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(x + "\n" for x in lines))


def tags_file(path, sents, talk=20):
    out = []
    for i in range(0, len(sents), talk):
        out += [f"<url>http://www.ted.com/talks/{i}</url>", "<keywords>talks, science</keywords>",
                f"<talkid>{i}</talkid>", f"<title>Talk number {i}</title>", f"<description>About {i}</description>"]
        out += sents[i:i + talk]
    write(path, out)


def seg_file(path, sents):
    write(path, ['<?xml version="1.0" encoding="UTF-8"?>', "<mteval>", '<srcset setid="t" srclang="any">',
                 '<doc docid="1" genre="news">'] + [f'<seg id="{i}"> {s} </seg>' for i, s in enumerate(sents, 1)]
          + ["</doc>", "</srcset>", "</mteval>"])


IWSLT14_SETS = ["IWSLT14.TED.dev2010", "IWSLT14.TED.tst2010", "IWSLT14.TED.tst2011", "IWSLT14.TED.tst2012",
                "IWSLT14.TEDX.dev2012"]


def fake_iwslt14(root, n=230, ntest=8):
    d = os.path.join(root, "de-en")
    for lang in ("de", "en"):
        tags_file(os.path.join(d, f"train.tags.de-en.{lang}"), sentences(lang, n))
        for k, name in enumerate(IWSLT14_SETS):
            seg_file(os.path.join(d, f"{name}.de-en.{lang}.xml"), sentences(lang, ntest, 1000 + k * ntest))
    return root


def fake_wmt(root, nc="news-commentary-v12", dev="newstest2013", test="newstest2014", n=120, sgm_dev=False):
    for lang in ("de", "en"):
        write(os.path.join(root, "training", f"europarl-v7.de-en.{lang}"), sentences(lang, n))
        write(os.path.join(root, f"{nc}.de-en.{lang}"), sentences(lang, n, n))
        side = "ref" if (lang == "de") == (test == "newstest2014") else "src"
        if sgm_dev:
            seg_file(os.path.join(root, "dev", f"{dev}-deen-{side}.{lang}.sgm"), sentences(lang, 10, 2000))
        else:
            write(os.path.join(root, "dev", f"{dev}.{lang}"), sentences(lang, 10, 2000))
        seg_file(os.path.join(root, "test", f"{test}-deen-{side}.{lang}.sgm"), sentences(lang, 12, 2100))
    return root


def fake_iwslt17(root, src="fr", n=200, ntest=9):
    d = os.path.join(root, f"{src}-en")
    for lang in (src, "en"):
        tags_file(os.path.join(d, f"train.tags.{src}-en.{lang}"), sentences(lang, n))
        for k, name in enumerate(["IWSLT17.TED.tst2014", "IWSLT17.TED.tst2015"]):
            seg_file(os.path.join(d, f"{name}.{src}-en.{lang}.xml"), sentences(lang, ntest, 1000 + k * ntest))
    return root


def lines_of(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


needs_multi30k = pytest.mark.skipif(not os.path.isdir(MULTI30K), reason=f"{MULTI30K} not found")


# ---------------------------------------------------------------------------------------------------------------
# corpus_tools: the rules the scripts rely on
# ---------------------------------------------------------------------------------------------------------------
def test_corpus_tools_rules(tmp_path):
    # Moses clean-corpus-n: both sides within [min, max] tokens and neither more than ratio x the other
    assert corpus_tools.keep_pair("a b c".split(), "x y".split(), 1, 175, 1.5)
    assert not corpus_tools.keep_pair("a b c d".split(), "x y".split(), 1, 175, 1.5)   # 4 > 1.5 * 2
    assert not corpus_tools.keep_pair([], ["x"], 1, 175, 1.5)
    assert not corpus_tools.keep_pair(["a"] * 176, ["x"] * 176, 1, 175, 1.5)
    # IWSLT tag files: metadata dropped, title/description text kept (fairseq's rule)
    kept = corpus_tools.strip_tags(["<url>u</url>", "<talkid>1</talkid>", "<keywords>k</keywords>",
                                    "<title>T</title>", "<description>D</description>", "text"], "2014")
    assert kept == ["T", "D", "text"]
    assert corpus_tools.strip_tags(["<speaker>S</speaker>", "x"], "2017") == ["x"]
    assert corpus_tools.segments(['<seg id="3"> it’s here </seg>', "<doc>", '<seg id=4>b</seg>']) == \
        ["it's here", "b"]
    # every-N split and tokenisation equal to the sacremoses command line (escaped) with lowercasing
    src = tmp_path / "in.txt"
    src.write_text("".join(f"l{i}\n" for i in range(1, 48)), encoding="utf-8")
    corpus_tools.main(["every", "23", str(src), str(tmp_path / "v"), str(tmp_path / "t")])
    assert lines_of(tmp_path / "v") == ["l23", "l46"] and len(lines_of(tmp_path / "t")) == 45
    assert corpus_tools.tokenize(["It's a <b> Test!"], "en", lower=True) == ["it &apos;s a &lt; b &gt; test !"]
    # line splitting only on \n: a U+2028 inside a sentence does not add a line
    (tmp_path / "u.txt").write_text("a\u2028b\nc\n", encoding="utf-8")
    assert corpus_tools.read_lines("x", str(tmp_path / "u.txt")) == ["a\u2028b", "c"]


def test_scoring_helpers():
    # <unk> gets the whole source word its position is aligned to, BPE pieces joined
    src = "ein bo@@ st@@ on ter@@ ri@@ er läuft"
    assert source_words(src.split())[1:4] == ["boston"] * 3
    assert score_translations.replace_unknown("a <unk> <unk> runs <unk>", src, "0-0 2-1 5-2 7-3") == \
        "a boston terrier runs <unk>"                      # position 4 has no alignment: left as it is
    assert score_translations.remove_bpe("bo@@ st@@ on ter@@") == "boston ter"  # as fairseq: trailing marker dropped
    # word F1 per training-frequency bin, counts clipped per sentence
    f1 = score_translations.word_f1_by_frequency(["a a b c", "d"], ["a b b d", "e"],
                                                 {"a": 1, "b": 1, "c": 7, "d": 7, "e": 1000})
    # bin '1' (a, b): hyp has a,a,b (3), ref has a,b,b (3), matches min(2,1)+min(1,2) = 2 -> P = R = 2/3
    assert f1["1"] == {"f1": round(100 * 2 / 3, 2), "ref_words": 3, "hyp_words": 3}
    # bin '5-9' (c, d): hyp c, d (2), ref d (1) in sentence 1, d matched 0 times there; sentence 2: hyp d, ref e
    assert f1["5-9"] == {"f1": 0.0, "ref_words": 1, "hyp_words": 2}
    assert f1["1000+"] == {"f1": 0.0, "ref_words": 1, "hyp_words": 0}
    assert score_translations.frequency_bucket(0) == "unseen" and score_translations.frequency_bucket(10) == "10-99"


# ---------------------------------------------------------------------------------------------------------------
# preparation scripts
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def multi30k_slice(tmp_path_factory):
    """prepare-multi30k.sh on the first 300 lines of every split (500 BPE merges); made once for the session, not
    once per xdist worker (``once_per_session``). The tests read it; those that write beside it copy it first."""
    if not os.path.isdir(MULTI30K):
        pytest.skip(f"{MULTI30K} not found")
    return once_per_session(tmp_path_factory, "multi30k_slice", _prepare_multi30k_slice)


def _prepare_multi30k_slice(folder):
    raw = folder / "m30raw"
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            with open(os.path.join(MULTI30K, f"{split}.{lang}"), encoding="utf-8") as f:
                write(str(raw / f"{split}.{lang}"), [line.rstrip("\n") for _, line in zip(range(300), f)])
    out = str(folder / "m30" / "multi30k")
    proc = bash("prepare-multi30k.sh", "--src", "de", "--tgt", "en", "--bpe-merges", "500", "--out", out,
                env={"MULTI30K_DIR": str(raw)})
    word = bash("prepare-multi30k.sh", "--src", "de", "--tgt", "en", "--bpe-merges", "500", "--out", out,
                "--word-target", env={"MULTI30K_DIR": str(raw)})
    return {"raw": str(raw), "out": out, "bin": os.path.join(out, "data-bin", "de-en"), "log": proc.stdout,
            "word_bin": os.path.join(out, "data-bin", "de-en-word"), "word_log": word.stdout}


@needs_multi30k
def test_prepare_multi30k_outputs_and_skip(multi30k_slice):
    out, dest = multi30k_slice["out"], multi30k_slice["bin"]
    assert f"raw data: local copy {multi30k_slice['raw']}" in multi30k_slice["log"]
    for name in ("dict.de.txt", "dict.en.txt", "train.de-en.de.bin", "test.de-en.en.idx", "bpecodes", ".done"):
        assert os.path.isfile(os.path.join(dest, name)), name
    assert open(os.path.join(dest, ".done")).read() == \
        f"origin: local copy ({multi30k_slice['raw']})\nlowercase: 1\nbpe_merges: 500\n"
    # the tokenised text is exactly what the lead's original pipeline wrote (sacremoses CLI, then lowercasing)
    cli = run(["bash", "-c", f"{tool('sacremoses')} -l en -j 1 tokenize -x < {out}/raw/val.en"]).stdout
    assert lines_of(os.path.join(out, "tok", "val.en")) == [x.lower() for x in cli.split("\n")[:-1]]
    # a finished output is never rebuilt without --force
    before = os.path.getmtime(os.path.join(dest, ".done"))
    again = bash("prepare-multi30k.sh", "--src", "de", "--tgt", "en", "--out", out)
    assert again.stdout.strip() == f"prepare-multi30k.sh: {dest} is already prepared; nothing to do (pass --force " \
        "to rebuild it)"
    assert os.path.getmtime(os.path.join(dest, ".done")) == before


@needs_multi30k
def test_prepare_multi30k_word_target(multi30k_slice):
    """--word-target: source-side BPE only, whole words on the target side (those seen once become <unk>), next
    to the BPE data without touching it."""
    out, dest = multi30k_slice["out"], multi30k_slice["word_bin"]
    assert open(os.path.join(dest, ".done")).read() == \
        f"origin: local copy ({multi30k_slice['raw']})\nlowercase: 1\nsrc_bpe_merges: 500\ntgt_min_count: 2\n"
    assert os.path.isfile(os.path.join(dest, "bpecodes.de")) and not os.path.exists(os.path.join(dest, "bpecodes"))
    counts = collections.Counter(open(os.path.join(out, "tok", "train.en"), encoding="utf-8").read().split())
    tgt = [line.split()[0] for line in open(os.path.join(dest, "dict.en.txt"), encoding="utf-8")]
    real = [w for w in tgt if not w.startswith("madeupword")]
    assert sorted(real) == sorted(w for w, c in counts.items() if c >= 2)  # no BPE pieces, no hapaxes
    assert lines_of(os.path.join(out, "bpe-word", "train.en")) == lines_of(os.path.join(out, "tok", "train.en"))
    assert any("@@" in line for line in lines_of(os.path.join(out, "bpe-word", "train.de")))
    assert os.path.isfile(os.path.join(multi30k_slice["bin"], ".done"))  # the BPE data is still there


@needs_multi30k
def test_prepare_multi30k_word_target_refuses_the_reverse_direction_in_the_same_out(multi30k_slice):
    """en-de --word-target would write BPE text over bpe-word/train.en, the de-en words (the vectors' input):
    refused before anything is written, naming --out; a second --out works."""
    out = multi30k_slice["out"]
    words = open(os.path.join(out, "bpe-word", "train.en"), encoding="utf-8").read()
    proc = bash("prepare-multi30k.sh", "--src", "en", "--tgt", "de", "--bpe-merges", "500", "--out", out,
                "--word-target", env={"MULTI30K_DIR": multi30k_slice["raw"]}, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "holds 'de' as a BPE source" in proc.stderr and f"--out {out}-en-de" in proc.stderr
    assert open(os.path.join(out, "bpe-word", "train.en"), encoding="utf-8").read() == words
    assert not os.path.exists(os.path.join(out, "data-bin", "en-de-word"))
    other = out + "-en-de"
    bash("prepare-multi30k.sh", "--src", "en", "--tgt", "de", "--bpe-merges", "500", "--out", other,
         "--word-target", env={"MULTI30K_DIR": multi30k_slice["raw"]})
    assert os.path.isfile(os.path.join(other, "data-bin", "en-de-word", "bpecodes.en"))
    assert any("@@" in line for line in lines_of(os.path.join(other, "bpe-word", "train.en")))
    # the other check alone: en as a BPE source where en is already a word target (en-fr; fr is new)
    proc = bash("prepare-multi30k.sh", "--src", "en", "--tgt", "fr", "--bpe-merges", "500", "--out", out,
                "--word-target", env={"MULTI30K_DIR": multi30k_slice["raw"]}, check=False)
    assert proc.returncode == 1 and "holds 'en' as word targets" in proc.stderr


@pytest.mark.long(27)
def test_prepare_iwslt14_split_and_force(tmp_path):
    raw = fake_iwslt14(str(tmp_path / "orig"))
    out = str(tmp_path / "iwslt14")
    proc = bash("prepare-iwslt14.sh", "--bpe-merges", "300", "--out", out, env={"IWSLT14_DIR": raw})
    dest = os.path.join(out, "data-bin", "de-en")
    assert "WARNING" in proc.stdout and "160239" in proc.stdout  # the fake corpus is far from the official size
    # training text: 230 sentences + 12 talks x (title, description); cleaning keeps pairs with ratio <= 1.5
    kept = [corpus_tools.keep_pair(a.split(), b.split(), 1, 175, 1.5) for a, b in
            zip(lines_of(os.path.join(out, "tok", "train.all.de")), lines_of(os.path.join(out, "tok", "train.all.en")))]
    assert len(kept) == 230 + 2 * 12
    n_valid = sum(kept) // 23
    assert len(lines_of(os.path.join(out, "tok", "valid.en"))) == n_valid
    assert len(lines_of(os.path.join(out, "tok", "train.en"))) == sum(kept) - n_valid
    assert not any("<url>" in x or "talkid" in x for x in lines_of(os.path.join(out, "tok", "train.all.en")))
    # test = the five test sets in fairseq's order, raw text kept for sacreBLEU
    expected = [s for k in range(5) for s in sentences("en", 8, 1000 + k * 8)]
    assert lines_of(os.path.join(out, "raw", "test.en")) == expected
    assert lines_of(os.path.join(out, "tok", "test.en"))[0] == corpus_tools.tokenize([expected[0]], "en", True)[0]
    # raw valid/train are the untokenised text of exactly the kept pairs
    assert len(lines_of(os.path.join(out, "raw", "valid.de"))) == n_valid
    assert os.path.isfile(os.path.join(dest, ".done")) and os.path.isfile(os.path.join(dest, "dict.de.txt"))
    # never overwritten without --force; --force rebuilds
    stamp = os.path.getmtime(os.path.join(dest, ".done"))
    again = bash("prepare-iwslt14.sh", "--out", out, env={"IWSLT14_DIR": raw})
    assert "already prepared" in again.stdout and "--force" in again.stdout
    assert os.path.getmtime(os.path.join(dest, ".done")) == stamp
    forced = bash("prepare-iwslt14.sh", "--bpe-merges", "200", "--out", out, "--force", "--joined-dictionary",
                  env={"IWSLT14_DIR": raw})
    assert "done:" in forced.stdout
    assert "bpe_merges: 200" in open(os.path.join(dest, ".done")).read()
    assert open(os.path.join(dest, "dict.de.txt")).read() == open(os.path.join(dest, "dict.en.txt")).read()


def test_prepare_wmt14_sgm_test_joined_dictionary(tmp_path):
    raw = fake_wmt(str(tmp_path / "orig"))
    os.remove(os.path.join(raw, "news-commentary-v12.de-en.de"))  # a missing corpus is skipped with a warning
    out = str(tmp_path / "wmt14")
    proc = bash("prepare-wmt14en2de.sh", "--local", raw, "--out", out)
    assert "news-commentary-v12.de-en.{en,de} not found" in proc.stdout
    assert "allows only" in proc.stdout  # a 120-line corpus cannot give 32000 merges: warned, codes cleaned
    dest = os.path.join(out, "data-bin", "en-de")
    # test = the <seg> text of newstest2014 (src side for English, ref side for German)
    assert lines_of(os.path.join(out, "raw", "test.de")) == sentences("de", 12, 2100)
    assert lines_of(os.path.join(out, "raw", "valid.en")) == sentences("en", 10, 2000)
    assert len(lines_of(os.path.join(out, "bpe", "train.all.en"))) == 120   # europarl only
    assert open(os.path.join(dest, "dict.en.txt")).read() == open(os.path.join(dest, "dict.de.txt")).read()
    assert "joined_dictionary: 1" in open(os.path.join(dest, ".done")).read()


def test_prepare_wmt16_word_level_target(tmp_path):
    raw = fake_wmt(str(tmp_path / "orig"), nc="news-commentary-v11", dev="newstest2015", test="newstest2016",
                   sgm_dev=True)
    out = str(tmp_path / "wmt16")
    bash("prepare-wmt16-word.sh", "--local", raw, "--out", out, "--src-bpe-merges", "400", "--tgt-vocab", "200")
    dest = os.path.join(out, "data-bin", "de-en")
    src = open(os.path.join(out, "bpe", "train.de"), encoding="utf-8").read()
    tgt = open(os.path.join(out, "bpe", "train.en"), encoding="utf-8").read()
    assert "@@" in src and "@@" not in tgt                 # BPE on the source side only
    assert tgt == open(os.path.join(out, "tok", "train.en"), encoding="utf-8").read()
    words = [line.split()[0] for line in open(os.path.join(dest, "dict.en.txt"), encoding="utf-8")]
    real = [w for w in words if not w.startswith("madeupword")]
    assert len(real) == 200 - 4                             # --nwordstgt counts the 4 special symbols
    assert lines_of(os.path.join(out, "raw", "valid.de")) == sentences("de", 10, 2000)  # from the sgm
    assert os.path.isfile(os.path.join(dest, "bpecodes.de"))


def test_prepare_iwslt17_per_language_bpe(tmp_path):
    raw = fake_iwslt17(str(tmp_path / "orig"))
    out = str(tmp_path / "iwslt17")
    bash("prepare-iwslt17.sh", "--src", "fr", "--bpe-merges", "300", "--out", out, env={"IWSLT17_DIR": raw})
    dest = os.path.join(out, "data-bin", "fr-en")
    assert os.path.isfile(os.path.join(dest, "bpecodes.fr")) and os.path.isfile(os.path.join(dest, "bpecodes.en"))
    assert open(os.path.join(dest, "bpecodes.fr")).read() != open(os.path.join(dest, "bpecodes.en")).read()
    assert lines_of(os.path.join(out, "fr-en", "raw", "valid.en")) == sentences("en", 9, 1000)   # tst2014
    assert lines_of(os.path.join(out, "fr-en", "raw", "test.fr")) == sentences("fr", 9, 1009)    # tst2015


def test_prepare_errors_are_one_line(tmp_path):
    def fails(script, *args, env=None, code=1):
        proc = bash(script, *args, env=env, check=False)
        assert proc.returncode == code, proc.stdout + proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert "Traceback" not in proc.stderr
        return last

    out = str(tmp_path / "out")
    assert fails("prepare-iwslt14.sh", "--bogus", code=2) == "prepare-iwslt14.sh: unknown option '--bogus' (see --help)"
    assert "needs a value" in fails("prepare-wmt14en2de.sh", "--local", code=2)
    assert "--src is required" in fails("prepare-iwslt17.sh", code=2)
    assert "positive integer" in fails("prepare-iwslt14.sh", "--bpe-merges", "lots", code=2)
    # missing files
    assert "no train.tags.de-en.de" in fails("prepare-iwslt14.sh", "--out", out, env={"IWSLT14_DIR": str(tmp_path)})
    assert "no training corpus" in fails("prepare-wmt14en2de.sh", "--local", str(tmp_path), "--out", out)
    # misaligned test set: the check names both files and the two line counts
    raw = fake_iwslt14(str(tmp_path / "bad"), n=40, ntest=3)
    xml = os.path.join(raw, "de-en", "IWSLT14.TED.tst2011.de-en.en.xml")
    text = open(xml, encoding="utf-8").read().replace("</doc>", '<seg id="99"> extra </seg>\n</doc>')
    open(xml, "w", encoding="utf-8").write(text)
    msg = fails("prepare-iwslt14.sh", "--out", out, env={"IWSLT14_DIR": raw})
    assert "IWSLT14.TED.tst2011.de has 3 lines but" in msg and "has 4" in msg
    # bad UTF-8: file and line named
    tags = os.path.join(raw, "de-en", "train.tags.de-en.de")
    with open(tags, "ab") as f:
        f.write(b"caf\xe9 latin-1\n")
    msg = fails("prepare-iwslt14.sh", "--out", out, env={"IWSLT14_DIR": raw})
    assert msg.startswith("prepare-iwslt14.sh: ") and "train.tags.de-en.de:" in msg and "not valid UTF-8" in msg
    assert not os.path.exists(os.path.join(out, "data-bin", "de-en", ".done"))


@pytest.mark.parametrize("script,args,variable", [
    ("prepare-iwslt14.sh", [], "IWSLT14_DIR"), ("prepare-wmt14en2de.sh", [], "WMT14_DIR"),
    ("prepare-wmt16-word.sh", [], "WMT16_DIR"), ("prepare-iwslt17.sh", ["--src", "ja"], "IWSLT17_DIR")])
def test_prepare_without_local_copy_tries_the_download(tmp_path, script, args, variable):
    """No local copy: the official download is tried (through a proxy that refuses every connection, so the test
    never downloads anything) and its failure is one line that says how to give a local copy."""
    dead = "http://127.0.0.1:9"
    env = {variable: "", "http_proxy": dead, "https_proxy": dead, "HTTP_PROXY": dead, "HTTPS_PROXY": dead,
           "no_proxy": "", "NO_PROXY": ""}
    proc = bash(script, *args, "--out", str(tmp_path / "out"), env=env, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "downloading http" in proc.stdout
    assert "failed (offline?)" in proc.stderr and "--local DIR" in proc.stderr
    assert not any(".done" in files for _, _, files in os.walk(tmp_path))


# ---------------------------------------------------------------------------------------------------------------
# train.sh, evaluate.sh, the recipes (configs/DATASET/METHOD.yaml)
# ---------------------------------------------------------------------------------------------------------------
RECIPES = recipes.recipes()  # (method, dataset) for every configs/DATASET/METHOD.yaml


def print_args(method, dataset, env=None):
    return bash("train.sh", "--print-args", method, dataset, env=env).stdout.rstrip("\n").split("\n")


def test_train_sh_settings_and_errors(tmp_path):
    a = print_args("joint", "wmt14")
    assert a[a.index("--arch") + 1] == "outlayers_transformer_wmt_en_de_joint"
    assert a[a.index("--joint-dim") + 1] == "2048" and a[a.index("--criterion") + 1] == "sampled_softmax"
    assert a[a.index("--sample-ratio") + 1] == "0.25" and a[a.index("--update-freq") + 1] == "6"
    c = print_args("continuous", "wmt16-word", env={"VECTORS": "/v.vec"})
    assert c[c.index("--arch") + 1] == "outlayers_lstm_vmf_continuous" and c[c.index("--lr") + 1] == "0.0005"
    assert c[c.index("--target-vectors") + 1] == "/v.vec" and c[c.index("--criterion") + 1] == "vmf_nll"
    assert print_args("softmax", "wmt16-word")[print_args("softmax", "wmt16-word").index("--lr") + 1] == "0.0002"
    s = print_args("shared-private", "iwslt14")
    assert s[s.index("--embeddings") + 1] == "shared-private" and s[s.index("--output-layer") + 1] == "tied"
    assert s[s.index("--shared-private-lambdas") + 1] == "0.9,0.7,0.5"
    assert print_args("tied", "multi30k")[1:3] == ["--user-dir", os.path.join(REPO, "fairseq_outlayers")]
    # extra options come last, so they win in fairseq's parser
    assert bash("train.sh", "--print-args", "tied", "multi30k", "--lr", "1").stdout.split("\n")[-3:-1] == ["--lr", "1"]
    bad = bash("train.sh", "magic", "multi30k", check=False)
    assert bad.returncode == 2 and "unknown METHOD 'magic'" in bad.stderr and "shared-private" in bad.stderr
    bad = bash("train.sh", "tied", "wmt99", check=False)
    assert bad.returncode == 2 and "unknown DATASET 'wmt99'; choose multi30k, iwslt14" in bad.stderr
    assert bash("train.sh", "--list").stdout.split("\n")[:-1] == [f"{m} {d}" for m, d in RECIPES]
    missing = bash("train.sh", "tied", "iwslt14", env={"DATA_BIN": "/nonexistent"}, check=False)
    assert missing.returncode == 1 and "prepare the data first" in missing.stderr
    fasttext = {"DATA_BIN": "/d/data-bin/de-en-word", "VECTORS_FROM": "fasttext"}
    dry = bash("train.sh", "--dry-run", "continuous", "multi30k", env=fasttext).stdout
    assert "train_target_vectors.py --input /d/bpe-word/train.en --output /d/vectors.word.en.300d.vec" in dry
    assert "+ fairseq-train /d/data-bin/de-en-word --user-dir" in dry and not os.path.exists("/d")
    assert "--target-vectors-center" in dry and "recipe: configs/multi30k/continuous.yaml" in dry
    dry = bash("train.sh", "--dry-run", "continuous", "iwslt14",
               env={"DATA_BIN": "/d/data-bin/de-en", "VECTORS_FROM": "fasttext"}).stdout
    assert "train_target_vectors.py --input /d/bpe/train.en --output /d/vectors.en.300d.vec" in dry
    assert "--target-vectors-center" not in dry
    # the default: two stages, the softmax recipe on the same data, then its output matrix exported
    dry = bash("train.sh", "--dry-run", "continuous", "multi30k", "--cpu", "--max-tokens", "999", "--lr", "1",
               env={"DATA_BIN": "/d/data-bin/de-en-word", "SAVE_DIR": "/c/vmf"}).stdout.split("\n")
    trains = [shlex.split(line)[2:] for line in dry if line.startswith("+ fairseq-train ")]
    assert len(trains) == 2 and trains[0][0] == trains[1][0] == "/d/data-bin/de-en-word"
    first, second = trains
    assert first[first.index("--arch") + 1] == "outlayers_transformer_small" and "--target-vectors" not in first
    assert first[-5:] == ["--cpu", "--max-tokens", "999", "--max-update", "800"]  # device/batch options, no --lr 1
    assert first[first.index("--save-dir") + 1] == "/c/softmax-vectors-800"
    assert "+ outlayers-vectors export /c/softmax-vectors-800/checkpoint_last.pt /c/softmax-vectors-800/output.en.vec" \
        in dry
    assert second[second.index("--target-vectors") + 1] == "/c/softmax-vectors-800/output.en.vec"
    assert second[-5:] == ["--cpu", "--max-tokens", "999", "--lr", "1"]
    assert sum(line.startswith("== afterwards:") for line in dry) == 1
    # VECTORS_UPDATES=full: the whole softmax recipe (its own --max-update), its best checkpoint exported
    dry = bash("train.sh", "--dry-run", "continuous", "multi30k", "--cpu",
               env={"DATA_BIN": "/d/data-bin/de-en-word", "SAVE_DIR": "/c/vmf", "VECTORS_UPDATES": "full"}).stdout
    first = shlex.split(next(line for line in dry.split("\n") if line.startswith("+ fairseq-train ")))[2:]
    assert first[-3:] == ["--save-dir", "/c/softmax-vectors-full", "--cpu"] and first.count("--max-update") == 1
    assert first[first.index("--max-update") + 1] == "3000"  # configs/multi30k/softmax.yaml's
    export = ("+ outlayers-vectors export /c/softmax-vectors-full/checkpoint_best.pt "
              "/c/softmax-vectors-full/output.en.vec")
    assert export in dry
    dry = bash("train.sh", "--dry-run", "continuous", "iwslt14",
               env={"VECTORS_FROM": "/m/base.pt", "VECTORS_UPDATES": "5"}).stdout
    assert "+ outlayers-vectors export /m/base.pt /m/base.output.en.vec" in dry and dry.count("+ fairseq-train") == 1
    for env, message in (({"VECTORS_FROM": "glove"}, "VECTORS_FROM must be softmax, fasttext or a softmax checkpoint"),
                         ({"VECTORS_UPDATES": "0"}, "VECTORS_UPDATES must be a positive number of updates or full"),
                         ({"VECTORS_UPDATES": "converged"}, "got 'converged'")):
        bad = bash("train.sh", "--dry-run", "continuous", "iwslt14", env=env, check=False)
        assert bad.returncode == 1 and message in bad.stderr
    for lang in ("de", "en"):
        (tmp_path / f"dict.{lang}.txt").write_text("a 1\n")
    gone = bash("train.sh", "continuous", "iwslt14", env={"VECTORS_FROM": "/nonexistent/c.pt", "DATA_BIN": str(tmp_path)},
                check=False)
    assert gone.returncode == 1 and "/nonexistent/c.pt not found" in gone.stderr


def test_train_sh_first_stage_failures(tmp_path):
    """The softmax first stage of a continuous recipe: a failure stops train.sh with one line naming its log; an
    abort at interpreter exit (fairseq's prefetch thread) after fairseq logged the end of training is not one.
    fairseq-train and outlayers-vectors are stand-ins here; train.sh's own logic is what runs."""
    fake = tmp_path / "bin"
    fake.mkdir()
    # this venv's Python, called by its own path: a link to it in another folder would start the base interpreter,
    # without the venv's packages
    (fake / "python").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    (fake / "fairseq-train").write_text(
        "#!/bin/bash\n"
        "case \" $* \" in *' --output-layer softmax '*) ;; *) echo SECOND STAGE; exit 0;; esac\n"
        "[ \"$FAKE\" = fail ] && { echo 'fairseq-train: error: bad'; exit 2; }\n"
        "while [ $# -gt 0 ]; do [ \"$1\" = --save-dir ] && touch \"$2/checkpoint_last.pt\"; shift; done\n"
        "echo 'done training in 1.0 seconds'; kill -ABRT $$\n")
    (fake / "outlayers-vectors").write_text("#!/bin/bash\necho exported; echo '1 2' > \"$3\"\n")
    for name in ("python", "fairseq-train", "outlayers-vectors"):
        os.chmod(fake / name, 0o755)
    data = tmp_path / "data"
    data.mkdir()
    for lang in ("de", "en"):
        (data / f"dict.{lang}.txt").write_text("a 1\n")
    env = {"VENV_BIN": str(fake), "DATA_BIN": str(data), "SAVE_DIR": str(tmp_path / "c" / "vmf")}
    stage = tmp_path / "c" / "softmax-vectors-800"
    bad = bash("train.sh", "continuous", "iwslt14", env=dict(env, FAKE="fail"), check=False)
    assert bad.returncode == 1 and "SECOND STAGE" not in bad.stdout
    assert f"the first stage (softmax, {stage}) failed; see {stage}/train.log" in bad.stderr
    assert not (stage / "output.en.vec").exists()
    ok = bash("train.sh", "continuous", "iwslt14", env=env)
    assert "exported" in ok.stdout and "SECOND STAGE" in ok.stdout and (stage / "output.en.vec").is_file()
    assert "done training in" in (stage / "train.log").read_text()


def _plain(value):
    from omegaconf import OmegaConf

    value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


@pytest.mark.parametrize("method,dataset", RECIPES)
def test_every_recipe_round_trips_through_fairseqs_parser(method, dataset):
    """A recipe converted to fairseq-train arguments and parsed by fairseq-train's own parser (with the plugin's
    --user-dir) gives back every value of the YAML, in the group the YAML puts it in (so fairseq-hydra-train reads
    the same): the converter's naming rule is fairseq's."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    path = recipes.recipe_path(method, dataset)
    recipe = recipes.load_recipe(path)
    values = {f"{g}.{k}": f"/machine/{g}.{k}" for g, o in recipe.items() for k, v in o.items() if v == "???"}
    recipe = recipes.with_values(recipe, values)
    argv = recipes.fairseq_train_args(recipe, path) + ["--user-dir", os.path.join(REPO, "fairseq_outlayers")]
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    cfg = convert_namespace_to_omegaconf(args)
    choices = {"task": "task", "model": "arch", "criterion": "criterion", "optimizer": "optimizer",
               "lr_scheduler": "lr_scheduler"}
    for group, opts in recipe.items():
        for key, value in opts.items():
            if group == "generation":  # decoding settings, not fairseq-train's: a field of fairseq's group
                assert key in cfg.generation, f"{path}: fairseq has no generation.{key}"
                continue
            if key == "_name":
                got = getattr(args, choices[group])
            elif group == "model":  # the plugin's models keep their options in the argparse namespace
                got = getattr(args, key)
            else:
                assert key in cfg[group], f"{path}: fairseq has no {group}.{key}"
                got = cfg[group][key]
            assert _plain(got) == _plain(value), f"{path}: {group}.{key}"


@needs_multi30k
@pytest.mark.parametrize("method,dataset", RECIPES)
def test_every_recipe_builds_at_its_own_sizes(multi30k_slice, method, dataset):
    """Each recipe's model, at the recipe's own sizes (no tiny overrides), builds on the slice's dictionaries and
    scores a batch: a recipe whose dimensions contradict each other (as the wmt16-word tied recipes did: a 1024-d
    LSTM state tied to 512-d embeddings) fails here. Recipes that need a file made first (pairing, vectors) are
    covered at tiny sizes by test_every_recipe_trains_and_translates."""
    from fairseq import options, tasks

    path = recipes.recipe_path(method, dataset)
    recipe = recipes.load_recipe(path)
    needed = [f"{g}.{k}" for g, o in recipe.items() for k, v in o.items() if v == "???" and f"{g}.{k}" != "task.data"]
    if needed:
        pytest.skip(f"needs {', '.join(needed)}")
    recipe = recipes.with_values(recipe, {"task.data": multi30k_slice["bin"]})
    argv = recipes.fairseq_train_args(recipe, path) + ["--user-dir", os.path.join(REPO, "fairseq_outlayers"),
                                                       "--source-lang", "de", "--target-lang", "en"]
    args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    task = tasks.setup_task(args)
    model = task.build_model(args)
    src = torch.tensor([[5, 6, 7, 2]])
    out = model(src, torch.tensor([4]), torch.tensor([[2, 5, 6]]))
    lprobs = model.get_normalized_probs(out, log_probs=True)
    torch.testing.assert_close(lprobs.exp().sum(-1), torch.ones(1, 3))


def test_bad_recipe_files_give_one_line_errors(tmp_path):
    configs = tmp_path / "configs"
    (configs / "toy").mkdir(parents=True)
    (configs / "datasets.yaml").write_text("toy:\n  prepared: work/toy\n  reference: raw/test\n")
    good = open(os.path.join(REPO, "configs", "iwslt14", "joint.yaml"), encoding="utf-8").read()
    (configs / "toy" / "joint.yaml").write_text(good)
    assert recipes.recipes(str(configs)) == [("joint", "toy")]
    assert recipes.settings("joint", "toy", str(configs))["fill"] == "task.data"

    def error(method="joint", dataset="toy"):
        with pytest.raises(recipes.RecipeError) as e:
            recipes.settings(method, dataset, str(configs))
        assert "\n" not in str(e.value)
        return str(e.value)

    assert "unknown METHOD 'tied' for toy; choose joint" in error("tied")
    assert "unknown DATASET 'iwslt14'; choose toy" in error(dataset="iwslt14")
    bad = configs / "toy" / "joint.yaml"
    bad.write_text(good.replace("  max_tokens: 4096", "  max_tokens: [4096"))
    assert "joint.yaml: not valid YAML at line" in error() and "fix the file" in error()
    bad.write_text(good.replace("joint_dim: 512", "joint_dim: 512\n  share_all_embeddings: false"))
    assert "model.share_all_embeddings: false has no fairseq-train flag; remove the line" in error()
    bad.write_text(good.replace("  source_lang: de\n", ""))
    assert "the task group needs source_lang and target_lang" in error()
    bad.write_text("- a list\n")
    assert "must map fairseq's groups" in error()
    (configs / "datasets.yaml").write_text("toy:\n  prepared: work/toy\n")
    assert "datasets.yaml: toy must have prepared and reference" in error()
    with pytest.raises(recipes.RecipeError, match=r"task.data is \?\?\? .*set it with task.data=VALUE"):
        recipes.fairseq_train_args({"task": {"data": "???"}})
    assert recipes.main(["args", "joint", "iwslt14", "task.data"]) == 1


@needs_multi30k
@pytest.mark.long(40)
def test_train_and_evaluate_end_to_end(multi30k_slice, tmp_path):
    """train.sh softmax multi30k (tiny model, 4 updates) -> evaluate.sh: sacreBLEU with signature against the raw
    reference, tokenised BLEU, rare-word F1; results are never overwritten without --force."""
    save = str(tmp_path / "ckpt")
    env = {"DATA_BIN": multi30k_slice["bin"], "SAVE_DIR": save}
    proc = bash("train.sh", "softmax", "multi30k", *TINY, "--max-update", "4", "--warmup-updates", "2", env=env)
    assert "+ fairseq-train " + multi30k_slice["bin"] in proc.stdout
    assert "num_updates=4" in proc.stdout + proc.stderr or "num_updates 4" in proc.stdout + proc.stderr
    ckpt = os.path.join(save, "checkpoint_last.pt")
    ref = os.path.join(multi30k_slice["out"], "raw", "test_2016_flickr.en")
    ev = bash("evaluate.sh", ckpt, multi30k_slice["bin"], "--beam", "2", "--lowercase", "--raw-ref", ref, "--cpu",
              "--rare-f1", os.path.join(multi30k_slice["out"], "tok", "train.en"),
              "--gen-args", "--max-len-a 1 --max-len-b 5")
    out = os.path.join(save, "eval-checkpoint_last-test-beam2-lenpen1.0")
    scores = json.load(open(os.path.join(out, "scores.json")))
    assert scores["sentences"] == 300            # 300 is not a multiple of 8: no sentence may be dropped
    assert "case:lc" in scores["sacrebleu_signature"] and "tok:13a" in scores["sacrebleu_signature"]
    assert "tok:none" in scores["tokenized_bleu_signature"]
    assert set(scores["rare_word_f1"]) >= {"unseen", "1", "1000+"}
    assert "sacreBLEU" in ev.stdout and len(lines_of(os.path.join(out, "hyp.detok"))) == 300
    # the tokenised reference is the raw reference tokenised exactly as the preparation did (no <<unk>>)
    assert lines_of(os.path.join(out, "ref.tok")) == \
        lines_of(os.path.join(multi30k_slice["out"], "tok", "test_2016_flickr.en"))
    tok = sacrebleu.metrics.BLEU(tokenize="none").corpus_score(lines_of(os.path.join(out, "hyp.tok")),
                                                               [lines_of(os.path.join(out, "ref.tok"))])
    assert scores["tokenized_bleu"] == round(tok.score, 2)
    hyp = lines_of(os.path.join(out, "hyp.detok"))
    refs = [x.lower() for x in lines_of(ref)]
    assert scores["sacrebleu"] == round(sacrebleu.corpus_bleu(hyp, [refs]).score, 2)
    again = bash("evaluate.sh", ckpt, multi30k_slice["bin"], "--beam", "2", check=False)
    assert again.returncode == 1 and "already exists; pass --force" in again.stderr
    # --replace-unk: force <unk> everywhere (unknown-word penalty -100), each is then replaced by an aligned word
    unk = bash("evaluate.sh", ckpt, multi30k_slice["bin"], "--beam", "1", "--cpu", "--replace-unk", "--out",
               str(tmp_path / "unk"), "--gen-args", "--max-len-a 0 --max-len-b 3 --unkpen -100")
    hyps = lines_of(str(tmp_path / "unk" / "hyp.tok"))
    hyp_words = " ".join(hyps).split()
    assert "<unk>" not in hyp_words and len(hyp_words) >= 300
    srcs = {int(x.split("\t")[0][2:]): x.split("\t")[1] for x in lines_of(str(tmp_path / "unk" / "generate.out"))
            if x.startswith("S-")}
    for k, h in enumerate(hyps):  # every word is a whole word of its own source sentence
        assert set(h.split()) <= set(source_words(srcs[k].split())), k
    assert json.load(open(tmp_path / "unk" / "scores.json"))["unk_replaced"] == len(hyp_words)
    assert "<unk> replaced by the aligned source word" in unk.stdout
    short = tmp_path / "ten.en"
    write(str(short), lines_of(ref)[:10])
    mismatch = bash("evaluate.sh", ckpt, multi30k_slice["bin"], "--beam", "1", "--raw-ref", str(short), "--out",
                    str(tmp_path / "e2"), "--cpu", "--gen-args", "--max-len-a 0 --max-len-b 2", check=False)
    assert mismatch.returncode == 1 and "give the reference of the same split" in mismatch.stderr


@needs_multi30k
@pytest.mark.long(20)
def test_train_sh_makes_fasttext_vectors(multi30k_slice, tmp_path):
    """continuous with VECTORS_FROM=fasttext: train.sh creates the target vectors when missing, then trains (the
    pairing file of shared-private: test_every_recipe_trains_and_translates)."""
    work = tmp_path / "work"
    shutil.copytree(multi30k_slice["out"], work)
    # continuous on multi30k: the word-level data (its default when DATA_BIN is unset), vectors on its text
    env = {"DATA_BIN": str(work / "data-bin" / "de-en-word"), "SAVE_DIR": str(tmp_path / "vmf"), "VECTOR_DIM": "16",
           "VECTORS_FROM": "fasttext"}
    proc = bash("train.sh", "continuous", "multi30k", *TINY, "--max-update", "2", env=env)
    vec = work / "vectors.word.en.16d.vec"
    assert vec.is_file() and open(vec).readline().split()[1] == "16"
    assert f"--input {work}/bpe-word/train.en" in proc.stdout
    assert proc.stdout.count("--workers 1") == 1  # one gensim thread on multi30k: the same vectors on every run
    state = torch.load(str(tmp_path / "vmf" / "checkpoint_last.pt"), map_location="cpu", weights_only=False)
    assert state["cfg"]["model"].continuous_dim == 16 and state["cfg"]["criterion"]["_name"] == "vmf_nll"
    assert state["cfg"]["model"].target_vectors_center is True


@needs_multi30k
@pytest.mark.long(31)
def test_hydra_yaml_gives_the_same_run_as_train_sh(multi30k_slice, tmp_path):
    """fairseq-hydra-train with configs/multi30k/joint.yaml and `train.sh joint multi30k` with the same tiny
    overrides build the same model and train it to the same weights (same seed, 2 updates)."""
    small = {"encoder_layers": 1, "decoder_layers": 1, "encoder_embed_dim": 32, "decoder_embed_dim": 32,
             "encoder_ffn_embed_dim": 64, "decoder_ffn_embed_dim": 64, "encoder_attention_heads": 2,
             "decoder_attention_heads": 2}
    flags = [x for k, v in small.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    common = ["--max-update", "2", "--cpu", "--num-workers", "0", "--no-epoch-checkpoints", "--max-tokens", "1500"]
    a = str(tmp_path / "sh")
    bash("train.sh", "joint", "multi30k", *flags, *common, env={"DATA_BIN": multi30k_slice["bin"], "SAVE_DIR": a})
    b = str(tmp_path / "hydra")
    run([tool("fairseq-hydra-train"), "--config-dir", os.path.join(REPO, "configs", "multi30k"),
         "--config-name", "joint", f"common.user_dir={os.path.join(REPO, 'fairseq_outlayers')}",
         f"task.data={multi30k_slice['bin']}", "common.cpu=true", "optimization.max_update=2",
         "dataset.num_workers=0", "dataset.max_tokens=1500", "checkpoint.no_epoch_checkpoints=true",
         f"checkpoint.save_dir={b}", f"hydra.run.dir={tmp_path}/hydra_out"]
        + [f"+model.{k}={v}" for k, v in small.items()])
    sa = torch.load(os.path.join(a, "checkpoint_last.pt"), map_location="cpu", weights_only=False)
    sb = torch.load(os.path.join(b, "checkpoint_last.pt"), map_location="cpu", weights_only=False)
    for group in ("criterion", "optimizer", "lr_scheduler"):
        assert dict(sa["cfg"][group]) == dict(sb["cfg"][group]), group
    assert list(sa["cfg"]["optimization"]["lr"]) == list(sb["cfg"]["optimization"]["lr"])
    ma, mb = (vars(m) if hasattr(m, "__dict__") else dict(m) for m in (sa["cfg"]["model"], sb["cfg"]["model"]))
    for key in ("output_layer", "joint_dim", "joint_activation", "joint_structure", "dropout", "encoder_layers",
                "decoder_embed_dim", "encoder_ffn_embed_dim", "share_all_embeddings"):
        assert ma[key] == mb[key], key
    assert sa["model"].keys() == sb["model"].keys()
    for k in sa["model"]:
        assert torch.equal(sa["model"][k], sb["model"][k]), k


# the decoder state wider than the embeddings, as in the recipes (1024 and 512), and the output size left to the
# arch: the tied recipes go through its projection
TINY_LSTM = ["--encoder-embed-dim", "32", "--encoder-hidden-size", "16", "--decoder-embed-dim", "32",
             "--decoder-hidden-size", "48", "--cpu", "--num-workers", "0",
             "--no-epoch-checkpoints", "--no-progress-bar", "--batch-size", "32"]


@needs_multi30k  # in the default run (CI): a recipe that stops working fails CI
def end_to_end_recipes():
    """By default each method trains once and each dataset at least once: every dataset but the first takes its own
    method (one that trains once and needs no aligner), the first dataset the methods left over; every other pair
    with ``--run-slow`` (``make test-slow``). Each pair's own options are built at its own sizes above by default
    (``test_every_recipe_builds_at_its_own_sizes``); this test adds train.sh's and evaluate.sh's commands."""
    default = _default_pairs()
    return [pytest.param(method, dataset, id=f"{method}-{dataset}",
                         marks=(pytest.mark.long(30 if method in TRAINS_TWICE else 15),) if (method, dataset) in
                         default else (pytest.mark.slow,))
            for method, dataset in RECIPES]


def _default_pairs():
    """The (method, dataset) pairs that train by default: the other datasets in order, each with the first method not
    yet taken that may leave the first dataset; the first dataset with every method left (but RUN_ELSEWHERE's)."""
    methods = list(dict.fromkeys(m for m, _ in RECIPES))
    datasets = list(dict.fromkeys(d for _, d in RECIPES))
    movable = [m for m in methods if m not in TRAINS_TWICE | NEEDS_ALIGNER and m not in
               {m for m, _ in RUN_ELSEWHERE}]
    pairs = {(movable.pop(0), d) for d in datasets[1:]}
    taken = {m for m, _ in pairs} | {m for m, _ in RUN_ELSEWHERE}
    return pairs | {(m, datasets[0]) for m in methods if m not in taken}


#: methods whose recipe trains twice (a softmax for the target vectors, then the method): on the first dataset
TRAINS_TWICE = {"continuous"}
#: methods that skip where the built-in aligner has no build (Python 3.13): on the first dataset, so that every other
#: dataset trains everywhere
NEEDS_ALIGNER = {"shared-private"}
#: pairs whose train.sh and evaluate.sh commands another default test runs already, with more checks: with
#: ``--run-slow`` only
RUN_ELSEWHERE = {("softmax", "multi30k"): "test_train_and_evaluate_end_to_end"}


@pytest.mark.parametrize("method,dataset", end_to_end_recipes())
def test_every_recipe_trains_and_translates(multi30k_slice, tmp_path, method, dataset):
    """A METHOD x DATASET recipe of train.sh builds its model (presets, method options, criterion), trains
    2 updates on the Multi30k slice (tiny sizes) and evaluate.sh translates with the checkpoint."""
    if method == "shared-private":  # train.sh makes the pairing file with the built-in fast_align
        pytest.importorskip("systran_align", reason=NO_ALIGNER)
    work = tmp_path / "work"
    shutil.copytree(multi30k_slice["out"], work)
    data = str(work / "data-bin" / ("de-en-word" if (method, dataset) == ("continuous", "multi30k") else "de-en"))
    save = str(tmp_path / "ckpt")
    tiny = TINY_LSTM if dataset == "wmt16-word" else TINY + ["--update-freq", "1"]
    # continuous: the default two stages, a tiny softmax first (2 updates), its output matrix as the vectors
    env = {"DATA_BIN": data, "SAVE_DIR": save, "VECTORS_UPDATES": "2", "VECTORS_ARGS": " ".join(tiny)}
    proc = bash("train.sh", method, dataset, *tiny, "--max-update", "2", "--max-epoch", "0", env=env)
    if method == "shared-private":  # made when missing, beside the data's text
        assert "pairing file" in proc.stdout and len(list(work.glob("pairing.*.txt"))) == 1
    ckpt = os.path.join(save, "checkpoint_last.pt")
    src, tgt = ("en", "de") if dataset == "wmt14" else ("de", "en")
    ref = os.path.join(multi30k_slice["out"], "raw", f"test_2016_flickr.{tgt}")
    bash("evaluate.sh", ckpt, data, "--beam", "2", "--src", src, "--tgt", tgt, "--lowercase", "--raw-ref", ref, "--cpu",
         "--gen-args", "--max-len-a 0 --max-len-b 4")
    out = os.path.join(save, "eval-checkpoint_last-test-beam2-lenpen1.0")
    assert json.load(open(os.path.join(out, "scores.json")))["sentences"] == 300
    if method == "continuous":
        first = torch.load(os.path.join(tmp_path, "softmax-vectors-2", "checkpoint_last.pt"), map_location="cpu",
                           weights_only=False)
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        assert first["cfg"]["model"].output_layer == "softmax" and "vmf" not in first["cfg"]["criterion"]["_name"]
        vec = os.path.join(tmp_path, "softmax-vectors-2", f"output.{tgt}.vec")
        assert state["cfg"]["model"].continuous_dim == int(open(vec).readline().split()[1])
        assert state["cfg"]["model"].target_vectors == vec


def test_the_default_tier_trains_every_method_and_every_dataset():
    """docs/development.md: by default each method trains and translates once (the softmax pair in
    test_train_and_evaluate_end_to_end) and each dataset at least once, the two-stage and aligner methods on the first
    dataset; --run-slow adds every other pair."""
    params = end_to_end_recipes()
    assert sorted(tuple(p.values) for p in params) == sorted(RECIPES)
    default = [tuple(p.values) for p in params if not any(m.name == "slow" for m in p.marks)]
    ran = default + list(RUN_ELSEWHERE)
    methods, datasets = {m for m, _ in RECIPES}, [d for d in dict.fromkeys(d for _, d in RECIPES)]
    assert sorted(m for m, _ in ran) == sorted(methods)  # each method once
    assert {d for _, d in ran} == set(datasets)
    assert all(d == datasets[0] for m, d in ran if m in TRAINS_TWICE | NEEDS_ALIGNER)
    assert len(default) == len(methods) - len(RUN_ELSEWHERE)
