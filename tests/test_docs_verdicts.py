"""Verdicts by code: the rule of ``stats.target_verdict`` on exact cases (and its mirror image), the claims file's
checks, and the verdict over further seeds, which waits until both rows of a pair have the planned seeds."""
import json
import math
import os
import re

import pytest

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.lab.docs import Context, render_text
from fairseq_outlayers.lab.ledger.render import claims_section, read_claims, render
from fairseq_outlayers.lab.ledger.stats import seeds_for_power, target_verdict, welch_t_test
from harness import REPO
from test_ledger import HYP_A, HYP_B, fake_record


def test_the_rule_on_exact_cases():
    # interval above the target, every seed of the row more than the target above every baseline seed
    assert target_verdict((0.6, 1.2), [40.0, 40.2], [39.0, 39.4], 0.5)[0] == "above"
    # the same interval, one seed pair closer than the target and the seeds too spread for Welch: inconclusive
    side, why = target_verdict((0.6, 1.2), [38.9, 41.0, 40.5], [39.0, 39.4, 38.0], 0.5)
    assert side == "inconclusive" and "do not back it" in why
    # interval holding the target
    assert target_verdict((0.4, 0.6), [40.0, 41.0], [38.0, 38.1], 0.5) == (
        "inconclusive", "the interval holds the target +0.50")
    # below: the interval under the target and every seed pair too
    assert target_verdict((-2.6, -1.3), [37.0, 37.5], [39.0, 39.3], -0.3)[0] == "below"
    # backed by Welch alone (the seed pairs overlap the target, the shifted seeds' test does not)
    system, baseline = [40.6, 40.7, 40.8, 40.9, 39.75], [39.0, 39.1, 39.2, 39.3]
    assert min(system) - max(baseline) < 0.5
    assert welch_t_test([v - 0.5 for v in system], baseline)["p"] < 0.05
    assert target_verdict((0.8, 1.5), system, baseline, 0.5)[0] == "above"


def test_the_rule_is_its_own_mirror_image():
    """Swapping the rows (interval, seeds and target negated) swaps above and below, and an inconclusive case stays
    inconclusive: the joint + sampling case and its mirror read alike."""
    cases = [((-0.74, 0.47), [38.63, 39.24, 38.9], [38.0, 39.5, 39.56], 0.5),
             ((0.65, 1.71), [39.8, 41.1, 39.8], [40.05, 38.97, 38.04], 0.5),
             ((-2.58, -1.32), [36.5, 37.0, 38.1], [39.6, 38.5, 39.3], -0.3)]
    mirror = {"above": "below", "below": "above", "inconclusive": "inconclusive"}
    for (low, high), system, baseline, target in cases:
        side = target_verdict((low, high), system, baseline, target)[0]
        assert target_verdict((-high, -low), baseline, system, -target)[0] == mirror[side]
    # the sampled joint layer against tying: the interval below +0.5 but seeds that do not back it
    assert target_verdict(*cases[0])[0] == "inconclusive"


def _claims(path, **extra):
    claim = {"name": "joint", "label": "`joint`", "page": "joint-output.md", "claim": "joint beats tied",
             "table": "t", "row": "joint", "baseline": "tied", "target": 0.5}
    claim.update(extra)
    path.write_text(json.dumps({"claims": [claim]}))
    return str(path)


def test_the_further_seeds_verdict_waits_for_both_rows(tmp_path):
    ledger = str(tmp_path / "runs")
    for seed, bleu in ((1, 30.0), (2, 31.0), (3, 35.0), (4, 36.0)):
        fake_record(ledger, "tied", seed, bleu, HYP_A)
    for seed, bleu in ((1, 33.0), (2, 34.0), (3, 35.0)):
        fake_record(ledger, "joint", seed, bleu, HYP_B, baseline="tied")
    claims = _claims(tmp_path / "claims.json", further_seeds=[1, 2, 3, 4])
    text = "\n".join(claims_section(ledger, claims, [1, 2, 3], "test2016", {}))
    further = text.split("Over every seed both rows have")[1]
    assert "| joint beats tied | 1-4 | joint: 1-3; tied: 1-4 |" in further
    assert further.rstrip().endswith("| waiting for seeds (joint 4) |")
    fake_record(ledger, "joint", 4, 37.0, HYP_B, baseline="tied")
    text = "\n".join(claims_section(ledger, claims, [1, 2, 3], "test2016", {}))
    line = text.split("Over every seed both rows have")[1].strip().splitlines()[-1]
    assert "waiting" not in line and "over seeds 1-4 |" in line
    # every planned seed in and still inconclusive: the page says so, with the seeds the spread would need. Means
    # 34.75 and 33.00, variances 35/12 and 26/3 (pooled sd 2.41), 1.25 above the target: an effect of 0.52 sd
    assert line.endswith("| **inconclusive**: 4 seeds a row do not settle it: the means differ by +1.75, 1.25 above "
                         "the target +0.50 (seed sd 2.41, Welch's p = 0.497); about 60 seeds a row would find that gap "
                         "four times in five |")
    assert seeds_for_power(1.25, math.sqrt((35.0 / 12.0 + 26.0 / 3.0) / 2.0)) == 60
    assert round(welch_t_test([32.5, 33.5, 34.5, 36.5], [30.0, 31.0, 35.0, 36.0])["p"], 3) == 0.497
    # the protocol's table keeps to seeds 1-3 and the rendered page opens with the claims
    assert render(ledger, claims=claims).index("## Claims and their verdicts") < render(ledger, claims=claims).index("## t")
    assert "## Claims" not in render(ledger)


def _project_waiting_for_joint_seed_4(tmp_path):
    """A project under ``tmp_path`` whose one claim (joint against tied) plans seeds 1-4: tied has them all, joint
    seeds 1-3 (33, 34, 35 against 30, 31, 35, 36). Returns the ledger folder."""
    ledger = tmp_path / "docs" / "results" / "runs"
    for seed, bleu in ((1, 30.0), (2, 31.0), (3, 35.0), (4, 36.0)):
        fake_record(str(ledger), "tied", seed, bleu, HYP_A)
    for seed, bleu in ((1, 33.0), (2, 34.0), (3, 35.0)):
        fake_record(str(ledger), "joint", seed, bleu, HYP_B, baseline="tied")
    _claims(tmp_path / "docs" / "results" / "claims.json", further_seeds=[1, 2, 3, 4])
    return ledger


def test_the_readme_counts_the_further_seeds_once_both_rows_have_them(tmp_path):
    """The README's evidence table gives a claim's verdict over the protocol's seeds until both rows have every
    planned seed, then over all of them, and names the seeds it counts in either case."""
    ledger = _project_waiting_for_joint_seed_4(tmp_path)
    readme = "<!-- generated: readme-evidence -->\n<!-- end generated -->"

    def joint_line():
        text = render_text(readme, Context(str(tmp_path)))
        return next(line for line in text.splitlines() if line.startswith("| `joint` |"))

    assert joint_line().endswith("| 1-3 (1-4 planned) | [joint-output](docs/joint-output.md) |")
    fake_record(str(ledger), "joint", 4, 37.0, HYP_B, baseline="tied")
    assert joint_line().startswith("| `joint` | ≥ +0.50 | inconclusive; the mean Δ is 15.88 above the target, and "
                                   "about 60 seeds a row would show that four times in five | ")
    assert joint_line().endswith("| 1-4 | [joint-output](docs/joint-output.md) |")
    # a method page shows its own claims' further-seeds line; a page with none planned is refused
    page = render_text("<!-- generated: further-seeds joint-output.md -->\n<!-- end generated -->",
                       Context(str(tmp_path)))
    assert page.splitlines()[3].startswith("| joint beats tied | 1-4 | joint: 1-4; tied: 1-4 |")
    with pytest.raises(OutlayersConfigError, match="no claim of page results.md plans further seeds"):
        render_text("<!-- generated: further-seeds results.md -->\n<!-- end generated -->", Context(str(tmp_path)))


def test_a_target_the_row_file_contradicts_is_refused(tmp_path):
    ledger = str(tmp_path / "runs")
    for seed in (1, 2):
        fake_record(ledger, "tied", seed, 30.0 + seed, HYP_A)
        rec = fake_record(ledger, "joint", seed, 33.0 + seed, HYP_B, baseline="tied")
    path = os.path.join(ledger, "joint.seed1.json")
    record = json.load(open(path))
    record["description"] = "joint (Pappas et al. 2018; target: tied + 1.0 BLEU)"
    with open(path, "w") as f:
        json.dump(record, f)
    assert rec["row"] == "joint"
    with pytest.raises(OutlayersConfigError, match=r"claims.json: claim 'joint': target \+0.5 but the row file "
                                                   r"of 'joint' names \+1"):
        claims_section(ledger, _claims(tmp_path / "claims.json"), [1, 2], "test2016", {})
    assert "| joint beats tied |" in "\n".join(claims_section(ledger, _claims(tmp_path / "claims.json", target=1.0),
                                                              [1, 2], "test2016", {}))
    # no target in the claims file: the row file's is the target
    claim = json.loads(_claims(tmp_path / "claims.json") and (tmp_path / "claims.json").read_text())
    del claim["claims"][0]["target"]
    (tmp_path / "claims.json").write_text(json.dumps(claim))
    assert "| joint vs tied | Δ ≥ +1.0 BLEU |" in "\n".join(claims_section(ledger, str(tmp_path / "claims.json"),
                                                                        [1, 2], "test2016", {}))
    # neither names one
    record["description"] = "joint"
    with open(path, "w") as f:
        json.dump(record, f)
    with pytest.raises(OutlayersConfigError, match=r"claim 'joint': no target: give \"target\" here, or name one "
                                                   r"in the row file of 'joint'"):
        claims_section(ledger, str(tmp_path / "claims.json"), [1, 2], "test2016", {})


@pytest.mark.parametrize("change,message", [
    ({"target": "half"}, "claim 'joint': \"target\" must be"),
    ({"row": ""}, "claim 'joint': \"row\""),
    ({"saving": {"parameters": "weights", "at_least": 10}}, "\"saving\" needs"),
    ({"further_seeds": [0]}, "\"further_seeds\""),
    ({"kind": "rumour"}, "\"kind\" must be one of"),
])
def test_a_bad_claims_file_is_one_line_naming_the_claim(tmp_path, change, message):
    with pytest.raises(OutlayersConfigError) as e:
        read_claims(_claims(tmp_path / "claims.json", **change))
    assert message in str(e.value) and "\n" not in str(e.value) and str(tmp_path) in str(e.value)


def test_the_committed_claims_follow_the_rule():
    """The committed claims file names rows the ledger has, and takes the targets of the row files that name one;
    the sampled joint layer's verdict is what the rule gives its interval and seeds (not a verdict written by
    hand)."""
    claims = read_claims(os.path.join(REPO, "docs", "results", "claims.json"))
    assert {c["name"] for c in claims if "target" not in c and "at_least" not in c} == {"fixed", "shared-private",
                                                                                          "joint"}
    assert {c["name"] for c in claims} >= {"fixed", "shared-private", "joint", "joint-sampling", "continuous"}
    with open(os.path.join(REPO, "docs", "results", "ledger.md"), encoding="utf-8") as f:
        page = f.read()
    line = next(x for x in page.splitlines() if x.startswith("| the joint layer keeps its gain with 25 %"))
    assert line.endswith("| **inconclusive** |")


def test_the_seed_scores_block_sets_two_rows_side_by_side_seed_by_seed(tmp_path):
    """``seed-scores ROW BASELINE``: each seed's score of both rows and their difference, a dash where one row lacks
    the seed, the means and sample deviations, and the claim's verdict once both rows have every planned seed."""
    ledger = _project_waiting_for_joint_seed_4(tmp_path)
    block = "<!-- generated: seed-scores joint tied -->\n<!-- end generated -->"

    def lines():
        return render_text(block, Context(str(tmp_path))).splitlines()[1:-1]

    out = lines()
    assert out[0] == ("test2016 sacreBLEU of every recorded seed (`python -m fairseq_outlayers.lab.ledger compare "
                      "joint tied --all-seeds`).")
    # tied: mean 33, sample variance (9 + 4 + 4 + 9) / 3 = 26/3, sd 2.944
    assert out[2:10] == ["| seed | `joint` | `tied` | Δ |", "|---|---|---|---|", "| 1 | 33.00 | 30.00 | +3.00 |",
                         "| 2 | 34.00 | 31.00 | +3.00 |", "| 3 | 35.00 | 35.00 | +0.00 |", "| 4 | — | 36.00 | — |",
                         "| mean ± sd | 34.00 ± 1.00 | 33.00 ± 2.94 | |", ""]
    # the paired bootstrap works on the test sentences (here the fake records' few hypotheses, not their scores)
    assert re.fullmatch(r"- Δ [+−][0-9.]+ over seeds 1-3: 95 % paired-bootstrap interval \[[+−][0-9.]+, [+−][0-9.]+\], "
                        r"p = [01]\.[0-9]{3}\.", out[10])
    assert out[-1] == "- The claim's verdict waits for seeds 1-4 of both rows (joint 4)."
    fake_record(str(ledger), "joint", 4, 37.0, HYP_B, baseline="tied")
    out = lines()
    assert out[7] == "| 4 | 37.00 | 36.00 | +1.00 |" and out[11] == (
        "- Welch's t-test over the seeds, against no difference: p = "
        f"{welch_t_test([33.0, 34.0, 35.0, 37.0], [30.0, 31.0, 35.0, 36.0])['p']:.3f}.")
    assert out[-2:] == ["- The claim's verdict over seeds 1-4, by the rule: **inconclusive**.",
                        "- 4 seeds a row do not settle it: the means differ by +1.75, 1.25 above the target +0.50 "
                        "(seed sd 2.41, Welch's p = 0.497); about 60 seeds a row would find that gap four times in "
                        "five."]
    # rows of two tables, or one block naming a single row, are refused
    with pytest.raises(OutlayersConfigError, match="seed-scores block names two rows"):
        render_text("<!-- generated: seed-scores joint -->\n<!-- end generated -->", Context(str(tmp_path)))
    with pytest.raises(OutlayersConfigError, match="no record of row 'fixed'"):
        render_text("<!-- generated: seed-scores fixed tied -->\n<!-- end generated -->", Context(str(tmp_path)))
