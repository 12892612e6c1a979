"""The results ledger without training: rows and their directives, records, mean ± sd over seeds, missing seeds,
the paired bootstrap against sacreBLEU's own and against an independent computation, bit-for-bit rendering."""
import json
import math
import os
import re
from dataclasses import replace as dataclasses_replace

import numpy as np
import pytest

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.lab.ledger import records
from fairseq_outlayers.lab.ledger.__main__ import build_parser, claims_file, main as ledger_main
from fairseq_outlayers.lab.ledger.analysis import compare, group, longest_wait, step_effect
from fairseq_outlayers.lab.ledger.render import (compare_line, converged_figures, epoch_ceiling, loss_at_stop,
                                                 patience_margin, render, shared_options)
from fairseq_outlayers.lab.ledger.rows import protocol_options, read_ledger_row, row_options
from fairseq_outlayers.lab.ledger.stats import (mean_sd, p_is, paired_bootstrap, paired_bootstrap_test, seeds_for_power,
                                            sentence_stats, welch_t_test)

pytestmark = pytest.mark.usefixtures("commands_in_process")  # what the runners start: in this process


REFS = ["a man is riding a red bike down the street .", "two dogs play in the snow .",
        "a woman sells fruit at a market .", "children are running on the beach .",
        "a black cat sleeps on a sofa .", "the old man reads a newspaper in the park .",
        "a girl in a blue dress jumps .", "three people sit around a table ."]
HYP_A = ["a man rides a red bike on the street .", "two dogs play in snow .", "a woman sells fruit at market .",
         "children run on the beach .", "a black cat sleeps on the sofa .", "an old man reads a paper in a park .",
         "a girl in blue dress jumps .", "three people are sitting at a table ."]
HYP_B = ["a man is riding a bike down the street .", "two dogs are playing in the snow .",
         "a lady sells fruits in a market .", "kids are running on the beach .", "a cat sleeps on a couch .",
         "the old man reads a newspaper in the park .", "a girl jumps .", "three persons sit around a table ."]


def fake_record(ledger, row, seed, bleu, hyps, baseline=None, device="cpu", table="t", tok=None, params=None):
    rec = {"row": row, "seed": seed, "table": table, "method": row, "baseline": baseline,
           "row_file": f"configs/x/{row}.args", "description": row,
           "validation": {"metric": "bleu", "reason": "", "patience": 5, "max_epoch": 50, "best": 1.0},
           "options": ["data", "--output-layer", row, "--seed", str(seed)], "command": "fairseq-train ...",
           "commit": "abc1234", "machine": "test", "device": device, "epochs": 10, "updates": 1000,
           "best_epoch": 8, "best_updates": 800, "wall_seconds": 1.0, "training_seconds": 1.0, "resumed": False,
           "tokens_per_second": 1000.0, "params": params or {"total": 10, "trained": 8, "embedding": 4, "output": 2},
           "lowercase": False,
           "test": {"test2016": {"sentences": len(hyps), "sacrebleu": bleu, "sacrebleu_signature": "sig",
                                 "tokenized_bleu": bleu if tok is None else tok,
                                 "tokenized_bleu_signature": "tsig"}}}
    records.write_record(ledger, rec, {"test2016": hyps}, {"test2016": REFS})
    return rec


def two_row_ledger(tmp_path):
    """A ledger of two one-seed rows, softmax (30.0) and tied (31.0, its baseline softmax)."""
    ledger = str(tmp_path / "runs")
    fake_record(ledger, "softmax", 1, 30.0, HYP_A)
    fake_record(ledger, "tied", 1, 31.0, HYP_B, baseline="softmax")
    return ledger


def one_line(err: str) -> str:
    """The one line of a command's error output (no traceback)."""
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _row_line(text, name):
    return next(line for line in text.splitlines() if line.startswith(f"| {name} |"))


def test_three_seeds_give_mean_and_sample_deviation(tmp_path):
    ledger = str(tmp_path)
    for seed, bleu in ((1, 30.0), (2, 31.0), (3, 35.0)):
        fake_record(ledger, "softmax", seed, bleu, HYP_A)
    line = _row_line(render(ledger), "softmax")
    # mean 32, sample deviation sqrt((4 + 1 + 9) / 2) = sqrt(7) = 2.6458
    assert "| 30.00 / 31.00 / 35.00 | 32.00 ± 2.65 |" in line
    assert mean_sd([30.0, 31.0, 35.0]) == (32.0, math.sqrt(7.0))
    assert mean_sd([30.0]) == (30.0, None) and mean_sd([]) == (None, None)
    assert converged_figures(ledger) == {"softmax": ["32.00 ± 2.65 (3 seeds, t/softmax)"]}


def test_parameter_savings_are_relative_to_the_baseline(tmp_path):
    # the shared-private row of the CPU table: trained 1,760,543 vs 2,797,568; word parameters 834,847 (embedding,
    # output tied) vs 1,309,696 + 562,176 = 1,871,872 -> -37.07 % and -55.40 %
    ledger = str(tmp_path)
    fake_record(ledger, "softmax", 1, 30.0, HYP_A,
                params={"total": 2797568, "trained": 2797568, "embedding": 1309696, "output": 562176})
    fake_record(ledger, "sp", 1, 31.0, HYP_B, baseline="softmax",
                params={"total": 1760543, "trained": 1760543, "embedding": 834847, "output": 0})
    text = render(ledger)
    assert "| 1,760,543 (-37.1 %) | 1,760,543 | 834,847 | 0 | 834,847 (-55.4 %) |" in _row_line(text, "sp")
    assert "| 2,797,568 | 2,797,568 | 1,309,696 | 562,176 | 1,871,872 |" in _row_line(text, "softmax")


def test_compare_sets_any_two_rows_against_each_other(tmp_path, capsys):
    ledger = str(tmp_path)
    for seed, (hyp_a, hyp_b) in enumerate([(HYP_A, HYP_B), (HYP_B, HYP_A)], start=1):
        fake_record(ledger, "softmax", seed, 30.0, HYP_A)
        fake_record(ledger, "tied", seed, 31.0 + seed, hyp_a, baseline="softmax")
        fake_record(ledger, "sp", seed, 33.0 + seed, hyp_b, baseline="softmax")
    stats = {name: {seed: sentence_stats(h, REFS, False) for seed, h in hyps.items()}
             for name, hyps in {"tied": {1: HYP_A, 2: HYP_B}, "sp": {1: HYP_B, 2: HYP_A}}.items()}
    diff, p, seeds = paired_bootstrap(stats["sp"], stats["tied"])
    low, high = paired_bootstrap_test(stats["sp"], stats["tied"])["interval"]
    assert seeds == [1, 2]
    assert ledger_main(["compare", "sp", "tied", "--ledger", ledger]) == 0
    out = capsys.readouterr().out
    assert out == (f"t, test2016: sp 34.00 / 35.00 (seeds 1, 2: 34.50 ± 0.71) vs tied 32.00 / 33.00 (seeds 1, 2: "
                   f"32.50 ± 0.71): Δ {diff:+.2f} over seeds 1, 2, 95 % interval [{low:+.2f}, {high:+.2f}], "
                   f"{p_is(p)} (paired bootstrap, 1000 resamples, seed 12345); over seeds p = 0.106 (Welch t = "
                   "+2.83, df 2.0); 4 seeds a row would find a true difference of 2.00 four times in five at this "
                   "seed spread (0.71)\n")
    # the same draw and statistic as the table's column for a row and its baseline
    assert compare(ledger, group(records.read_records(ledger))["t"], "sp", "tied", "test2016")["p"] == p
    # the table's cells for a row and its baseline come from the same test
    base = {seed: sentence_stats(HYP_A, REFS, False) for seed in (1, 2)}
    c = paired_bootstrap_test(stats["sp"], base)
    assert (f"| {c['diff']:+.2f} [{c['interval'][0]:+.2f}, {c['interval'][1]:+.2f}] | {c['p']:.3f} |"
            in _row_line(render(ledger), "sp"))
    assert ledger_main(["compare", "sp", "nope", "--ledger", ledger]) == 2
    assert "rows with records: softmax, sp, tied" in capsys.readouterr().err


def test_welch_t_test_of_the_seeds_against_closed_forms_and_mpmath(tmp_path):
    """Seed-level test: 34/35 vs 32/33 -> t = 2 / sqrt(0.25 + 0.25) = 2 sqrt 2, df = 2, and with two degrees of
    freedom the t distribution has a closed form, p = 1 - t / sqrt(2 + t^2) = 1 - sqrt(0.8); unequal seeds and
    variances against the Student t CDF in mpmath (regularised incomplete beta, 30 digits)."""
    import mpmath

    w = welch_t_test([34.0, 35.0], [32.0, 33.0])
    assert w["t"] == pytest.approx(2 * math.sqrt(2), rel=1e-14) and w["df"] == pytest.approx(2.0, rel=1e-14)
    assert w["p"] == pytest.approx(1 - math.sqrt(0.8), rel=1e-12)
    # the CPU table's fixed and softmax seeds
    a, b = [36.27, 37.90, 37.48], [39.01, 39.71, 38.67, 40.02]
    w = welch_t_test(a, b)
    mpmath.mp.dps = 30
    va = mpmath.mpf(mean_sd(a)[1]) ** 2 / 3
    vb = mpmath.mpf(mean_sd(b)[1]) ** 2 / 4
    t = (mpmath.mpf(sum(a)) / 3 - mpmath.mpf(sum(b)) / 4) / mpmath.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 3)
    p = mpmath.betainc(df / 2, mpmath.mpf(1) / 2, 0, df / (df + t * t), regularized=True)  # two-sided
    assert w["t"] == pytest.approx(float(t), rel=1e-12) and w["df"] == pytest.approx(float(df), rel=1e-12)
    assert w["p"] == pytest.approx(float(p), rel=1e-9)
    assert welch_t_test([30.0], [31.0, 32.0]) is None and welch_t_test([30.0, 30.0], [31.0, 31.0]) is None
    # in the table: a row with two seeds a side gets the cell, one seed a side reads so
    ledger = str(tmp_path)
    for seed, bleu in ((1, 32.0), (2, 33.0)):
        fake_record(ledger, "softmax", seed, bleu, HYP_A)
        fake_record(ledger, "sp", seed, bleu + 2.0, HYP_B, baseline="softmax")
    fake_record(ledger, "tied", 1, 31.0, HYP_B, baseline="softmax")
    text = render(ledger)
    assert _row_line(text, "sp").split(" | ")[7] == "0.106"
    assert "| — (< 2 seeds a side) |" in _row_line(text, "tied")


def test_seeds_for_power_against_cohens_table_and_a_direct_integral():
    """Seeds a row for 80 % power, two-sided 5 %: Cohen's (1988) sample sizes per group for d = 0.2 / 0.5 / 0.8 /
    1.0 (394 / 64 / 26 / 17, as G*Power gives them); the power at the answer and one seed fewer against the
    noncentral t written as an integral over the chi variable in mpmath; no spread or no difference: None."""
    import mpmath

    assert [seeds_for_power(d, 1.0) for d in (0.2, 0.5, 0.8, 1.0)] == [394, 64, 26, 17]
    assert seeds_for_power(-0.8, 1.0) == 26 and seeds_for_power(1.6, 2.0) == 26  # sign- and scale-free
    assert seeds_for_power(0.0, 1.0) is None and seeds_for_power(1.0, 0.0) is None
    assert seeds_for_power(0.01, 1.0, most=1000) is None
    mpmath.mp.dps = 20

    def power(n, effect):
        # P(|Z + delta| / sqrt(V / df) > c), V ~ chi2(df): integrate over V in closed form for Z
        df, delta = 2 * n - 2, effect * mpmath.sqrt(mpmath.mpf(n) / 2)
        from scipy.stats import t as student_t
        c = mpmath.mpf(student_t.ppf(0.975, df))
        density = lambda v: v ** (df / 2 - 1) * mpmath.exp(-v / 2) / (2 ** (df / 2) * mpmath.gamma(df / 2))
        tail = lambda v: (mpmath.ncdf(-c * mpmath.sqrt(v / df) - delta)
                          + 1 - mpmath.ncdf(c * mpmath.sqrt(v / df) - delta))
        return mpmath.quad(lambda v: density(v) * tail(v), [0, df, mpmath.inf])

    for effect in (0.5, 3.08):
        n = seeds_for_power(effect, 1.0)
        assert power(n, effect) >= 0.8 > power(n - 1, effect)
    # three seeds a row: a difference of 3.071 seed deviations (2.15 BLEU at a spread of 0.7), not 3.07
    assert seeds_for_power(3.072, 1.0) == 3 and seeds_for_power(3.07, 1.0) == 4


def test_a_missing_seed_is_shown_and_not_averaged(tmp_path):
    ledger = str(tmp_path)
    fake_record(ledger, "softmax", 1, 30.0, HYP_A)
    fake_record(ledger, "softmax", 3, 35.0, HYP_A)
    line = _row_line(render(ledger), "softmax")
    # mean of the two recorded seeds, deviation sqrt(2 * 2.5^2 / 1) = 3.54; seed 2 reads missing
    assert "| 30.00 / missing / 35.00 | 32.50 ± 3.54 |" in line
    fake_record(ledger, "tied", 1, 29.0, HYP_B, baseline="softmax")
    text = render(ledger, seeds=[1, 2, 3, 4])
    assert "| 29.00 / missing / missing / missing | 29.00 (1 seed) |" in _row_line(text, "tied")
    assert "(seeds 1)" in _row_line(text, "tied")  # the test used the one seed both rows have


def test_seeds_beyond_the_protocol_get_their_own_table_and_leave_the_quoted_figures_alone(tmp_path, capsys):
    """A row given a fourth seed later (to test a difference at the seed level) changes neither its row of the
    table nor any comparison quoted from it: the table, its diagnostics and ``compare`` keep to seeds 1-3, and a
    table under it counts every recorded seed (the row's, and its comparison with the baseline)."""
    ledger = str(tmp_path)
    for seed, bleu in ((1, 30.0), (2, 31.0), (3, 35.0), (4, 36.0)):
        fake_record(ledger, "tied", seed, bleu, HYP_A)
    for seed, bleu in ((1, 33.0), (2, 34.0), (3, 35.0)):
        fake_record(ledger, "joint", seed, bleu, HYP_B, baseline="tied")
    fake_record(ledger, "fixed", 1, 29.0, HYP_B)  # no further seed, baseline none: not in the further table
    text = render(ledger)
    assert "| tied |  | 30.00 / 31.00 / 35.00 | 32.00 ± 2.65 |" in text  # seed 4 not averaged in
    assert "36.00" not in _row_line(text, "tied") and "(1 / 2 / 3)" in text
    table, further = text.split("Seeds beyond 1, 2, 3")
    # seeds 1-3 (Welch over 3 and 3 seeds): joint 34.00 ± 1.00 vs tied 32.00 ± 2.65
    welch3 = welch_t_test([33.0, 34.0, 35.0], [30.0, 31.0, 35.0])["p"]
    assert f"| {welch3:.3f} |" in _row_line(table, "joint") and "(seeds 1, 2, 3)" not in _row_line(table, "joint")
    # every seed: tied 33.00 ± 2.94 over four seeds (sqrt((9 + 4 + 4 + 9) / 3)); joint's Welch p against all four
    assert "| tied |  | seed 4: 36.00 | 33.00 ± 2.94 (seeds 1, 2, 3, 4) | (baseline) |" in further
    welch4 = welch_t_test([33.0, 34.0, 35.0], [30.0, 31.0, 35.0, 36.0])["p"]
    assert welch4 != welch3
    line = _row_line(further, "joint")
    assert line.startswith("| joint | tied | none | 34.00 ± 1.00 (seeds 1, 2, 3) |")
    assert line.endswith(f"(seeds 1, 2, 3) | {welch4:.3f} |")  # the bootstrap: the seeds both rows have
    assert "| fixed |" not in further
    assert compare_line(ledger, "joint", "tied").count("seeds 1, 2, 3") == 3
    assert f"over seeds p = {welch3:.3f}" in compare_line(ledger, "joint", "tied")
    every = compare_line(ledger, "joint", "tied", seeds=None)
    assert "tied 30.00 / 31.00 / 35.00 / 36.00 (seeds 1, 2, 3, 4: 33.00 ± 2.94)" in every
    assert f"over seeds p = {welch4:.3f}" in every
    assert ledger_main(["compare", "joint", "tied", "--ledger", ledger, "--all-seeds"]) == 0
    assert capsys.readouterr().out.strip().endswith(every.split("; ")[-1])
    assert ledger_main(["compare", "joint", "tied", "--ledger", ledger, "--seeds", "1", "2"]) == 0
    assert "seeds 1, 2:" in capsys.readouterr().out
    assert converged_figures(ledger)["tied"] == ["32.00 ± 2.65 (3 seeds, t/tied)"]
    # a ledger with no further seed has no such table
    (tmp_path / "none").mkdir()
    assert "Seeds beyond" not in render(str(tmp_path / "none")) and "Seeds beyond" not in render(ledger, seeds=[1, 2, 3, 4])


def test_a_step_row_shows_its_scores_before_the_step_and_which_seeds_were_retrained(tmp_path):
    ledger = str(tmp_path)
    for seed in (1, 2):
        fake_record(ledger, "tied", seed, 30.0 + seed, HYP_A)
    for seed, before, matches in ((1, 31.0, True), (2, 29.5, False)):  # seed 2's parent checkpoint was trained again
        rec = fake_record(ledger, "tied-fitbias", seed, 33.0, HYP_B, baseline="tied")
        rec["after"] = {"step": ["fit-output-bias"], "trained_in": f"tied.seed{seed}",
                        "as_trained": {"test2016": {"sacrebleu": before}}, "parent_record_matches": matches}
        records.write_record(ledger, rec, {"test2016": HYP_B}, {"test2016": REFS})
    text = render(ledger)
    assert "(seed 2: retrained, not tied's recorded model) |" in _row_line(text, "tied-fitbias")
    assert ("\nThen `fit-output-bias` on each seed's best checkpoint of `tied`.\ntest2016 of that checkpoint before "
            "the step: 31.00 / 29.50 / missing (seed 2: trained again, not the model of `tied`'s record;") in text
    assert "retrained" not in _row_line(text, "tied")
    # the step's own effect: seed 1 against its parent's record (the same model), seed 2 has no translations
    # before the step; with them kept beside its record (as the runner now writes them) it counts too
    assert "\nThe step's own effect on those checkpoints (seed 1): " in text
    effect = step_effect(ledger, group(records.read_records(ledger))["t"]["tied-fitbias"],
                         group(records.read_records(ledger))["t"]["tied"], "test2016")
    assert effect["seeds"] == [1] and effect["diff"] == pytest.approx(
        paired_bootstrap_test({1: sentence_stats(HYP_B, REFS, False)}, {1: sentence_stats(HYP_A, REFS, False)})["diff"])
    rec = records.load_record(records.record_path(ledger, "tied-fitbias", 2))
    records.write_record(ledger, rec, {"test2016": HYP_B}, {"test2016": REFS}, as_trained={"test2016": HYP_B})
    assert rec["after"]["as_trained"]["test2016"]["hypotheses"] == "tied-fitbias.seed2.test2016.as-trained.hyp"
    rows = group(records.read_records(ledger))["t"]
    effect = step_effect(ledger, rows["tied-fitbias"], rows["tied"], "test2016")
    both = paired_bootstrap_test({1: sentence_stats(HYP_B, REFS, False), 2: sentence_stats(HYP_B, REFS, False)},
                                 {1: sentence_stats(HYP_A, REFS, False), 2: sentence_stats(HYP_B, REFS, False)})
    assert effect["seeds"] == [1, 2] and effect["diff"] == pytest.approx(both["diff"]) and effect["p"] == both["p"]
    low, high = both["interval"]
    assert (f"\nThe step's own effect on those checkpoints (seeds 1, 2): {both['diff']:+.2f} [{low:+.2f}, "
            f"{high:+.2f}], p = {both['p']:.3f} (paired bootstrap).\n") in render(ledger)


def test_the_rows_show_the_tables_shared_options_once_and_each_rows_own(tmp_path):
    """A flag and its values count as one option: `--lr 0.002` is shared only where every row has that value; a
    positional (the data) stands alone; a negative number is a value, not a flag."""
    a = ["data", "--arch", "tiny", "--lr", "0.002", "--adam-betas", "(0.9,0.98)", "--eval-bleu", "--clip", "-1",
         "--output-layer", "tied"]
    b = ["data", "--arch", "tiny", "--lr", "0.003", "--adam-betas", "(0.9,0.98)", "--eval-bleu", "--clip", "-1",
         "--output-layer", "joint", "--joint-dim", "512"]
    assert shared_options([a, b]) == ["data", "--arch", "tiny", "--adam-betas", "(0.9,0.98)", "--eval-bleu",
                                      "--clip", "-1"]
    assert shared_options([a]) == a
    ledger = str(tmp_path)
    for row, options in (("tied", a), ("joint", b)):
        rec = fake_record(ledger, row, 1, 30.0, HYP_A)
        rec["options"] = options + ["--seed", "1"]
        records.write_record(ledger, rec, {"test2016": HYP_A}, {"test2016": REFS})
    text = render(ledger, seeds=[1])
    assert "```text\ndata --arch tiny --adam-betas '(0.9,0.98)' --eval-bleu --clip -1\n```" in text
    assert ("**joint**: joint.\nOwn options: `--lr 0.003 --output-layer joint --joint-dim 512`.\n"
            "Early stopping on validation bleu.\n") in text
    assert "**tied**: tied.\nOwn options: `--lr 0.002 --output-layer tied`.\n" in text


def test_the_validation_loss_at_the_stop_is_summarised_per_table(tmp_path):
    ledger = str(tmp_path)
    assert loss_at_stop({"x": {1: {"curve": [], "best_epoch": 1}}}) is None
    curves = {1: [4.0, 3.5, 3.4, 3.45],  # tested epoch 2 (3.5); the last (3.45) is lower, the lowest is epoch 3
              2: [4.0, 3.5, 3.6, 3.3],  # tested epoch 2; the last is lower by 0.2 and the lowest of the run
              3: [4.0, 3.3, 3.5, 3.4]}  # tested epoch 2; the loss rose after it
    for seed, losses in curves.items():
        rec = fake_record(ledger, "softmax", seed, 30.0, HYP_A)
        rec.update(best_epoch=2, curve=[{"epoch": e, "loss": x, "bleu": 1.0} for e, x in enumerate(losses, 1)])
        records.write_record(ledger, rec, {"test2016": HYP_A}, {"test2016": REFS})
    step = fake_record(ledger, "softmax-fitbias", 1, 31.0, HYP_B, baseline="softmax")  # shares softmax's training
    step.update(best_epoch=2, curve=[{"epoch": 1, "loss": 4.0}, {"epoch": 2, "loss": 3.5}, {"epoch": 3, "loss": 1.0}],
                after={"step": ["fit-output-bias"], "trained_in": "softmax.seed1"})
    records.write_record(ledger, step, {"test2016": HYP_B}, {"test2016": REFS})
    assert ("Validation loss at the stop: lower at the last epoch than at the tested (best validation score) epoch "
            "in 2 of 3 runs (by 0.050 to 0.200); the lowest of the run at the last epoch in 1 of 3: the patience on "
            "the validation score stopped those runs while the loss was still falling.") in render(ledger)
    assert loss_at_stop({"x": {1: {"curve": [{"epoch": 1, "loss": 3.0}, {"epoch": 2, "loss": 3.1}],
                                   "best_epoch": 1}}}) == (
        "Validation loss at the stop: lower at the last epoch than at the tested (best validation score) epoch in 0 "
        "of 1 runs; the lowest of the run at the last epoch in 0 of 1: no run was stopped at its lowest loss.")


def test_how_close_the_patience_came_to_stopping_runs_before_a_later_improvement():
    """The longest run of validations without a strictly better score (a tie counts as none, as in fairseq) that a
    better score still ended; the runs whose wait was one short of their patience are counted per table."""
    def curve(scores, key="bleu"):
        return [{"epoch": e, key: x} for e, x in enumerate(scores, 1)]

    assert longest_wait(curve([10, 12, 11, 12, 11.5, 13, 12, 12]), "bleu") == 3  # the last two: no better score
    assert longest_wait(curve([4.0, 3.0, 3.0, 2.5], "loss"), "loss") == 1  # loss: lower is better
    assert longest_wait(curve([10, 11, 12]), "bleu") == 0 and longest_wait([], "bleu") is None
    assert longest_wait(curve([4.0, 3.0], "loss"), "bleu") is None

    def run(scores, patience=5, **extra):
        return {"curve": curve(scores), "validation": {"metric": "bleu", "patience": patience}, **extra}

    rows = {"softmax": {1: run([1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3]), 2: run([1, 2, 3, 2, 4, 4, 4, 4, 4, 4])},
            "tied": {1: run([1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]), 2: run([5, 6])},
            "tied-fitbias": {1: run([1, 1, 1, 1, 1, 2], after={"step": ["fit-output-bias"]})}}  # tied's training
    assert patience_margin(rows) == (
        "Patience (5 validations): in 2 of 4 runs a better validation score still came after 4 validations without "
        "one, one short of the stop; the longest such wait per run (validations without a better score, then a "
        "better one): 0 in 1 run, 1 in 1 run, 4 in 2 runs.")
    rows["tied"][2]["validation"]["patience"] = 10
    assert patience_margin(rows).startswith("Patience (5, 10 validations): in 2 of 4 runs a better validation score "
                                            "still came after the patience minus one validations")
    assert patience_margin({"x": {1: {"curve": [], "validation": {"patience": 5}}}}) is None


def test_the_runs_stopped_by_the_epoch_ceiling_with_patience_left_are_named():
    """A run that reached --max-epoch less than its patience after its best epoch ended on the budget; one whose
    patience ran out on the last epoch, one that stopped earlier, and step rows are not named."""
    def run(epochs, best, patience=5, max_epoch=50, **extra):
        return {"epochs": epochs, "best_epoch": best, **extra,
                "validation": {"metric": "bleu", "patience": patience, "max_epoch": max_epoch}}

    rows = {"softmax": {1: run(50, 45), 2: run(39, 34), 3: run(50, 50)},
            "tied": {1: run(50, 45, patience=10), 2: run(50, 40, patience=10)},
            "tied-fitbias": {1: run(50, 45, after={"step": ["fit-output-bias"]})}}
    assert epoch_ceiling(rows) == (
        "Epoch ceiling (50): 2 of 5 runs stopped on it with patience left (softmax seed 3, best at epoch 50; tied seed "
        "1, best at epoch 45): they ended on the budget, not on the validation score, so their rows may be "
        "understated.")  # softmax seed 1 and tied seed 2: the patience ran out on the last epoch too
    assert epoch_ceiling({"softmax": {2: run(39, 34), 3: run(50, 45, max_epoch=60)}}) is None
    assert epoch_ceiling({"x": {1: {"epochs": 50, "best_epoch": 49, "validation": {}}}}) is None


def test_render_is_deterministic_and_written_atomically(tmp_path):
    ledger = str(tmp_path / "runs")
    for seed in (1, 2):
        fake_record(ledger, "softmax", seed, 30.0 + seed, HYP_A)
        fake_record(ledger, "tied", seed, 29.0 + seed, HYP_B, baseline="softmax")
    out = tmp_path / "ledger.md"
    assert ledger_main(["render", "--ledger", ledger, "--out", str(out)]) == 0
    first = out.read_bytes()
    assert ledger_main(["render", "--ledger", ledger, "--out", str(out)]) == 0
    assert out.read_bytes() == first
    assert "(baseline)" in _row_line(first.decode(), "softmax")
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_empty_ledger_renders_and_says_so(tmp_path):
    assert "The ledger holds no record yet." in render(str(tmp_path))


def test_paired_bootstrap_is_sacrebleus_with_one_seed(monkeypatch):
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    monkeypatch.setenv("SACREBLEU_SEED", "12345")
    test = PairedTest([("base", HYP_B), ("sys", HYP_A)], {"BLEU": BLEU()}, [REFS], test_type="bs", n_samples=200)
    _, scores = test()
    expected = scores["BLEU"][1]
    diff, p, seeds = paired_bootstrap({1: sentence_stats(HYP_A, REFS, False)}, {1: sentence_stats(HYP_B, REFS, False)},
                                      n_samples=200, seed=12345)
    assert seeds == [1]
    assert p == expected.p_value
    assert diff == pytest.approx(expected.score - scores["BLEU"][0].score, abs=1e-9)


def test_paired_bootstrap_over_seeds_matches_an_independent_computation():
    from sacrebleu.metrics import BLEU

    system = {1: HYP_A, 2: HYP_B[:4] + HYP_A[4:]}
    baseline = {1: HYP_B, 2: HYP_A[:4] + HYP_B[4:], 3: HYP_B}  # seed 3 has no partner: not used
    n = 100
    diff, p, seeds = paired_bootstrap({s: sentence_stats(h, REFS, False) for s, h in system.items()},
                                      {s: sentence_stats(h, REFS, False) for s, h in baseline.items()},
                                      n_samples=n, seed=7)
    assert seeds == [1, 2]

    # reference: corpus BLEU of the resampled sentences themselves, seed by seed, through sacreBLEU's corpus_score
    def mean_bleu(hyps_by_seed, idx):
        bleu = BLEU()
        return np.mean([bleu.corpus_score([hyps_by_seed[s][i] for i in idx], [[REFS[i] for i in idx]]).score
                        for s in (1, 2)])

    everything = list(range(len(REFS)))
    observed = mean_bleu(system, everything) - mean_bleu(baseline, everything)
    draws = np.random.default_rng(7).choice(len(REFS), size=(n, len(REFS)), replace=True)
    sample = np.abs([mean_bleu(system, idx) - mean_bleu(baseline, idx) for idx in draws])
    expected_p = (np.sum(sample - sample.mean() > abs(observed)) + 1) / (n + 1)
    assert diff == pytest.approx(observed, abs=1e-6)
    assert p == pytest.approx(expected_p, abs=1e-12)
    # the percentile interval of the signed differences, from the same draws (numpy's linear interpolation)
    signed = sorted(mean_bleu(system, idx) - mean_bleu(baseline, idx) for idx in draws)
    low, high = paired_bootstrap_test({s: sentence_stats(h, REFS, False) for s, h in system.items()},
                                      {s: sentence_stats(h, REFS, False) for s, h in baseline.items()},
                                      n_samples=n, seed=7)["interval"]
    # rank (n - 1) * 0.025 = 2.475 and 96.525: between the 3rd/4th and 97th/98th smallest
    assert low == pytest.approx(signed[2] + 0.475 * (signed[3] - signed[2]), abs=1e-4)
    assert high == pytest.approx(signed[96] + 0.525 * (signed[97] - signed[96]), abs=1e-4)
    assert low <= diff <= high


def test_devices_are_not_mixed_in_a_comparison(tmp_path):
    ledger = str(tmp_path)
    fake_record(ledger, "softmax", 1, 30.0, HYP_A, device="cpu")
    fake_record(ledger, "tied", 1, 29.0, HYP_B, baseline="softmax", device="cuda: H100")
    assert "— (devices differ)" in _row_line(render(ledger), "tied")


def test_rows_directives_and_protocol(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "bpecodes").write_text("a b 1\n")
    row = tmp_path / "40-fixed.args"
    row.write_text("# fixed random targets\n# baseline: softmax\n# method: fixed\n"
                   f"--data-bin {tmp_path / 'data'} --output-layer fixed\n")
    r = read_ledger_row(str(row))
    assert (r.name, r.baseline, r.method, r.table, r.validate) == ("fixed", "softmax", "fixed", tmp_path.name, "bleu")
    assert r.description == "fixed random targets" and r.train_args == ["--output-layer", "fixed"]
    opts = protocol_options(r, patience=5, max_epoch=40, beam=5)
    for option in ("--eval-bleu", "--eval-bleu-remove-bpe", "--maximize-best-checkpoint-metric"):
        assert option in opts
    assert opts[:4] == ["--patience", "5", "--max-epoch", "40"]
    assert row_options(r, 3, 5, 40, 5)[-2:] == ["--seed", "3"]
    row.write_text("# continuous\n# validate: loss -- no BLEU\n--data-bin d --criterion vmf_nll\n")
    r = read_ledger_row(str(row))
    assert (r.validate, r.validate_reason) == ("loss", "no BLEU")
    assert protocol_options(r, 5, 40, 5)[-2:] == ["--best-checkpoint-metric", "loss"]
    row.write_text("# x\n# validate: loss\n--data-bin d\n")
    with pytest.raises(OutlayersConfigError, match=r"40-fixed.args:2: '# validate: loss' needs the reason"):
        read_ledger_row(str(row))
    row.write_text("# x\n--output-layer tied\n")
    with pytest.raises(OutlayersConfigError, match="names no --data-bin"):
        read_ledger_row(str(row))
    row.write_text("# continuous, greedy\n# beam: 1\n--data-bin d --criterion vmf_nll\n")
    r = read_ledger_row(str(row))
    assert r.beam == 1 and r.decoding_beam(5) == 1
    assert '{"beam": 1, "max_len_a": 1.2, "max_len_b": 10}' in protocol_options(r, 5, 40, 5)
    for bad in ("0", "two"):
        row.write_text(f"# x\n# beam: {bad}\n--data-bin d\n")
        with pytest.raises(OutlayersConfigError, match=f"40-fixed.args:2: '# beam: {bad}': the beam must be"):
            read_ledger_row(str(row))
    row.write_text("# x\n--data-bin d\n")
    assert read_ledger_row(str(row)).decoding_beam(5) == 5  # no directive: the runner's --beam
    assert protocol_options(read_ledger_row(str(row)), 5, 40, 5)[:2] == ["--patience", "5"]  # and its --patience
    row.write_text("# registered with a longer patience\n# patience: 10\n--data-bin d\n")
    r = read_ledger_row(str(row))
    assert r.patience == 10 and r.stopping_patience(5) == 10
    assert protocol_options(r, 5, 40, 5)[:4] == ["--patience", "10", "--max-epoch", "40"]
    for bad in ("0", "-1", "ten"):
        row.write_text(f"# x\n# patience: {bad}\n--data-bin d\n")
        with pytest.raises(OutlayersConfigError, match=f"40-fixed.args:2: '# patience: {bad}': the patience must"):
            read_ledger_row(str(row))


def test_quick_row_directives_base_budget_decodes(tmp_path):
    """``# base:`` puts a file's options under the row's (a row's own criterion drops the base's), ``# budget:``
    makes a quick row (``--max-update`` alone, no early stopping), ``# decodes:`` lists further test decodes; each
    mistake is one line naming the file and line."""
    base = tmp_path / "base.args"
    base.write_text("# shared\n--arch outlayers_transformer_tiny --criterion label_smoothed_cross_entropy "
                    "--label-smoothing 0.1 --lr 0.003\n")
    f = tmp_path / "10-vmf.args"
    f.write_text(f"# quick vMF\n# base: {base}\n# budget: 800\n# decodes: 5 5@40\n"
                 "--data-bin d --output-layer continuous --criterion vmf_nll\n")
    r = read_ledger_row(str(f))
    assert r.description == "quick vMF" and (r.budget, r.decodes) == (800, [(5, None), (5, 40.0)])
    assert r.options() == ["--arch", "outlayers_transformer_tiny", "--lr", "0.003", "--output-layer", "continuous",
                           "--criterion", "vmf_nll"]
    assert row_options(r, 2, 5, 50, 5) == ["d", *r.options(), "--max-update", "800", "--seed", "2"]
    assert read_ledger_row(str(f), budget=30).budget == 30  # the demo's budget wins
    step = tmp_path / "11-vmf-fitbias.args"
    step.write_text("# from: vmf\n# after: fit-output-bias\n")
    s = read_ledger_row(str(step))
    assert s.budget == 800 and s.options() == r.options() and s.data_bin == "d"
    bad = tmp_path / "with-data.args"
    bad.write_text("--data-bin elsewhere --lr 0.1\n")
    for directives, said in [("# base: nowhere.args", "2: '# base: nowhere.args' does not exist"),
                             ("# budget: 0", "2: '# budget: 0': the budget must be a positive integer"),
                             ("# budget: 8\n# patience: 3", "3: '# patience:' is early stopping"),
                             ("# decodes: 5@x", "2: '# decodes: 5@x': '5@x' is not BEAM or BEAM@SCALE"),
                             (f"# base: {tmp_path}", f"2: '# base: {tmp_path}' does not exist"),
                             (f"# base: {bad}", f"2: '# base: {bad}' names --data-bin")]:
        f.write_text(f"# quick\n{directives}\n--data-bin d --output-layer tied\n")
        with pytest.raises(OutlayersConfigError, match=re.escape(f"{f}:{said}")):
            read_ledger_row(str(f))


def test_rows_of_one_table_stopped_by_another_patience_than_their_baseline_are_warned_of(tmp_path):
    from fairseq_outlayers.lab.ledger.rows import check_rows

    (tmp_path / "10-softmax.args").write_text("# baseline\n# patience: 10\n--data-bin d\n")
    (tmp_path / "20-tied.args").write_text("# tied\n# baseline: softmax\n# patience: 10\n--data-bin d\n")
    (tmp_path / "40-fixed.args").write_text("# fixed\n# baseline: softmax\n--data-bin d\n")
    rows = [read_ledger_row(str(tmp_path / f)) for f in ("10-softmax.args", "20-tied.args", "40-fixed.args")]
    warnings = check_rows(rows)
    assert len(warnings) == 1 and "40-fixed.args: '# patience: the runner default' but its baseline" in warnings[0]
    assert "10-softmax.args has '# patience: 10'" in warnings[0]


def test_a_step_row_takes_its_parents_options_and_checks_its_step(tmp_path):
    """'# from: ROW' + '# after: STEP': ROW's data, options, validation and beam, ROW's run directories, compared
    with ROW by default; every way to get it wrong is one error naming the file and line."""
    (tmp_path / "30-joint.args").write_text("# joint\n# baseline: tied\n# beam: 4\n# patience: 8\n"
                                            "--data-bin d --output-layer joint\n")
    step = tmp_path / "35-joint-fitbias.args"
    step.write_text("# joint + a fitted bias\n# from: joint\n# after: fit-output-bias --train-sentences 100\n")
    r = read_ledger_row(str(step))
    assert (r.name, r.trained_as, r.training_name(), r.baseline, r.method) == ("joint-fitbias", "joint", "joint",
                                                                               "joint", "joint")
    assert (r.data_bin, r.train_args, r.beam, r.patience) == ("d", ["--output-layer", "joint"], 4, 8)
    assert r.after == ["fit-output-bias", "--train-sentences", "100"]
    parent = read_ledger_row(str(tmp_path / "30-joint.args"))
    assert row_options(r, 2, 5, 50, 5) == row_options(parent, 2, 5, 50, 5)  # the same training
    assert parent.after == [] and parent.training_name() == "joint"
    bad = {
        "# from: joint\n": "35-joint-fitbias.args:1: '# from: joint' needs '# after: STEP'",
        "# from: joint\n# after: fit-output-bias\n--data-bin d\n": "trains with joint's options; remove its options",
        "# from: nothing\n# after: fit-output-bias\n": ":1: '# from: nothing': no row file of that name in",
        "# from: joint\n# after: fit-output-bias\n# beam: 5\n": ":3: '# beam:' of a row with '# from: joint' is",
        "# from: joint\n# after: fit-output-bias\n# patience: 5\n": ":3: '# patience:' of a row with '# from: joint'",
        "# from: joint\n# after: nudge\n": ":2: '# after: nudge': unknown step 'nudge'; the steps are: fit-output-bias",
        "# from: joint\n# after:   \n": ":2: '# after: ': name a step",
        "# from: joint\n# after: fit-output-bias --epochs 0\n": "--epochs must be a positive integer, not 0",
        "# from: joint\n# after: fit-output-bias --lr -1\n": "--lr must be in (0, 10], got -1",
        "# from: joint\n# after: fit-output-bias --lr inf\n": "--lr must be in (0, 10], got inf",
        "# from: joint\n# after: fit-output-bias --lr fast\n": "argument --lr: invalid float value: 'fast'",
        "# from: joint\n# after: fit-output-bias --seed 3\n": "unrecognized arguments: --seed 3",
    }
    for text, message in bad.items():
        step.write_text(text)
        with pytest.raises(OutlayersConfigError, match=re.escape(message)):
            read_ledger_row(str(step))
    (tmp_path / "36-chain.args").write_text("# from: joint-fitbias\n# after: fit-output-bias\n")
    step.write_text("# from: joint\n# after: fit-output-bias\n")
    with pytest.raises(OutlayersConfigError, match="joint-fitbias is itself a step row"):
        read_ledger_row(str(tmp_path / "36-chain.args"))
    # a step row on its own options trains in its own directory
    (tmp_path / "36-chain.args").write_text("# after: fit-output-bias\n--data-bin d --output-layer tied\n")
    r = read_ledger_row(str(tmp_path / "36-chain.args"))
    assert (r.training_name(), r.baseline, r.after) == ("chain", None, ["fit-output-bias"])


def test_a_record_made_with_another_step_is_an_error_naming_both(tmp_path):
    ledger = str(tmp_path)
    fake_record(ledger, "joint-fitbias", 1, 30.0, HYP_A)
    path = os.path.join(ledger, "joint-fitbias.seed1.json")
    record = json.load(open(path))
    record["after"] = {"step": ["fit-output-bias", "--epochs", "3"]}
    open(path, "w").write(json.dumps(record))
    options = record["options"]
    assert records.recorded(ledger, "joint-fitbias", 1, options, "r.args", after=["fit-output-bias", "--epochs", "3"])
    with pytest.raises(OutlayersConfigError, match=r"made with the step `fit-output-bias --epochs 3` after training "
                       r"but r.args now gives `fit-output-bias --epochs 4`"):
        records.recorded(ledger, "joint-fitbias", 1, options, "r.args", after=["fit-output-bias", "--epochs", "4"])
    with pytest.raises(OutlayersConfigError, match="now gives `none`"):
        records.recorded(ledger, "joint-fitbias", 1, options, "r.args")


def test_a_record_made_with_other_options_is_an_error_naming_both(tmp_path):
    ledger = str(tmp_path)
    fake_record(ledger, "softmax", 1, 30.0, HYP_A)
    same = ["data", "--output-layer", "softmax", "--seed", "1"]
    assert records.recorded(ledger, "softmax", 1, same, "rows/10-softmax.args")["seed"] == 1
    assert records.recorded(ledger, "softmax", 2, same, "rows/10-softmax.args") is None
    with pytest.raises(OutlayersConfigError, match=r"softmax.seed1.json was run with `data --output-layer softmax "
                       r"--seed 1` but rows/10-softmax.args now gives `data --output-layer tied --seed 1`"):
        records.recorded(ledger, "softmax", 1, ["data", "--output-layer", "tied", "--seed", "1"],
                         "rows/10-softmax.args")


def test_large_hypotheses_are_gzipped_reproducibly(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "GZIP_ABOVE", 10)
    name = records.write_lines(str(tmp_path), "x.hyp", HYP_A)
    assert name == "x.hyp.gz" and records.read_lines(str(tmp_path), name) == HYP_A
    first = (tmp_path / name).read_bytes()
    records.write_lines(str(tmp_path), "x.hyp", HYP_A)
    assert (tmp_path / name).read_bytes() == first


def test_raw_test_set_specs_and_raw_text_errors(tmp_path):
    from fairseq_outlayers.tools.evaluation.scoring import parse_raw_sets
    from fairseq_outlayers.tools.rawtext import Preparation, read_text

    src, ref = tmp_path / "a.de", tmp_path / "a.en"
    src.write_text("Ein Hund.\n")
    ref.write_text("A dog.\n")
    assert parse_raw_sets([f"news={src},{ref}"]) == {"news": (str(src), str(ref))}
    for spec, message in ((f"news={src}", "expected NAME=SRC_FILE,REF_FILE"),
                          (f"={src},{ref}", "expected NAME=SRC_FILE,REF_FILE"),
                          (f"news={src},{tmp_path / 'no.en'}", "no.en' does not exist")):
        with pytest.raises(OutlayersConfigError, match=message):
            parse_raw_sets([spec])
    with pytest.raises(OutlayersConfigError, match="'news' is given twice"):
        parse_raw_sets([f"news={src},{ref}", f"news={src},{ref}"])
    bad = tmp_path / "bad.de"
    bad.write_bytes(b"gut\nnicht \xff gut\n")
    with pytest.raises(OutlayersConfigError, match=r"bad.de:2: --input is not valid UTF-8"):
        read_text(str(bad), "--input")
    (tmp_path / "empty.de").write_text("")
    with pytest.raises(OutlayersConfigError, match="is empty"):
        read_text(str(tmp_path / "empty.de"), "--input")
    # the preparation is read from the data directory: case from .done, joint or source-side BPE codes
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.de-en.de.idx").write_bytes(b"")
    (data / ".done").write_text("origin: x\nlowercase: 1\n")
    (data / "bpecodes.de").write_text("e n 5\n")
    prep = Preparation.from_data(str(data))
    assert (prep.src, prep.tgt, prep.lowercase, prep.target_bpe) == ("de", "en", True, False)
    assert prep.bpe_codes.endswith("bpecodes.de")
    assert prep.tokenise(["Ein Hund, der läuft."], "de") == ["ein hund , der läuft ."]
    with pytest.raises(OutlayersConfigError, match="holds no binarised split"):
        Preparation.from_data(str(tmp_path))


def test_a_partial_run_with_other_options_is_not_resumed(tmp_path):
    from fairseq_outlayers.lab.ledger.rows import LedgerRow
    from fairseq_outlayers.lab.ledger.runner import Settings, run

    row = LedgerRow("tied", "rows/20-tied.args", "data", ["--output-layer", "tied"])
    partial = tmp_path / "work" / "tied.seed1"
    partial.mkdir(parents=True)
    (partial / "options.json").write_text('["data", "--output-layer", "softmax"]\n')
    with pytest.raises(OutlayersConfigError, match="tied.seed1 holds a partial run made with other options"):
        run(row, 1, Settings(ledger=str(tmp_path / "runs"), work=str(tmp_path / "work"), test_ref="ref"))



def test_a_partial_run_on_other_data_is_not_resumed(tmp_path):
    from harness import partial_ledger_run

    from fairseq_outlayers.lab.ledger.runner import Settings, run

    row, _ = partial_ledger_run(tmp_path, digest="0123456789abcdef")
    data = tmp_path / "data"
    now = records.data_digest(str(data))
    with pytest.raises(OutlayersConfigError, match=f"tied.seed1 was trained on other data than '{data}' holds now "
                                                   f"\\(digest 0123456789abcdef, now {now}\\)"):
        run(row, 1, Settings(ledger=str(tmp_path / "runs"), work=str(tmp_path / "work"), test_ref="ref"))


LOG = """\
2026-11-23 21:20:00 | INFO | train_inner | epoch 001:     50 / 126 loss=9.1, wps=0, wpb=2000, num_updates=50
2026-11-23 21:21:00 | INFO | train_inner | epoch 001:    100 / 126 loss=8.1, wps=1000, wpb=2000, num_updates=100
2026-11-23 21:24:01 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.689 | nll_loss 6.911 | ppl 120.37 | bleu 3.45 | wps 1043.8 | wpb 2524.5 | bsz 168 | num_updates 126
2026-11-23 21:25:00 | INFO | train_inner | epoch 002:     24 / 126 loss=7.1, wps=2000, wpb=2000, num_updates=150
2026-11-23 21:26:00 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 6.5 | nll_loss 5.5 | ppl 45.25 | bleu 10.0 | wps 800 | wpb 2524.5 | bsz 168 | num_updates 252 | best_bleu 10.0
2026-11-23 22:00:00 | INFO | fairseq.trainer | Loaded checkpoint run/checkpoint_last.pt (epoch 2 @ 126 updates)
2026-11-23 22:01:00 | INFO | train_inner | epoch 002:     50 / 126 loss=7.0, wps=4000, wpb=2000, num_updates=176
2026-11-23 22:02:00 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 6.194 | nll_loss 5.176 | ppl 36.14 | bleu 13.43 | wps 824.5 | wpb 2524.5 | bsz 168 | num_updates 252 | best_bleu 13.43
2026-11-23 22:02:00 | INFO | valid | epoch 002 | valid on 'test' subset | loss 6.0 | bleu 14.0 | num_updates 252
"""


def test_learning_curve_and_speed_from_a_resumed_log(tmp_path):
    from fairseq_outlayers.lab.fairseq_runs import training_speed, validations
    from fairseq_outlayers.lab.ledger.runner import curve

    log = tmp_path / "train.log"
    log.write_text(LOG)
    found = validations(str(log))
    assert [v["epoch"] for v in found] == [1, 2]
    assert found[1]["bleu"] == 13.43 and found[1]["best_bleu"] == 13.43  # the epoch validated again after resuming
    assert curve(str(log)) == [
        {"epoch": 1, "num_updates": 126, "loss": 7.689, "nll_loss": 6.911, "bleu": 3.45},
        {"epoch": 2, "num_updates": 252, "loss": 6.194, "nll_loss": 5.176, "bleu": 13.43}]
    assert validations(str(log), "test") == [{"epoch": 2, "loss": 6.0, "bleu": 14.0, "num_updates": 252.0}]
    # 50 updates at 1000 tok/s, 50 at 2000, then 50 (126 -> 176, not 150 -> 176) at 4000: 300,000 tokens
    assert training_speed(str(log)) == pytest.approx(300000 / (100 + 50 + 25))


def test_epoch_seconds_is_the_median_gap_between_validations_within_one_stretch_of_a_log(tmp_path):
    """Epochs 1-4 validated 100, 300 and 120 s apart; a resume (34 min stopped) then epochs 5-6, 110 s apart: the
    median of 100, 300, 120 and 110 is 115; the gap across the resume and the test-subset line are not counted."""
    from fairseq_outlayers.lab.fairseq_runs import epoch_seconds

    def valid(time, epoch, subset="valid"):
        return f"2026-11-23 {time} | INFO | valid | epoch {epoch:03d} | valid on '{subset}' subset | loss 5.0\n"

    log = tmp_path / "train.log"
    log.write_text(valid("10:00:00", 1) + valid("10:01:40", 2) + valid("10:01:50", 2, "test")
                   + valid("10:06:40", 3) + valid("10:08:40", 4)
                   + "2026-11-23 10:45:00 | INFO | fairseq.trainer | Loaded checkpoint c.pt (epoch 4 @ 504 updates)\n"
                   + valid("10:47:00", 5) + valid("10:48:50", 6))
    assert epoch_seconds(str(log)) == 115.0
    assert epoch_seconds(str(log), "test") is None
    (tmp_path / "one.log").write_text(valid("10:00:00", 1))
    assert epoch_seconds(str(tmp_path / "one.log")) is None


def test_plots_are_drawn_from_the_records_and_deterministic(tmp_path):
    import xml.etree.ElementTree as ET

    from fairseq_outlayers.lab.ledger.plots import nice_ticks

    ledger = str(tmp_path / "runs")
    for seed in (1, 2):
        rec = fake_record(ledger, "softmax", seed, 30.0 + seed, HYP_A)
        rec["curve"] = [{"epoch": e, "bleu": 10.0 * e + seed} for e in (1, 2, 3)]
        records.write_record(ledger, rec, {"test2016": HYP_A}, {"test2016": REFS})
    fake_record(ledger, "tied", 1, 29.0, HYP_B, baseline="softmax")  # no curve: in the score plot only
    out = tmp_path / "docs" / "ledger.md"
    assert ledger_main(["render", "--ledger", ledger, "--out", str(out)]) == 0
    curves, scores = out.parent / "ledger-t-curves.svg", out.parent / "ledger-t-scores.svg"
    text = out.read_text()
    assert "![t: validation score per epoch](ledger-t-curves.svg)" in text
    assert "(ledger-t-scores.svg)" in text
    ns = "{http://www.w3.org/2000/svg}"
    lines = ET.parse(curves).getroot().findall(f"{ns}polyline")
    assert len(lines) == 2 and lines[1].get("stroke-dasharray")  # one per seed of softmax, seed 2 dashed
    legend = [t.text for t in ET.parse(scores).getroot().iter(f"{ns}text")]
    assert "softmax (2 seeds)" in legend and "tied (1 seed)" in legend
    first = (curves.read_bytes(), scores.read_bytes())
    assert ledger_main(["render", "--ledger", ledger, "--out", str(out)]) == 0
    assert (curves.read_bytes(), scores.read_bytes()) == first
    assert nice_ticks(3.45, 40.02) == [0, 10, 20, 30, 40, 50] and nice_ticks(2.2, 2.8) == [2.2, 2.4, 2.6, 2.8]


def test_a_row_of_the_other_direction(tmp_path, capsys):
    """--source-lang/--target-lang in a row: the runner's direction, checked against the test reference."""
    data = tmp_path / "data"
    data.mkdir()
    row = tmp_path / "10-en-de.args"
    row.write_text(f"# en-de\n--data-bin {data} -s en --target-lang de --output-layer softmax\n")
    assert read_ledger_row(str(row)).languages() == ("en", "de")
    ref = tmp_path / "test_2016_flickr.en"
    ref.write_text("a\n")
    assert ledger_main(["run", "--rows", str(row), "--test-ref", str(ref), "--ledger", str(tmp_path / "l")]) == 2
    assert "translates into 'de' but --test-ref" in capsys.readouterr().err
    row.write_text(f"# en-de\n--data-bin {data} --source-lang en --output-layer softmax\n")
    with pytest.raises(OutlayersConfigError, match="give both --source-lang and --target-lang"):
        read_ledger_row(str(row)).languages()
    row.write_text(f"# de-en\n--data-bin {data} --output-layer softmax\n")
    assert read_ledger_row(str(row)).languages() == (None, None)


def test_both_directions_in_one_call_each_with_its_own_reference(tmp_path, monkeypatch, capsys):
    """The default --test-ref names the language {tgt}: each row gets the reference of its target language (its
    --target-lang, else its data directory's target); a missing one is named before anything trains."""
    from fairseq_outlayers.lab.ledger import runner

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.de-en.de.idx").write_bytes(b"")
    (tmp_path / "10-de-en.args").write_text(f"# de-en\n--data-bin {data} --output-layer softmax\n")
    (tmp_path / "20-en-de.args").write_text(f"# en-de\n--data-bin {data} -s en -t de --output-layer softmax\n")
    (tmp_path / "test.en").write_text("a\n")
    seen = {}

    def fake_run(row, seed, settings):
        seen[row.name] = settings.test_ref
        return fake_record(settings.ledger, row.name, seed, 30.0, HYP_A), False

    monkeypatch.setattr(runner, "run", fake_run)
    argv = ["run", "--rows", str(tmp_path / "*.args"), "--seeds", "1", "--test-ref", str(tmp_path / "test.{tgt}"),
            "--ledger", str(tmp_path / "runs")]
    assert ledger_main(argv) == 2 and seen == {}
    assert f"20-en-de.args: test reference '{tmp_path / 'test.de'}' does not exist" in capsys.readouterr().err
    (tmp_path / "test.de").write_text("b\n")
    assert ledger_main(argv) == 0
    assert seen == {"de-en": str(tmp_path / "test.en"), "en-de": str(tmp_path / "test.de")}


def test_jobs_run_every_row_and_seed_and_other_options_stop_before_training(tmp_path, monkeypatch):
    import threading

    from fairseq_outlayers.lab.ledger import runner

    (tmp_path / "data").mkdir()
    ref = tmp_path / "test.en"
    ref.write_text("a\n")
    for name in ("10-softmax", "20-tied"):
        (tmp_path / f"{name}.args").write_text(f"# {name}\n--data-bin {tmp_path / 'data'} --output-layer x\n")
    started, running, most = [], [0], [0]
    lock, three = threading.Lock(), threading.Event()

    def fake_run(row, seed, settings):
        with lock:
            started.append((row.name, seed))
            running[0] += 1
            most[0] = max(most[0], running[0])
            if running[0] == 3:
                three.set()
        three.wait(timeout=30)  # the first three hold their slots until all three run: no race with a busy machine
        with lock:
            running[0] -= 1
        return fake_record(settings.ledger, row.name, seed, 30.0, HYP_A), False

    monkeypatch.setattr(runner, "run", fake_run)
    ledger = str(tmp_path / "runs")
    argv = ["run", "--rows", str(tmp_path / "*.args"), "--seeds", "1", "2", "--test-ref", str(ref),
            "--ledger", ledger, "--jobs", "3"]
    assert ledger_main(argv) == 0
    # the three slots take the runs in the order given, seed 1 of every row first; the fourth waits for a slot
    assert sorted(started[:3]) == [("softmax", 1), ("softmax", 2), ("tied", 1)] and started[3] == ("tied", 2)
    assert most[0] == 3  # three at once
    # the fake records hold other options than the rows give: refused before anything trains
    started.clear()
    assert ledger_main(argv) == 2 and started == []
    # a step row on softmax's training comes after every training row, whatever its file name
    (tmp_path / "11-softmax-fitbias.args").write_text("# from: softmax\n# after: fit-output-bias\n")
    started.clear()
    assert ledger_main(argv[:-4] + ["--ledger", str(tmp_path / "runs2"), "--jobs", "1"]) == 0
    assert started == [("softmax", 1), ("tied", 1), ("softmax", 2), ("tied", 2), ("softmax-fitbias", 1),
                       ("softmax-fitbias", 2)]


def test_each_run_sees_one_gpu_the_slots_taking_the_visible_gpus_in_turn(tmp_path, monkeypatch):
    """fairseq-train would train one run data-parallel over every GPU it sees (a larger batch than the row's
    records): with --jobs 3 on GPUs "5,7" the runs at once see 5, 7, 5, each its own, and a GPU comes back to the
    pool when its run ends; without CUDA nothing is set."""
    import threading
    import time

    from fairseq_outlayers.lab import gpus
    from fairseq_outlayers.lab.ledger import runner

    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "5, 7"}) == ["5", "7"]
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == [] and gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert gpus.visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-1a2b,MIG-3c"}) == ["GPU-1a2b", "MIG-3c"]
    assert gpus.slots(2, []) is None
    q = gpus.slots(3, ["5", "7"])
    assert [q.get() for _ in range(3)] == ["5", "7", "5"] and q.empty()
    # a step row's in-process bias fit runs on its run's GPU, as this process numbers it
    assert gpus.torch_device({"CUDA_VISIBLE_DEVICES": "7"}, {"CUDA_VISIBLE_DEVICES": "5,7"}) == "cuda:1"
    assert gpus.torch_device({"CUDA_VISIBLE_DEVICES": "5"}, {"CUDA_VISIBLE_DEVICES": "5,7"}) == "cuda:0"
    assert gpus.torch_device({}, {"CUDA_VISIBLE_DEVICES": "5,7"}) == "cuda"
    assert gpus.torch_device({}, {"CUDA_VISIBLE_DEVICES": ""}) == "cpu"

    (tmp_path / "data").mkdir()
    ref = tmp_path / "test.en"
    ref.write_text("a\n")
    for name in ("10-a", "20-b", "30-c", "40-d"):
        (tmp_path / f"{name}.args").write_text(f"# {name}\n--data-bin {tmp_path / 'data'} --output-layer x\n")
    seen, at_once, lock = [], {}, threading.Lock()

    def fake_run(row, seed, settings):
        gpu = settings.env.get("CUDA_VISIBLE_DEVICES")
        with lock:
            seen.append(gpu)
            at_once[gpu] = at_once.get(gpu, 0) + 1
            assert sum(at_once.values()) <= 3 and at_once.get("5", 0) <= 2 and at_once.get("7", 0) <= 1
        time.sleep(0.2)
        with lock:
            at_once[gpu] -= 1
        return fake_record(settings.ledger, row.name, seed, 30.0, HYP_A), False

    monkeypatch.setattr(runner, "run", fake_run)
    argv = ["run", "--rows", str(tmp_path / "*.args"), "--seeds", "1", "--test-ref", str(ref), "--jobs", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    assert ledger_main(argv + ["--ledger", str(tmp_path / "runs")]) == 0
    assert sorted(seen[:3]) == ["5", "5", "7"] and len(seen) == 4 and set(seen) == {"5", "7"}
    seen.clear()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert ledger_main(argv + ["--ledger", str(tmp_path / "runs2")]) == 0
    assert seen == [None] * 4


def test_the_run_environment_reaches_fairseq_train_and_generate(tmp_path, monkeypatch):
    """The GPU a run is given is set for its own fairseq-train and fairseq-generate processes only."""
    import subprocess as sp
    import sys

    from fairseq_outlayers.lab import fairseq_runs
    from fairseq_outlayers.tools.evaluation import scoring

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    log_path = str(tmp_path / "train.log")
    show = "import os; print('seen', os.environ['CUDA_VISIBLE_DEVICES'], os.environ['PYTHONUNBUFFERED'])"
    fairseq_runs.run_training([sys.executable, "-c", show], log_path, "x", env={"CUDA_VISIBLE_DEVICES": "1"})
    assert open(log_path).read().strip() == "seen 1 1"
    calls = []

    def fake_run(cmd, env=None, cwd=None):
        calls.append(env)
        os.makedirs(str(tmp_path / "gen"), exist_ok=True)
        (tmp_path / "gen" / "generate-test.txt").write_text("H-0\t-0.1\ta b\n")
        return sp.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(scoring.commands, "run", fake_run)
    # the checkpoint is checked before fairseq-generate runs; this one is a name only (the fake run reads nothing)
    monkeypatch.setattr("fairseq_outlayers.core.checkpoint_safety.check_decodable", lambda path: None)
    assert scoring.generate("data", "ckpt", str(tmp_path / "gen"), env={"CUDA_VISIBLE_DEVICES": "1"})[1] == ["a b"]
    assert calls[0]["CUDA_VISIBLE_DEVICES"] == "1" and calls[0]["PATH"] == os.environ["PATH"]
    scoring.generate("data", "ckpt", str(tmp_path / "gen"))
    assert calls[1] is None  # no change: the process's own environment
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_every_committed_row_file_is_a_valid_fairseq_train_command():
    """Each configs/ledger row parses, names a baseline of its own table, and its whole command (row options plus
    the protocol) is accepted by fairseq-train's own parser with the plugin loaded: a typo fails here, not after
    hours of training."""
    import glob as globmod

    from fairseq import options

    from fairseq_outlayers.lab.ledger.rows import check_rows

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = sorted(globmod.glob(os.path.join(repo, "configs", "ledger", "*", "*.args")))
    assert len(files) >= 20
    rows = [read_ledger_row(f) for f in files]
    assert check_rows(rows) == []  # every baseline is a row of the same table
    for row in rows:
        cmd = row_options(row, 1, 5, 50, row.decoding_beam(5))
        args = options.parse_args_and_arch(options.get_training_parser(),
                                           cmd + ["--user-dir", os.path.join(repo, "fairseq_outlayers"), "--cpu"])
        assert args.seed == 1 and args.patience == row.stopping_patience(5) and args.max_epoch == 50, row.path
        assert args.best_checkpoint_metric == ("bleu" if row.validate == "bleu" else "loss"), row.path


def test_every_quick_row_file_is_a_valid_fairseq_train_command(monkeypatch):
    """The demo's, ``make results``' and the continuous sweep's row files are rows of the same format, run by the
    same runner: each (with its ``# base:``, from the repository's root) is a whole fairseq-train command; a sweep
    row is a quick row of its own budget, decoded greedily and at its further decodes."""
    import glob as globmod

    from fairseq import options

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.chdir(repo)
    files = sorted(globmod.glob(os.path.join("configs", "*", "*.args")))
    files = [f for f in files if f.split(os.sep)[1] in ("demo", "continuous", "vmf-sweep", "serving")]
    assert len(files) >= 30
    for path in files:
        row = read_ledger_row(path, "work/multi30k/data-bin/de-en")
        assert row.base_args, path  # every quick row names its base
        sweep = path.split(os.sep)[1] == "vmf-sweep"
        assert (row.budget, row.beam) == ((800, 1) if sweep else (None, None)), path
        assert not sweep or row.decodes == [(5, None), (5, 40.0)], path
        cmd = row_options(dataclasses_replace(row, budget=row.budget or 200), 1, 5, 50, 5)
        args = options.parse_args_and_arch(options.get_training_parser(),
                                           cmd + ["--user-dir", os.path.join(repo, "fairseq_outlayers"), "--cpu"])
        assert args.max_update == (row.budget or 200) and args.patience == -1 and not args.eval_bleu, path


def test_status_says_recorded_partial_not_started_and_other_options(tmp_path, capsys):
    """`ledger status`: a record (its test score), a partial run (epoch, best validation and patience left, from
    its log: the LOG above is epochs 1-2, best 13.43 at epoch 2), a run not started, and records or partial runs
    made with other options than the row gives now."""
    import json

    from fairseq_outlayers.lab.ledger.rows import row_options

    rows = tmp_path / "rows"
    rows.mkdir()
    for name in ("10-softmax", "20-tied", "30-joint"):
        (rows / f"{name}.args").write_text(f"# {name}\n--data-bin data --output-layer {name[3:]}\n")
    (rows / "20-tied.args").write_text("# tied\n# patience: 7\n--data-bin data --output-layer tied\n")
    ledger, work = str(tmp_path / "runs"), tmp_path / "work"
    softmax = read_ledger_row(str(rows / "10-softmax.args"))
    rec = fake_record(ledger, "softmax", 1, 31.25, HYP_A, table="rows")
    rec["options"] = row_options(softmax, 1, 5, 50, 5)
    records.write_record(ledger, rec, {"test2016": HYP_A}, {"test2016": REFS})
    fake_record(ledger, "softmax", 2, 30.0, HYP_A, table="rows")  # options of another experiment
    tied = read_ledger_row(str(rows / "20-tied.args"))
    (work / "tied.seed1").mkdir(parents=True)
    (work / "tied.seed1" / "options.json").write_text(json.dumps(row_options(tied, 1, 5, 50, 5)))
    (work / "tied.seed1" / "train.log").write_text(LOG)
    (work / "tied.seed2").mkdir()
    (work / "tied.seed2" / "options.json").write_text(json.dumps(row_options(tied, 2, 5, 40, 5)))
    joint = fake_record(ledger, "joint", 3, 32.0, HYP_A, table="rows")  # a seed not asked for: a guide to the cost
    joint.update(epochs=30, training_seconds=5400.0)
    records.write_record(ledger, joint, {"test2016": HYP_A}, {"test2016": REFS})
    assert ledger_main(["status", "--rows", str(rows / "*.args"), "--seeds", "1", "2", "--ledger", ledger,
                        "--work", str(work)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "rows:"
    assert out[1] == "  softmax seed 1: recorded: test2016 31.25, best valid 1.0, 10 epochs"
    assert out[2].startswith("  softmax seed 2: recorded with other options than") and "rename the row" in out[2]
    # the epoch took 119 s (21:24:01 to 21:26:00; the resumed stretch has one validation): 7 epochs at least (the
    # row's own '# patience: 7')
    assert out[3] == (f"  tied seed 1: partial: epoch 2 of at most 50, best valid bleu 13.43 at epoch 2, 7 of 7 "
                      f"epochs of patience left, 2.0 min an epoch here (at least 14 min more) ({work / 'tied.seed1'})")
    assert out[4] == (f"  tied seed 2: {work / 'tied.seed2'} holds a partial run with other options: remove it to "
                      "start this one")
    cost = " (its 1 recorded seed took 30 epochs, 90 min of training on cpu)"
    assert out[5:] == [f"  joint seed 1: not started{cost}", f"  joint seed 2: not started{cost}",
                       "1 recorded, 1 partial, 2 not started, 2 other options"]


def recording_runner(monkeypatch):
    """Replace runner.run by one that records as it does (the row's options, the digests of its data and of the
    files its options name), skipping what is recorded; returns the list of seeds it trained."""
    from fairseq_outlayers.lab.ledger import runner
    from fairseq_outlayers.lab.ledger.rows import row_options

    started = []

    def fake_run(row, seed, settings):
        path = records.record_path(settings.ledger, row.name, seed)
        if os.path.exists(path):
            return records.load_record(path), True
        started.append(seed)
        options = row_options(row, seed, 5, 50, 5)
        rec = fake_record(settings.ledger, row.name, seed, 30.0, HYP_A, baseline=row.baseline, table=row.table)
        rec.update(options=options, data_digest=records.data_digest(options[0]),
                   file_digests=records.file_digests(options))
        records.write_record(settings.ledger, rec, {"test2016": HYP_A}, {"test2016": REFS})
        return rec, False

    monkeypatch.setattr(runner, "run", fake_run)
    return started


def one_row_table(tmp_path, monkeypatch, name, options):
    """A table 'rows' of one row file NAME.args with OPTIONS, run by ``recording_runner``: (rows directory, ledger,
    the `ledger run` arguments up to --seeds, the list of seeds trained)."""
    rows = tmp_path / "rows"
    rows.mkdir()
    (rows / f"{name}.args").write_text(f"# {name}\n{options}\n")
    ref = tmp_path / "test.en"
    ref.write_text("a\n")
    ledger = str(tmp_path / "runs")
    argv = ["run", "--rows", str(rows / "*.args"), "--test-ref", str(ref), "--ledger", ledger, "--seeds"]
    return rows, ledger, argv, recording_runner(monkeypatch)


def refused_then_status(argv, rows, ledger, capsys):
    """`ledger run ARGV` refused (exit 2), then `ledger status` of seed 1: (the refusal's stderr, status lines)."""
    capsys.readouterr()
    assert ledger_main(argv) == 2
    err = capsys.readouterr().err
    assert ledger_main(["status", "--rows", str(rows / "*.args"), "--seeds", "1", "--ledger", ledger]) == 0
    return err, capsys.readouterr().out.splitlines()


def test_data_prepared_again_differently_is_refused_before_training_and_shown(tmp_path, monkeypatch, capsys):
    """A record keeps the digest of its data directory (names and contents of the dictionaries, codes and binarised
    splits; not the preprocessing log, hidden markers or subdirectories). When the directory later holds other
    data, `run` refuses to add seeds to the table before training anything, `status` says which record was made on
    other data, and the rendered table lists the digests."""
    import hashlib

    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.en.txt").write_text("a 1\n")
    (data / "train.de-en.en.bin").write_bytes(b"xy")
    (data / "preprocess.log").write_text("run at 10:00\n")
    (data / ".done").write_text("x\n")
    (data / "sub").mkdir()
    first = hashlib.sha256(b"dict.en.txt\x004\x00a 1\n" + b"train.de-en.en.bin\x002\x00xy").hexdigest()[:16]
    assert records.data_digest(str(data)) == first
    (data / "preprocess.log").write_text("run again at 11:00\n")
    (data / "pairs.de-en.txt").write_text("haus house\n")  # written there later by `make demo`: not the data
    assert records.data_digest(str(data)) == first
    rows, ledger, argv, started = one_row_table(tmp_path, monkeypatch, "10-softmax",
                                                f"--data-bin {data} --output-layer softmax")
    assert ledger_main(argv + ["1"]) == 0 and started == [1]
    assert ledger_main(argv + ["1", "2"]) == 0 and started == [1, 2]  # same data: seed 2 joins the table
    (data / "dict.en.txt").write_text("b 1\n")
    second = records.data_digest(str(data))
    assert second != first
    err, out = refused_then_status(argv + ["1", "2", "3"], rows, ledger, capsys)
    assert started == [1, 2]
    assert (f"10-softmax.args: '{data}' now holds other data (digest {second}) than the records of table 'rows' "
            f"were trained on (softmax seed 1: digest {first}, softmax seed 2: digest {first})") in err
    assert out[1] == (f"  softmax seed 1: recorded on other data (digest {first}) than '{data}' holds now "
                      f"({second}): prepare the data as that run did ({records.record_path(ledger, 'softmax', 1)})")
    assert out[2] == "1 other data"
    assert f"- commits:\n  - abc1234.\n- data digests: `{first}`." in render(ledger)


def test_a_file_the_options_name_made_again_differently_is_refused_and_shown(tmp_path, monkeypatch, capsys):
    """A record keeps the digest of every file its options name (here a pairing file, as a shared-private row's
    `--pairing`); when that file later holds something else (fast_align or the vectors run again), `run` refuses
    to add seeds to the table before training, `status` says which record used the other file, and a partial run
    is not resumed with it."""
    import hashlib
    import json

    from harness import partial_ledger_run

    from fairseq_outlayers.lab.ledger.runner import Settings, run

    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.en.txt").write_text("a 1\n")
    pairs = data / "pairs.de-en.txt"
    pairs.write_text("haus house\n")
    first = hashlib.sha256(b"haus house\n").hexdigest()[:16]
    options = ["--pairing", str(pairs), "--output-layer", "tied", "--save-dir", str(data)]
    assert records.file_digests(options) == {str(pairs): first}  # a directory is not a named file
    rows, ledger, argv, started = one_row_table(tmp_path, monkeypatch, "50-sp", f"--data-bin {data} --pairing {pairs}")
    assert ledger_main(argv + ["1"]) == 0 and started == [1]
    assert records.load_record(records.record_path(ledger, "sp", 1))["file_digests"] == {str(pairs): first}
    pairs.write_text("haus home\n")
    second = records.file_digest(str(pairs))
    err, out = refused_then_status(argv + ["1", "2"], rows, ledger, capsys)
    assert started == [1]
    assert (f"50-sp.args: '{pairs}' now holds another file (digest {second}) than the recorded seeds of row 'sp' "
            f"were trained with (sp seed 1: digest {first}); it was made again differently") in err
    assert out[1] == (f"  sp seed 1: recorded with another '{pairs}' (digest {first}) than the one there now "
                      f"({second}): restore the file that run used ({records.record_path(ledger, 'sp', 1)})")
    # another row of the table may use the new file (its comparisons with the row's baseline do not involve it):
    # trained with a warning, and every comparison between the two rows names the two versions
    (rows / "60-sp2.args").write_text(f"# sp2\n# baseline: sp\n--data-bin {data} --pairing {pairs} --dropout 0.2\n")
    capsys.readouterr()
    assert ledger_main(argv[:2] + [str(rows / "60-sp2.args")] + argv[3:] + ["1"]) == 0 and started == [1, 1]
    assert (f"warning: {rows / '60-sp2.args'}: '{pairs}' (digest {second}) differs from the file sp seed 1 of table "
            f"'rows' was trained with (digest {first})") in capsys.readouterr().out
    assert records.files_differ([records.load_record(records.record_path(ledger, "sp2", 1))],
                                [records.load_record(records.record_path(ledger, "sp", 1))]) == [
        f"{pairs} ({second} vs {first})"]
    text = render(ledger)
    assert f"+0.00 [+0.00, +0.00] (trained with other {pairs} ({second} vs {first}))" in text
    assert f"named files: `{pairs}` in 2 versions: `{first}` (sp), `{second}` (sp2)." in text
    assert compare_line(ledger, "sp", "sp2").endswith(
        f"the rows were trained with different files, so the difference mixes them with the methods: "
        f"{pairs} ({first} vs {second})")
    pairs.write_text("haus house\n")  # restored: the row takes seed 2
    assert ledger_main(argv[:2] + [str(rows / "50-sp.args")] + argv[3:] + ["1", "2"]) == 0 and started == [1, 1, 2]

    monkeypatch.undo()
    (tmp_path / "partial").mkdir()
    row, work = partial_ledger_run(tmp_path / "partial")
    vectors = tmp_path / "partial" / "vectors.vec"
    vectors.write_text("1 1\nhouse 0.5\n")
    row.train_args.extend(["--target-vectors", str(vectors)])
    (work / "options.json").write_text(json.dumps(row_options(row, 1, 5, 50, 5)))
    (work / "file_digests.json").write_text(json.dumps({str(vectors): "0123456789abcdef"}))
    now = records.file_digest(str(vectors))
    with pytest.raises(OutlayersConfigError, match=f"tied.seed1 was trained with another '{vectors}' than the one "
                                                   f"there now \\(digest 0123456789abcdef, now {now}\\)"):
        run(row, 1, Settings(ledger=str(tmp_path / "runs2"), work=str(work.parent), test_ref="ref"))


def test_status_of_a_stopped_run_and_of_a_step_row_on_it(tmp_path, capsys):
    """A run the protocol stopped (here --max-epoch 2 reached) is 'trained, not recorded'; a step row '# from:' it
    reads the same run directory and says the step comes before the test."""
    import json

    rows = tmp_path / "rows"
    rows.mkdir()
    (rows / "20-tied.args").write_text("# tied\n--data-bin data --output-layer tied\n")
    (rows / "25-tied-fitbias.args").write_text("# tied + bias\n# from: tied\n# after: fit-output-bias\n")
    tied, work = read_ledger_row(str(rows / "20-tied.args")), tmp_path / "work"
    (work / "tied.seed1").mkdir(parents=True)
    (work / "tied.seed1" / "options.json").write_text(json.dumps(row_options(tied, 1, 5, 2, 5)))
    (work / "tied.seed1" / "train.log").write_text(LOG)
    assert ledger_main(["status", "--rows", str(rows / "*.args"), "--seeds", "1", "--max-epoch", "2", "--ledger",
                        str(tmp_path / "runs"), "--work", str(work)]) == 0
    out = capsys.readouterr().out.splitlines()
    stopped = "trained, not recorded: stopped at epoch 2, best valid bleu 13.43 at epoch 2; `ledger run` "
    assert out[1:] == [f"  tied seed 1: {stopped}tests and records it ({work / 'tied.seed1'})",
                       f"  tied-fitbias seed 1: {stopped}applies fit-output-bias, tests and records it "
                       f"({work / 'tied.seed1'})", "2 trained"]
    # seed 2: no training in work/tied.seed2, so the step row's run trains tied there first
    assert ledger_main(["status", "--rows", str(rows / "25-tied-fitbias.args"), "--seeds", "2", "--ledger",
                        str(tmp_path / "runs"), "--work", str(work)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (f"  tied-fitbias seed 2: not started: tied is trained first in "
                                                       f"{work / 'tied.seed2'} (its checkpoints are not there), then "
                                                       "fit-output-bias")


def test_the_committed_tables_are_the_committed_records_rendered(monkeypatch):
    """docs/results/ledger.md and its plots are what `ledger render` makes of docs/results/runs today, bit for bit:
    a record committed without rendering again (or a render change whose output was not committed) fails here."""
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser_defaults = build_parser().parse_args(["render"])
    figures = {}
    text = render(parser_defaults.ledger, seeds=parser_defaults.seeds, test=parser_defaults.test_name,
                  title=parser_defaults.title, figures=figures,
                  claims=claims_file(parser_defaults.ledger, parser_defaults.claims))
    assert "## Claims and their verdicts" in text  # the committed claims file is read by default
    out_dir = os.path.dirname(parser_defaults.out)
    with open(parser_defaults.out, encoding="utf-8") as f:
        assert f.read() == text + "\n", "docs/results/ledger.md is stale: run python -m fairseq_outlayers.lab.ledger render"
    assert figures
    for name, svg in sorted(figures.items()):
        with open(os.path.join(out_dir, name), encoding="utf-8") as f:
            assert f.read() == svg, f"{name} is stale: run python -m fairseq_outlayers.lab.ledger render"


def test_a_copy_without_git_names_its_commit_through_the_environment(tmp_path, monkeypatch):
    """A device machine gets the working tree, perhaps without .git: the record's commit comes from
    OUTLAYERS_COMMIT there (else "unknown"); in a checkout git's own answer wins."""
    from fairseq_outlayers.lab.ledger import runner

    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.setattr(runner, "CODE_DIR", str(tmp_path))
    monkeypatch.delenv("OUTLAYERS_COMMIT", raising=False)
    assert runner.git_commit() == "unknown"
    monkeypatch.setenv("OUTLAYERS_COMMIT", "28b7578")
    assert runner.git_commit() == "28b7578"
    monkeypatch.setenv("OUTLAYERS_COMMIT", "not-this")
    monkeypatch.setattr(runner, "CODE_DIR", os.path.dirname(os.path.abspath(runner.__file__)))
    assert not runner.git_commit().startswith("not-this")  # this checkout's own commit


def test_a_quick_run_past_its_budget_is_refused_and_one_at_its_budget_is_not_trained_again(tmp_path, monkeypatch):
    """A run directory whose checkpoint has more updates than the row's budget (e.g. the demo's earlier, longer run)
    is never recorded as this row's run; one at exactly the budget (killed between training and its record) is
    recorded without training again."""
    import torch

    from fairseq_outlayers.lab.ledger import runner
    from fairseq_outlayers.lab.ledger.rows import LedgerRow

    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.en.txt").write_text("a 1\n")
    row = LedgerRow("tied", "10-tied.args", str(data), ["--output-layer", "tied"], budget=200)
    s = runner.Settings(ledger=str(tmp_path / "runs"), work=str(tmp_path / "work"), test_ref="ref")
    options = row_options(row, 1, 5, 50, 5)
    run_dir = tmp_path / "work" / "tied.seed1"
    run_dir.mkdir(parents=True)
    monkeypatch.setattr(runner.fairseq_runs, "run_training", lambda *a, **k: pytest.fail("trained again"))
    for updates in (1200, 200):
        torch.save({"optimizer_history": [{"num_updates": updates}], "extra_state": {}}, run_dir / "checkpoint_last.pt")
        if updates > 200:
            with pytest.raises(OutlayersConfigError, match="has trained 1200 updates, more than the row's budget of 200"):
                runner.train(row, 1, s, options, str(run_dir))
        else:
            assert runner.train(row, 1, s, options, str(run_dir))["seconds"] == 0.0
