"""Unknown-word replacement: the fast_align lexicon (``python -m fairseq_outlayers.tools.pairing lexicon``), the
replacement rule (``fairseq_outlayers.tools.evaluation.unknown_words``), ``outlayers-generate`` / ``outlayers-interactive
--replace-unk LEXICON`` and ``scripts/evaluate.sh --replace-unk LEXICON``."""
import json
import os
import sys
from collections import Counter

import numpy as np
import pytest
import torch
from fairseq import utils as fairseq_utils
from fairseq.data import Dictionary

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.tools.evaluation import unknown_words as U
from fairseq_outlayers.tools.pairing import lexicon as L
from harness import NO_ALIGNER, REPO, USER_DIR, make_corpus, run, tool, train


def write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    return str(path)


def pairing_cli(*args, check=True):
    return run([sys.executable, "-m", "fairseq_outlayers.tools.pairing", *args], check=check)


# ------------------------------------------------------------------------------------------------------------
# the lexicon
# ------------------------------------------------------------------------------------------------------------

def test_lexicon_exact_entries_from_known_links(tmp_path):
    # BPE on both sides; links given as a Pharaoh file, so every count is known
    src = ["das Haus@@ tier ist klein", "das Haus ist gross", "ein Tier", "das <unk> ist"]
    tgt = ["the pet is small", "the house is big", "an ani@@ mal", "the thing is"]
    links = ["0-0 1-1 2-1 3-2 4-3", "0-0 1-1 2-2 3-3", "0-0 1-1 1-2", "0-0 1-1 2-2"]
    s, t, a = write(tmp_path / "s", src), write(tmp_path / "t", tgt), write(tmp_path / "a", links)
    lex, stats = L.make_lexicon(s, t, aligner="pharaoh", alignment=a)
    # "Tier" is linked only to the pieces "ani@@" and "mal" (not words); "<unk>" is special: neither is an entry.
    # "Haus@@" and "tier" -> "pet" once each; "Haus" -> "house"; "das" -> "the" three times; "ist" -> "is" 3x
    assert dict(lex) == {"das": "the", "Haus@@": "pet", "tier": "pet", "ist": "is", "klein": "small",
                         "Haus": "house", "gross": "big", "ein": "an"}
    assert lex.details["das"] == (3, 1.0) and lex.details["tier"] == (1, 1.0)
    assert stats == {"sentences": 4, "links": 15, "kept_links": 12, "words": 28, "entries": 8, "most_links": 3}
    # ties: more links first, then the more frequent target word, then alphabetical order
    pairs = Counter({("x", "b"): 2, ("x", "a"): 2, ("x", "c"): 1, ("y", "b"): 1, ("y", "a"): 1,
                     ("z", "q"): 1, ("z", "p"): 1})
    freq = Counter({"a": 5, "b": 9, "c": 1, "p": 1, "q": 1})
    lex2 = L.lexicon_from_counts(pairs, freq)
    assert dict(lex2) == {"x": "b", "y": "b", "z": "p"}
    assert lex2.details["x"] == (2, 0.4)
    assert dict(L.lexicon_from_counts(pairs, freq, min_count=2)) == {"x": "b"}
    with pytest.raises(OutlayersConfigError, match="--min-count must be at least 1"):
        L.lexicon_from_counts(pairs, freq, min_count=0)
    # the file: 'x TAB y TAB count TAB A(y|x)', most linked first; fairseq's own reader takes columns 1-2
    out = tmp_path / "lex.txt"
    L.write_lexicon(str(out), lex)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ["das\tthe\t3\t1.000000", "ist\tis\t3\t1.000000"] and len(lines) == 8
    assert fairseq_utils.load_align_dict(str(out)) == dict(lex) == U.read_lexicon(str(out))
    with pytest.raises(OutlayersConfigError, match="exists; choose another --out path or pass --force"):
        L.write_lexicon(str(out), lex)
    assert L.real_word_positions(["a@@", "b", "c", "<unk>", "madeupword0001", "d@@"]) == \
        [False, False, True, False, False, False]


def test_lexicon_cli_with_fast_align(unk_setup, tmp_path):
    """fast_align (both directions, grow-diag-final) on the synthetic corpus, whose word translation is known:
    s0..s3 are kept as they are, s_i -> T_i for the others; every entry must be exactly that. (The lexicon was
    written by ``python -m fairseq_outlayers.tools.pairing lexicon`` in the fixture.)"""
    pytest.importorskip("systran_align", reason=NO_ALIGNER)
    assert "40 source units with a translation" in unk_setup["cli_stdout"]
    assert U.read_lexicon(unk_setup["full_lexicon"]) == {f"s{i}": (f"s{i}" if i < 4 else f"T{i}") for i in range(40)}
    # never overwritten; the source text must be in the model's units; a broken lexicon names its line
    raw, out = unk_setup["raw"], unk_setup["full_lexicon"]
    texts = ["--src-text", f"{raw}/train.de", "--tgt-text", f"{raw}/train.en"]
    assert L.main(texts + ["--out", out]) == 1
    d = Dictionary()
    d.add_symbol("T5")
    d.save(str(tmp_path / "dict.xx.txt"))
    with pytest.raises(OutlayersConfigError, match=r"only 0.0% of the tokens of .* the units the model reads"):
        L.check_source_units(f"{raw}/train.de", str(tmp_path / "dict.xx.txt"))
    assert L.main(texts + ["--out", str(tmp_path / "l2"), "--src-dict", str(tmp_path / "dict.xx.txt")]) == 1
    assert not os.path.exists(tmp_path / "l2")
    bad = write(tmp_path / "bad.txt", ["a b", "", "c"])
    with pytest.raises(OutlayersConfigError, match=r"bad.txt:3: expected 'source_unit target_word'"):
        U.read_lexicon(bad)
    with pytest.raises(OutlayersConfigError, match="does not exist; build one with"):
        U.read_lexicon(str(tmp_path / "missing.txt"))


# ------------------------------------------------------------------------------------------------------------
# the replacement rule and fairseq's post-processing
# ------------------------------------------------------------------------------------------------------------

def test_replacement_rule():
    src = "ein bo@@ st@@ on ter@@ ri@@ er läuft".split()
    lex = {"ter@@": "terrier", "läuft": "runs"}
    hyp = "a <unk> <unk> <unk> <unk> <unk>".split()
    links = {0: 0, 1: 2, 2: 4, 3: 7, 5: 99}  # position 4 has no link, position 5 a link outside the source
    out, from_lexicon, copied = U.replace_unknowns(hyp, src, links, lex)
    assert out == "a boston terrier runs <unk> <unk>".split() and (from_lexicon, copied) == (2, 1)
    # every alignment format fairseq produces
    assert U.links_by_target([(3, 0), (1, 1), (2, 1)]) == {0: 3, 1: 1}  # pairs (fairseq >= 0.10); first wins
    assert U.links_by_target("3-0 1-1") == {0: 3, 1: 1}
    assert U.links_by_target(torch.tensor([4, 2])) == {0: 4, 1: 2}  # one source index per target (old fairseq)
    assert U.links_by_target(torch.empty(0)) is None and U.links_by_target([]) == {}


def rewrite(lines, **kw):
    """What ReplaceUnkOutput writes for fairseq's printed ``lines`` (written in odd chunks, as print() may)."""
    import io

    out = io.StringIO()
    stream = U.ReplaceUnkOutput(out, **kw)
    text = "".join(line + "\n" for line in lines)
    for k in range(0, len(text), 7):
        stream.write(text[k:k + 7])
    stream.close()
    return out.getvalue().splitlines(), stream


def test_output_rewriter_replaces_before_removing_bpe():
    """The H- line is rewritten from the BPE-level tokens and the A- line, then BPE is removed; D- follows H-;
    the A- line is shown only when asked; every other line passes unchanged."""
    printed = ["S-0\tdas Kat@@ ze Haus ist", "T-0\tthe cat house is", "W-0\t0.010\tseconds",
               "H-0\t-0.5\tthe <unk> ho@@ use <unk>", "D-0\t-0.5\tthe <unk> ho@@ use <unk>",
               "P-0\t-0.1 -0.2 -0.3 -0.4 -0.5 -0.6", "A-0\t0-0 1-1 3-2 3-3 4-4", "I-0\t3",
               "H-0\t-0.9\t<unk> <unk>", "D-0\t-0.9\t<unk> <unk>", "P-0\t-0.1 -0.2 -0.3", "A-0\t9-0",
               "2026-01-01 | INFO | fairseq_cli.generate | NOTE: a log line"]
    lines, stream = rewrite(printed, lexicon={"ist": "is"}, post_process="@@ ")
    assert lines == ["S-0\tdas Katze Haus ist", "T-0\tthe cat house is", "W-0\t0.010\tseconds",
                     "H-0\t-0.5\tthe Katze house is", "D-0\t-0.5\tthe Katze house is",
                     "P-0\t-0.1 -0.2 -0.3 -0.4 -0.5 -0.6", "I-0\t3",
                     "H-0\t-0.9\t<unk> <unk>", "D-0\t-0.9\t<unk> <unk>", "P-0\t-0.1 -0.2 -0.3",
                     "2026-01-01 | INFO | fairseq_cli.generate | NOTE: a log line"]
    assert (stream.counts["lexicon"], stream.counts["copied"]) == (1, 1)
    # --print-alignment kept, no BPE removal, a detokeniser for D-
    lines, _ = rewrite(printed[:7], lexicon={}, keep_alignment=True, decode=str.upper)
    assert lines[3:] == ["H-0\t-0.5\tthe Katze ho@@ use ist", "D-0\t-0.5\tTHE KATZE HO@@ USE IST",
                         "P-0\t-0.1 -0.2 -0.3 -0.4 -0.5 -0.6", "A-0\t0-0 1-1 3-2 3-3 4-4"]


def test_output_rewriter_scores_the_replaced_hypotheses_as_fairseq_generate():
    """The final score line is fairseq's scorer on the rewritten first hypotheses; --quiet keeps only it."""
    from fairseq import scoring
    from fairseq.data import Dictionary

    printed = ["S-1\tein Hund", "T-1\ta dog", "H-1\t-1\ta <unk>", "D-1\t-1\ta <unk>", "P-1\t-1 -1 -1",
               "A-1\t0-0 1-1", "S-0\tdie Katze", "T-0\tthe cat", "H-0\t-1\tthe <unk>", "D-0\t-1\tthe <unk>",
               "P-0\t-1 -1 -1", "A-0\t0-0 1-1", "Generate test with beam=1: BLEU4 = 0.00, 0/0/0/0 (made up)"]
    lines, _ = rewrite(printed, lexicon={"Hund": "dog", "Katze": "cat"}, quiet=True,
                       scorer=scoring.build_scorer("bleu", Dictionary()))
    assert len(lines) == 1 and lines[0].startswith("Generate test with beam=1: BLEU4 = 0.00, 100.0/100.0/0.0/0.0 (")
    lines, _ = rewrite(printed, lexicon={}, scorer=scoring.build_scorer("bleu", Dictionary()))
    assert [x for x in lines if x.startswith("H-")] == ["H-1\t-1\ta Hund", "H-0\t-1\tthe Katze"]
    assert lines[-1].startswith("Generate test with beam=1: BLEU4 = 0.00, 50.0/0.0/0.0/0.0 (")
    # --replace-unk's value: none, bare (fairseq's argparse const '@@ ': copy only), or a lexicon file
    assert U.load_lexicon(None) is None and U.load_lexicon("@@ ") == {} == U.load_lexicon("")


# ------------------------------------------------------------------------------------------------------------
# end to end: a word-level continuous model with a small target vocabulary emits <unk>
# ------------------------------------------------------------------------------------------------------------

M = 16


@pytest.fixture(scope="module")
def unk_setup(tmp_path_factory):
    """A raw-text data-bin (fairseq-generate --replace-unk reads the original source text) whose target
    dictionary keeps 20 of the 40 words, random target vectors, and a lexicon without the entries of odd
    source words (so both lexicon look-ups and copies happen)."""
    pytest.importorskip("systran_align", reason=NO_ALIGNER)
    base = tmp_path_factory.mktemp("unk")
    raw = make_corpus(str(base / "raw"))
    common = [tool("fairseq-preprocess"), "--source-lang", "de", "--target-lang", "en", "--workers", "1"]
    data = str(base / "data-raw")
    run(common + ["--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test",
                  "--destdir", data, "--nwordstgt", "24", "--dataset-impl", "raw"])
    d = Dictionary.load(os.path.join(data, "dict.en.txt"))
    words = [w for w in d.symbols[d.nspecial:] if not w.startswith("madeupword")]
    assert len(words) == 20
    rng = np.random.default_rng(0)
    vec = write(base / "en.vec", [w + " " + " ".join(f"{x:.6f}" for x in rng.standard_normal(M)) for w in words])
    full = str(base / "lex.full.txt")
    cli = pairing_cli("lexicon", "--src-text", f"{raw}/train.de", "--tgt-text", f"{raw}/train.en", "--out", full,
                      "--src-dict", os.path.join(data, "dict.de.txt"))
    lex = {k: v for k, v in U.read_lexicon(full).items() if int(k[1:]) % 2 == 0}
    lexicon = write(base / "lex.txt", [f"{k} {v}" for k, v in lex.items()])
    return {"base": base, "raw": raw, "data": data, "vec": vec, "lexicon": lexicon, "lex": lex,
            "full_lexicon": full, "cli_stdout": cli.stdout}


ARCHS = {
    "transformer": (["--arch", "outlayers_transformer", "--encoder-layers", "1", "--decoder-layers", "1",
                     "--encoder-embed-dim", "32", "--decoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
                     "--decoder-ffn-embed-dim", "64", "--encoder-attention-heads", "2",
                     "--decoder-attention-heads", "2", "--dropout", "0.0"], 30),
    "lstm": (["--arch", "outlayers_lstm", "--encoder-embed-dim", "32", "--encoder-hidden-size", "16",
              "--decoder-embed-dim", "32", "--decoder-hidden-size", "32", "--decoder-out-embed-dim", "32",
              "--dropout", "0.0"], 4),
}


_MODELS = {}


def trained(setup, name):
    """The tiny continuous model ``name`` of ARCHS trained on the raw data-bin (once per module)."""
    if name not in _MODELS:
        arch, updates = ARCHS[name]
        save = str(setup["base"] / f"ckpt-{name}")
        train(setup["data"], save, arch, ["--dataset-impl", "raw", "--output-layer", "continuous", "--target-vectors",
                                          setup["vec"], "--criterion", "vmf_nll", "--lr", "0.005"], max_update=updates)
        _MODELS[name] = os.path.join(save, "checkpoint_last.pt")
    return _MODELS[name]


GEN = ["--beam", "1", "--max-len-a", "0", "--max-len-b", "12", "--cpu", "--num-workers", "0"]


def parse_lines(stdout):
    """{sentence id: {kind: text}} of the S/T/H/D/P/A lines (H and D without their score)."""
    out = {}
    for line in stdout.splitlines():
        kind, _, rest = line.partition("-")
        if kind in ("S", "T", "H", "D", "P", "A") and rest[:1].isdigit():
            idx, _, text = rest.partition("\t")
            out.setdefault(int(idx), {})[kind] = text.split("\t")[-1] if kind in ("H", "D") else text
    return out


def generate_lines(data, ckpt, *extra, cli="fairseq-generate", check=True):
    proc = run([tool(cli), data, "--user-dir", USER_DIR, "--path", ckpt, "--batch-size", "8", *GEN, *extra],
               check=check)
    return proc, parse_lines(proc.stdout)


def interactive_lines(data, ckpt, source_lines, *extra, cli="fairseq-interactive"):
    proc = run([tool(cli), data, "--user-dir", USER_DIR, "--path", ckpt, "--source-lang", "de", "--target-lang",
                "en", "--buffer-size", "8", "--batch-size", "8", *GEN, *extra], input="".join(source_lines))
    return proc, parse_lines(proc.stdout)


def expected_replacement(lines, lex):
    """The rule applied by hand to fairseq's own S-, H- and A- lines: {id: hypothesis words}, and the counts."""
    expected, counts = {}, Counter()
    for k, p in lines.items():
        hyp, src = p["H"].split(), p["S"].split()
        attended = {int(j): int(i) for i, j in (x.split("-") for x in p["A"].split())}
        assert sorted(attended) == list(range(len(hyp)))  # one link per hypothesis token (attention maximum)
        for j, tok in enumerate(hyp):
            if tok == "<unk>":
                unit = src[attended[j]]
                hyp[j] = lex.get(unit, unit)
                counts["lexicon" if unit in lex else "copied"] += 1
        expected[k] = hyp
    return expected, counts


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_generate_replace_unk_with_lexicon(unk_setup, arch):
    """outlayers-generate --replace-unk LEXICON on both model families: every <unk> becomes the lexicon
    translation of the attended source unit, or that unit; nothing else changes. The alignment is computed
    whether or not --print-alignment is given, and the A- lines are shown only when it is."""
    data, lex, unk_model = unk_setup["data"], unk_setup["lex"], trained(unk_setup, arch)
    raw = ["--dataset-impl", "raw"]
    _, plain = generate_lines(data, unk_model, *raw, "--print-alignment", "hard")
    expected, counts = expected_replacement(plain, lex)
    assert counts["lexicon"] > 0 and counts["copied"] > 0, counts
    proc, replaced = generate_lines(data, unk_model, *raw, "--print-alignment", "hard", "--replace-unk",
                                    unk_setup["lexicon"], cli="outlayers-generate")
    assert sorted(plain) == sorted(replaced) == list(range(24))
    for k, p in plain.items():
        assert replaced[k]["H"].split() == replaced[k]["D"].split() == expected[k], k
        assert "<unk>" not in replaced[k]["H"].split()
        assert [replaced[k][x] for x in "STPA"] == [p[x] for x in "STPA"], k
    assert (f"--replace-unk: {counts['lexicon'] + counts['copied']} <unk> replaced ({counts['lexicon']} from the "
            f"lexicon, {counts['copied']} copied") in proc.stderr
    if arch != "transformer":
        return
    # without --print-alignment: the same hypotheses, no A- lines; the score line is fairseq's scorer on them
    proc, no_align = generate_lines(data, unk_model, *raw, "--replace-unk", unk_setup["lexicon"],
                                    cli="outlayers-generate")
    assert {k: v["H"].split() for k, v in no_align.items()} == expected
    assert not any("A" in v for v in no_align.values())
    assert sum(line.startswith("Generate test with beam=1: BLEU4 = ") for line in proc.stdout.splitlines()) == 1
    # --quiet: only the score line, the same one
    quiet = run([tool("outlayers-generate"), data, "--user-dir", USER_DIR, "--path", unk_model, "--batch-size", "8",
                 *GEN, *raw, "--replace-unk", unk_setup["lexicon"], "--quiet"])
    assert [x for x in quiet.stdout.splitlines() if x.startswith("Generate")] == \
        [x for x in proc.stdout.splitlines() if x.startswith("Generate")]
    assert not parse_lines(quiet.stdout)
    # a lexicon that does not exist: one line naming it
    bad = run([tool("outlayers-generate"), data, "--path", unk_model, *GEN, *raw, "--replace-unk",
               str(unk_setup["base"] / "nope.txt")], check=False)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith("fairseq_outlayers: error: --replace-unk lexicon ")


def test_replace_unk_without_unk_or_alignment_changes_nothing(unk_setup):
    """No <unk> in the output (--unkpen) and no --print-alignment: outlayers-generate / outlayers-interactive
    --replace-unk LEXICON print exactly what fairseq prints without --replace-unk, and fairseq's own
    fairseq-generate --replace-unk runs as it does without the package (importing the package patches nothing)."""
    data, unk_model = unk_setup["data"], trained(unk_setup, "transformer")
    no_unk = ["--dataset-impl", "raw", "--unkpen", "1000"]
    plain_proc, plain = generate_lines(data, unk_model, *no_unk)
    assert len(plain) == 24 and not any("<unk>" in v["H"].split() for v in plain.values())

    def shown(stdout):
        return [x for x in stdout.splitlines() if x[:2] in ("S-", "T-", "H-", "D-", "P-") or x.startswith("Generate")]

    ours = generate_lines(data, unk_model, *no_unk, "--replace-unk", unk_setup["lexicon"], cli="outlayers-generate")[0]
    assert shown(ours.stdout) == shown(plain_proc.stdout)
    # fairseq's own (its S-/T- lines then show the original text, so only the hypotheses are compared)
    _, theirs = generate_lines(data, unk_model, *no_unk, "--replace-unk", unk_setup["lexicon"])
    assert {k: v["H"] for k, v in theirs.items()} == {k: v["H"] for k, v in plain.items()}
    source = open(os.path.join(unk_setup["raw"], "test.de"), encoding="utf-8").readlines()
    plain_i = interactive_lines(data, unk_model, source, "--unkpen", "1000")[1]
    ours_i = interactive_lines(data, unk_model, source, "--unkpen", "1000", "--replace-unk", unk_setup["lexicon"],
                               cli="outlayers-interactive")[1]
    assert len(ours_i) == 24 and ours_i == plain_i


def test_interactive_replace_unk_with_lexicon(unk_setup):
    """outlayers-interactive --replace-unk LEXICON: the rule on what fairseq-interactive prints, with or without
    --print-alignment."""
    data, lex, unk_model = unk_setup["data"], unk_setup["lex"], trained(unk_setup, "transformer")
    source = open(os.path.join(unk_setup["raw"], "test.de"), encoding="utf-8").readlines()
    _, plain = interactive_lines(data, unk_model, source, "--print-alignment")
    expected, counts = expected_replacement(plain, lex)
    assert counts["lexicon"] > 0 and counts["copied"] > 0, counts
    for extra in (["--print-alignment"], []):
        _, ours = interactive_lines(data, unk_model, source, *extra, "--replace-unk", unk_setup["lexicon"],
                                    cli="outlayers-interactive")
        assert {k: v["H"].split() for k, v in ours.items()} == expected
        assert all(("A" in v) == bool(extra) for v in ours.values())
        assert all(v["S"] == plain[k]["S"] and v["P"] == plain[k]["P"] for k, v in ours.items())


def test_evaluate_replace_unk_with_lexicon_on_binarised_data(unk_setup):
    """scripts/evaluate.sh works on binarised data: the replacement is applied to fairseq-generate's printed
    hard alignment (source units = the S- line), with the same code as outlayers-generate --replace-unk."""
    base, raw, data = unk_setup["base"], unk_setup["raw"], unk_setup["data"]
    unk_model = trained(unk_setup, "transformer")
    binary = str(base / "data-bin")
    run([tool("fairseq-preprocess"), "--source-lang", "de", "--target-lang", "en", "--workers", "1",
         "--testpref", f"{raw}/test", "--destdir", binary, "--srcdict", os.path.join(data, "dict.de.txt"),
         "--tgtdict", os.path.join(data, "dict.en.txt")])
    out = str(base / "eval")
    evaluate = os.path.join(REPO, "scripts", "evaluate.sh")
    proc = run(["bash", evaluate, unk_model, binary, "--beam", "1", "--cpu", "--replace-unk", unk_setup["lexicon"],
                "--out", out, "--gen-args", "--max-len-a 0 --max-len-b 12"])
    lines = parse_lines(open(os.path.join(out, "generate.out"), encoding="utf-8").read())
    hyps = open(os.path.join(out, "hyp.tok"), encoding="utf-8").read().splitlines()
    expected, counts = expected_replacement(lines, unk_setup["lex"])
    assert [hyps[k].split() for k in range(24)] == [expected[k] for k in range(24)]
    scores = json.load(open(os.path.join(out, "scores.json")))
    assert scores["unk_from_lexicon"] == counts["lexicon"] > 0 and scores["unk_copied"] == counts["copied"] > 0
    assert scores["unk_replaced"] == counts["lexicon"] + counts["copied"]
    assert f"{counts['lexicon']} from the lexicon" in proc.stdout
    missing = run(["bash", evaluate, unk_model, binary, "--replace-unk", str(base / "nope.txt"), "--out",
                   out + "-x"], check=False)
    assert missing.returncode == 1 and "--replace-unk lexicon" in missing.stderr and "does not exist" in missing.stderr
    # outlayers-generate --replace-unk on the same binarised data: the same hypotheses (fairseq-generate's own
    # --replace-unk needs a raw-text dataset)
    _, ours = generate_lines(binary, unk_model, "--replace-unk", unk_setup["lexicon"], cli="outlayers-generate")
    assert [ours[k]["H"].split() for k in range(24)] == [expected[k] for k in range(24)]
