"""scripts/paired_bootstrap.py: BLEU per seed as the package's scoring gives it (compare, ledger, vmf_sweep),
the seed-paired bootstrap of the ledger, brace-expanded NAME= lists, clear errors."""
import json

import pytest

from fairseq_outlayers.tools.evaluation.scoring import bleu_metric, detokenise
from fairseq_outlayers.lab.ledger.stats import paired_bootstrap_test, sentence_stats, welch_t_test

from harness import load_script


REFS = ["A man rides a red bike down the hill.", "Two dogs play in the snow.", "A woman is reading a book.",
        "Children run on the beach.", "The old man sells fruit at the market.", "A cat sleeps on the sofa."]
# tokenised, lowercased hypotheses as fairseq-generate prints them
SYS = [["a man rides a red bike down the hill .", "two dogs play in snow .", "a woman reads a book .",
        "children run on the beach .", "an old man sells fruit at a market .", "a cat sleeps on the couch ."],
       ["a man rides a bike down the hill .", "two dogs are playing in the snow .", "a woman is reading a book .",
        "kids run on the beach .", "the old man sells fruit at the market .", "a cat is sleeping on a sofa ."]]
BASE = [["a man is on a bike .", "dogs in the snow .", "a woman with a book .", "children on a beach .",
         "a man at the market .", "a cat on the sofa ."],
        ["a person rides a bike .", "two dogs play .", "a woman is reading .", "children run .",
         "the man sells fruit .", "a cat sleeps ."]]


@pytest.fixture(scope="module")
def script():
    return load_script("paired_bootstrap.py")


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_figures_match_compare_and_the_ledger_bootstrap(script, tmp_path):
    ref = write(tmp_path / "ref.en", REFS)
    sys_paths = [write(tmp_path / f"sys{i}.hyp", h) for i, h in enumerate(SYS)]
    base_paths = [write(tmp_path / f"base{i}.hyp", h) for i, h in enumerate(BASE)]
    out = tmp_path / "out.json"
    # the second file of each system with a repeated NAME=, as the shell's brace expansion writes it
    script.main(["--ref", ref, "--lowercase", "--samples", "200", "--json", str(out),
                 "--baseline", f"b={base_paths[0]}", f"b={base_paths[1]}",
                 "--system", f"s={sys_paths[0]}", f"s={sys_paths[1]}"])
    rows = json.loads(out.read_text())
    assert [r["name"] for r in rows] == ["b", "s"]
    for row, paths in ((rows[0], base_paths), (rows[1], sys_paths)):
        expected = [bleu_metric(True).corpus_score(detokenise(open(p).read().splitlines(), "en"), [REFS]).score
                    for p in paths]
        assert row["bleu"] == pytest.approx(expected, abs=1e-9)
        assert row["mean"] == pytest.approx(sum(expected) / 2)
    assert rows[1]["difference"] == pytest.approx(rows[1]["mean"] - rows[0]["mean"], abs=1e-9)
    assert rows[1]["seeds_paired"] == 2

    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang="en")
    refs = [r.lower() for r in REFS]
    stats = {name: {i: sentence_stats([detok.detokenize(h.split()) for h in hyps], refs, True)
                    for i, hyps in enumerate(group)} for name, group in (("s", SYS), ("b", BASE))}
    test = paired_bootstrap_test(stats["s"], stats["b"], n_samples=200)
    assert test["seeds"] == [0, 1]
    assert rows[1]["difference"] == pytest.approx(test["diff"]) and rows[1]["p"] == test["p"]
    assert rows[1]["interval"] == pytest.approx(list(test["interval"]))
    assert rows[1]["interval"][0] <= rows[1]["difference"] <= rows[1]["interval"][1]
    assert rows[1]["p_seeds"] == pytest.approx(welch_t_test(rows[1]["bleu"], rows[0]["bleu"])["p"])


def test_one_seed_a_side_has_no_seed_level_test(script, tmp_path, capsys):
    ref = write(tmp_path / "ref.en", REFS)
    base, system = write(tmp_path / "b.hyp", BASE[0]), write(tmp_path / "s.hyp", SYS[0])
    script.main(["--ref", ref, "--lowercase", "--samples", "100", "--baseline", f"b={base}", "--system", f"s={system}"])
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| s |")][0]
    assert line.endswith("| — |")


def test_errors_name_the_file(script, tmp_path):
    ref = write(tmp_path / "ref.en", REFS)
    short = write(tmp_path / "short.hyp", SYS[0][:4])
    with pytest.raises(SystemExit, match=r"short\.hyp has 4 lines but the references have 6"):
        script.main(["--ref", ref, "--baseline", f"b={short}", "--system", f"s={short}"])
    with pytest.raises(SystemExit, match=r"missing\.hyp: no such file"):
        script.main(["--ref", ref, "--baseline", f"b={tmp_path / 'missing.hyp'}", "--system", f"s={short}"])
    other = write(tmp_path / "other.json", ["{}"])
    with pytest.raises(SystemExit, match="exists; choose another path or pass --force"):
        script.main(["--ref", ref, "--json", other, "--baseline", f"b={short}", "--system", f"s={short}"])
    with pytest.raises(SystemExit, match="expected NAME=FILE"):
        script.main(["--ref", ref, "--baseline", short, "--system", f"s={short}"])


def test_json_never_writes_over_a_file_it_reads_even_with_force(script, tmp_path):
    """A hypothesis file given on either side (here the system's second seed) is an input: refused with --force."""
    ref = write(tmp_path / "ref.en", REFS)
    base, s1, s2 = (write(tmp_path / f"{n}.hyp", h) for n, h in (("b", BASE[0]), ("s1", SYS[0]), ("s2", SYS[1])))
    for target in (s2, base, ref):
        with pytest.raises(SystemExit, match=r"is also an input of this command .*--force never overwrites an input"):
            script.main(["--ref", ref, "--json", target, "--force", "--baseline", f"b={base}",
                         "--system", f"s={s1}", f"s={s2}"])
    assert open(s2).read().splitlines() == SYS[1] and open(base).read().splitlines() == BASE[0]


def test_the_same_file_on_both_sides_is_identical_with_p_1(script, tmp_path, capsys):
    ref = write(tmp_path / "ref.en", REFS)
    hyp = write(tmp_path / "a.hyp", SYS[0])
    out = tmp_path / "out.json"
    script.main(["--ref", ref, "--json", str(out), "--baseline", f"b={hyp}", "--system", f"s={hyp}"])
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| s |")][0]
    assert "| +0.00 (1) | [+0.00, +0.00] | 1.000 (identical translations) |" in line
    rows = json.loads(out.read_text())
    assert rows[1]["p"] == 1.0 and rows[1]["identical"] is True and rows[1]["difference"] == 0.0


@pytest.mark.parametrize("case", ["empty reference", "latin-1 hypothesis", "samples 0", "samples -3",
                                  "long hypothesis", "cut gzip"])
def test_bad_inputs_are_one_line_naming_the_file_and_line(script, tmp_path, capsys, case):
    ref = write(tmp_path / "ref.en", REFS)
    hyp = write(tmp_path / "a.hyp", SYS[0])
    argv = ["--ref", ref, "--baseline", f"b={hyp}", "--system", f"s={hyp}"]
    if case == "empty reference":
        (tmp_path / "ref.en").write_text("")
        expected = f"references '{ref}' is empty"
    elif case == "latin-1 hypothesis":
        (tmp_path / "a.hyp").write_bytes(("\n".join(SYS[0][:2]) + "\ncaf\xe9\n").encode("latin-1"))
        expected = f"{hyp}:3: hypotheses is not valid UTF-8"
    elif case == "long hypothesis":
        write(tmp_path / "a.hyp", SYS[0] + ["one more"])
        expected = "has 7 lines but the references have 6 (its line 7 is beyond the reference's last line)"
    elif case == "cut gzip":
        import gzip

        gz = tmp_path / "a.hyp.gz"
        gz.write_bytes(gzip.compress("\n".join(SYS[0]).encode())[:20])
        argv = ["--ref", ref, "--baseline", f"b={gz}", "--system", f"s={hyp}"]
        expected = "is not a complete gzip file"
    else:
        argv += ["--samples", case.split()[1]]
        expected = "--samples: must be a positive integer, got"
    with pytest.raises(SystemExit) as e:
        script.main(argv)
    message = capsys.readouterr().err.strip().splitlines()[-1] if e.value.code == 2 else str(e.value.code)
    assert expected in message and "Traceback" not in message
