"""fairseq_outlayers/tools/evaluation/scoring.py, the one evaluation path: fairseq-generate's output read back by
sentence id, and corpus BLEU against an independent float64 computation."""
import math
from collections import Counter

import pytest

from fairseq_outlayers.tools.evaluation.scoring import corpus_bleu, detokenise, hypotheses_from, read_generate_output

# fairseq-generate output as it prints it: batches out of sentence order, --nbest 2, alignments, log lines
GENERATED = """2026-11-23 | INFO | fairseq_cli.generate | loading model
S-1\tzwei hunde
T-1\ttwo dogs
H-1\t-0.51\ttwo dogs .
D-1\t-0.51\ttwo dogs .
P-1\t-0.1 -0.2 -0.3
H-1\t-0.93\tdogs .
A-1\t0-0 1-1 1-2
S-0\tein mann
T-0\ta man
H-0\t-0.20\ta man &apos;s hat
H-0\t-0.70\ta man
S-2\tleer
T-2\t
H-2\t-1.00\t
2026-11-23 | INFO | fairseq_cli.generate | Translated 3 sentences
Generate test with beam=2: BLEU4 = 10.00
"""


def test_generate_output_is_read_by_sentence_id_best_hypothesis_first():
    found = read_generate_output(GENERATED)
    assert found["S"] == {0: "ein mann", 1: "zwei hunde", 2: "leer"}
    assert found["T"] == {0: "a man", 1: "two dogs", 2: ""}
    assert found["H"] == {0: "a man &apos;s hat", 1: "two dogs .", 2: ""}
    assert found["A"] == {1: "0-0 1-1 1-2"}
    assert hypotheses_from(GENERATED) == ["a man &apos;s hat", "two dogs .", ""]
    # sacremoses un-escapes and joins punctuation, as the preparation scripts escaped it
    assert detokenise(hypotheses_from(GENERATED), "en") == ["a man's hat", "two dogs.", ""]


def reference_bleu(hyps, refs):
    """BLEU-4 with brevity penalty (Papineni et al. 2002), whitespace tokens, float64: no smoothing is needed
    for the inputs below (every n-gram order has a match)."""
    matches, totals, hyp_len, ref_len = [0] * 4, [0] * 4, 0, 0
    for h, r in zip(hyps, refs):
        h, r = h.split(), r.split()
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, 5):
            hn = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            rn = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            matches[n - 1] += sum(min(c, rn[g]) for g, c in hn.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals)) / 4
    brevity = min(0.0, 1 - ref_len / hyp_len)
    return 100 * math.exp(log_precision + brevity)


def test_corpus_bleu_against_an_independent_computation():
    hyp_tok = ["a man rides a red bike down the hill .", "two dogs play in the snow .", "a woman reads a book ."]
    ref_tok = ["a man rides a bike down the hill .", "two dogs are playing in the snow .",
               "a woman is reading a book ."]
    hyp_detok, ref_detok = detokenise(hyp_tok, "en"), [r.capitalize() for r in detokenise(ref_tok, "en")]
    scores, sacre, tok = corpus_bleu(hyp_tok, hyp_detok, ref_tok, ref_detok, lowercase=True)
    # tokenised BLEU: the tokens as given (tokenize none), case-insensitive
    assert tok.score == pytest.approx(reference_bleu(hyp_tok, ref_tok), abs=1e-9)
    # sacreBLEU: 13a splits the final '.' off again, so the detokenised pair scores as the tokenised one here
    assert sacre.score == pytest.approx(reference_bleu(hyp_tok, ref_tok), abs=1e-9)
    assert scores["sacrebleu"] == round(sacre.score, 2) and scores["tokenized_bleu"] == round(tok.score, 2)
    assert "case:lc" in scores["sacrebleu_signature"] and "tok:13a" in scores["sacrebleu_signature"]
    assert "tok:none" in scores["tokenized_bleu_signature"] and scores["sentences"] == 3
    # case-sensitive when the data was cased: the capitalised references no longer match the first words
    cased, _, _ = corpus_bleu(hyp_tok, hyp_detok, ref_tok, ref_detok, lowercase=False)
    assert cased["sacrebleu"] < scores["sacrebleu"] and "case:mixed" in cased["sacrebleu_signature"]


@pytest.mark.parametrize("tokenize", [None, "none"])
def test_bleu_refuses_hypotheses_and_references_of_different_lengths(tokenize):
    """sacreBLEU pairs the two line by line and scores only the shorter one: before, 5 hypotheses against 2
    references scored the first 2 without a word (``scripts/bench_serving.py`` printed "5 of 5" and a verdict)."""
    from sacrebleu.metrics import BLEU

    from fairseq_outlayers.errors import OutlayersConfigError
    from fairseq_outlayers.tools.evaluation.scoring import bleu_metric

    hyps, refs = ["a man on a bike", "two dogs run", "a red car", "the sun", "a cat"], ["a man on a bike", "two dogs"]
    with pytest.raises(OutlayersConfigError, match=r"^5 translations but 2 references; the reference file must have "
                       r"one line per test sentence, in the test set's order$"):
        bleu_metric(False, tokenize).corpus_score(hyps, [refs])
    with pytest.raises(OutlayersConfigError, match="^2 translations but 5 references"):
        bleu_metric(False, tokenize).corpus_score(refs, [hyps])
    kwargs = {"tokenize": tokenize, "force": True} if tokenize else {}
    same = bleu_metric(False, tokenize).corpus_score(hyps, [hyps[::-1]])  # the same lengths: sacreBLEU's own score
    assert same.score == BLEU(**kwargs).corpus_score(hyps, [hyps[::-1]]).score
    assert bleu_metric(True).sentence_score("a man", ["a man"]).score == BLEU(lowercase=True).sentence_score(
        "a man", ["a man"]).score
