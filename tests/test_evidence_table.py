"""The README's evidence table says what it compares: each claim's target beside its verdict, the seed-level
interval beside the test-sentence bootstrap, the model of the best-system line, the beam of a row and its baseline
where they differ, and the parameters against tying where a claim names it; the rule's text is the code's."""
import inspect
import os
import re

from fairseq_outlayers.lab import docs
from fairseq_outlayers.lab.ledger import stats
from fairseq_outlayers.lab.ledger.claims import VERDICT_RULE, beam_notes, claim_result
from fairseq_outlayers.lab.ledger.evidence import evidence_row
from harness import REPO


def _block():
    text = docs.render_text("<!-- generated: readme-evidence -->\n<!-- end generated -->\n", docs.Context(REPO))
    return {line.split(" | ")[0][2:]: line.split(" | ") for line in text.splitlines() if line.startswith("| `")
            or line.startswith("| best")}, text


def test_each_claim_shows_its_target_and_both_intervals():
    rows, _ = _block()
    joint = rows["`joint`, d_j = 512"]
    assert joint[1] == "≥ +0.50" and joint[3] == "+1.21 vs tiny-tied"
    # the recomputation: seed-level interval [+0.34, +2.09], Welch p 0.010 against no difference
    assert joint[4] == "[+0.86, +1.55], p ≤ 0.001" and joint[5] == "[+0.34, +2.09], p = 0.010"
    assert "0.71 above the target" in joint[2]
    shared = rows["`shared-private`"]
    assert "0.29 below the target" in shared[2] and "about 139 seeds" in shared[2]
    assert rows["`fixed`"][1] == "≥ −0.30" and rows["`continuous` (vMF, word-level)"][1] == "≥ −1.00"


def test_savings_against_tying_and_the_beams_are_stated():
    rows, text = _block()
    assert rows["`fixed`"][7] == ("−20.1 % trained parameters; +0.0 % trained parameters vs tiny-tied "
                                  "(Δ −1.80 BLEU)")
    assert rows["`shared-private`"][7].endswith("−36.3 % word parameters vs tiny-tied (Δ +0.55 BLEU)")
    # the vMF claim's row decodes at beam 5 like its baseline (three seeds of word-vmf-beam5): no caveat under it
    assert rows["`continuous` (vMF, word-level)"][6] == "5" and rows["`fixed`"][6] == "5"
    assert "- `continuous` (vMF, word-level) decodes with beam 1" not in text
    # every continuous claim compares beam 5 with beam 5: no caveat under the README's table or any claims table
    assert rows["`continuous`, targets from a converged softmax"][6] == "5" and "decodes with beam" not in text
    context = docs.Context(REPO)
    for spec in ("claims", "claims continuous-outputs.md"):
        assert "decodes with beam" not in docs.render_text(f"<!-- generated: {spec} -->\n<!-- end generated -->\n",
                                                           context)
    # a claim on a row decoded at beam 1 against a beam-5 baseline gets the caveat (the superseded row, whose
    # records hold no beam-5 decode)
    claim = {"name": "c", "label": "`continuous`, 800-update softmax targets", "table": "multi30k-continuous-word",
             "row": "word-vmf-softmax-vectors", "baseline": "word-softmax"}
    assert beam_notes(context.tables, [claim], [1, 2, 3], "test2016") == [
        "- `continuous`, 800-update softmax targets decodes with beam 1, its baseline word-softmax with beam 5; no "
        "committed record decodes the row at beam 5, so Δ mixes the method with the beam."]
    joint_only = docs.render_text("<!-- generated: claims joint-output.md -->\n<!-- end generated -->\n",
                                  docs.Context(REPO))
    assert "decodes with beam" not in joint_only


def test_the_best_system_line_names_its_model():
    rows, _ = _block()
    best = rows["best system (any row of the CPU table)"][3]
    assert best.startswith("cpu-small-softmax (`outlayers_transformer_small`): 41.04 ± 0.73; best "
                           "`outlayers_transformer_tiny` row: tiny-joint-512-ns25-fitbias and tiny-tied-ns25-fitbias, a "
                           "tie: 40.31 ± 0.08 and 40.31 ± 0.55")  # both sum to 120.94 over seeds 1-3


def test_the_rule_text_says_what_target_verdict_does():
    """Both routes of the seeds, the one-sided level, the strict and non-strict interval ends, as the code has them."""
    code = inspect.getsource(stats.target_verdict)
    assert "low >= target" in code and "high < target" in code and "welch[\"p\"] < alpha" in code
    assert "sign * welch[\"t\"] > 0" in code and stats.VERDICT_ALPHA == 0.05
    for words in ("lower end ≥ the target", "upper end < the target", "every seed of the row scores more than the "
                  "target above every seed of the baseline", "p < 0.05", "one-sided test at 0.025",
                  "by one of two routes", "Anything else is inconclusive",
                  "so is a claim until both rows have every seed of the protocol"):
        assert words in VERDICT_RULE, words
    results = open(os.path.join(REPO, "docs", "results.md"), encoding="utf-8").read()
    assert "not that they prove the difference alone" not in results


def test_the_ledger_page_says_its_speeds_do_not_compare_and_names_moved_commands():
    text = open(os.path.join(REPO, "docs", "results", "ledger.md"), encoding="utf-8").read()
    assert re.search(r"Train tok/s is fairseq's training speed, a mean over the seeds; it does not compare between "
                     r"rows: \d+ of \d+ records are resumed runs", text)
    assert re.search(r"\d+ of \d+ records keep the digest of their data", text)
    moved = "fairseq_outlayers.pairing"  # a module a record's frozen description runs, since moved
    assert f"python -m {moved} (now `outlayers-pairing`)" in text


def test_the_text_the_renderer_copies_from_code_is_checked_like_the_docs():
    """Option help and preset docstrings reach the documents inside tables, which the sentence check skips: here
    each is held to the docs' 60 words a sentence, and names no module or path that is gone."""
    import importlib.util

    import fairseq_outlayers.models  # noqa: F401  (registers the methods)
    from fairseq_outlayers.tools.options import arch_sections, criterion_sections, method_sections, seam_options

    spec = importlib.util.spec_from_file_location("check_sentences", os.path.join(REPO, "scripts",
                                                                                  "check_sentences.py"))
    sentences_of = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sentences_of)
    texts = [doc for _, doc in arch_sections()] + [docs._seam_row(*o)[2] for o in seam_options()]  # as rendered
    texts += [o[2] for _, _, opts in method_sections() + criterion_sections() for o in opts]
    assert len(texts) > 50
    long = [(n, text[:60]) for text in texts for _, n, _ in sentences_of.sentences(text) if n > 60]
    assert not long, long
    for text in texts:
        assert "the demo's size" not in text
        for name in re.findall(r"\b(fairseq_outlayers(?:\.\w+)+)", text):
            assert os.path.exists(os.path.join(REPO, name.replace(".", os.sep) + ".py")) or os.path.isdir(
                os.path.join(REPO, name.replace(".", os.sep))), name
        for path in re.findall(r"(?:modules|models|tools|lab)/\w+\.py", text):
            assert os.path.exists(os.path.join(REPO, "fairseq_outlayers", path)), path


def test_a_claim_waits_for_every_seed_of_the_protocol():
    """A row with seeds 1-2 of 1-3 shows its figures over those seeds, and no verdict; with seed 3 it gets one."""
    context = docs.Context(REPO)
    claim = next(c for c in context.claims if c["name"] == "fixed")
    ledger, table = context.path(docs.LEDGER), context.tables[claim["table"]]
    short = dict(context.tables, **{claim["table"]: dict(table, **{claim["row"]: {
        s: r for s, r in table[claim["row"]].items() if s != 3}})})
    full = claim_result(ledger, context.tables, claim, [1, 2, 3], "test2016", {})
    part = claim_result(ledger, short, claim, [1, 2, 3], "test2016", {})
    assert full["verdict"] == "not reproduced (saving reproduced)" and full["seeds"] == [1, 2, 3]
    assert part["verdict"] == "inconclusive (saving reproduced); seeds 1-2 of 1-3 recorded"
    assert part["why"] == "only seeds 1-2 of 1-3 recorded" and part["seeds"] == [1, 2]
    cells, over = evidence_row(ledger, short, claim, [1, 2, 3], "test2016", {})
    assert over == "1-2" and cells[2] == part["verdict"]
