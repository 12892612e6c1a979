"""The README's evidence table: one line a claim, with its target, verdict (``claims.claim_result``, by the rule of
``stats.target_verdict``), the difference with both intervals (test sentences resampled for the trained models;
training seeds), the beams, the parameters against the baseline and against ``also_against``, and a sentence for
each claim whose row decodes with another beam than its baseline. ``python -m fairseq_outlayers.lab.docs`` writes
it into README.md (the ``readme-evidence`` block).
"""
from typing import Dict, List, Sequence, Tuple

from fairseq_outlayers.lab.ledger.claims import _ranges, _sign, beam_note, claim_result, further_result
from fairseq_outlayers.lab.ledger.stats import p_is


def _interval(low: float, high: float) -> str:
    return f"[{_sign(low)}, {_sign(high)}]"


def evidence_row(ledger: str, tables: Dict, claim: Dict, seeds: Sequence[int], test: str, cache: Dict,
                 claims_path: str = "claims") -> Tuple[List[str], str]:
    """One line of the README's evidence table (``evidence_table``) as its cells, and the seeds it is over: the
    protocol's seeds, or every seed both rows have once they have all the claim's ``further_seeds``."""
    r = claim_result(ledger, tables, claim, seeds, test, cache, claims_path)
    over = _ranges(r["seeds"] or seeds)  # the seeds compared: fewer than the protocol's while some are missing
    if claim.get("further_seeds"):
        further = further_result(ledger, tables, claim, test, cache, claims_path)
        if further["missing"]:
            over += f" ({_ranges(sorted(claim['further_seeds']))} planned)"
        else:
            r, over = dict(further), _ranges(further["seeds"])
            if further["need"]:
                gap = r["diff"] - r["target"]
                n = further["need_seeds"]
                r["verdict"] += (f"; the mean Δ is {abs(gap):.2f} {'above' if gap > 0 else 'below'} the target, and "
                                 f"{'about ' + str(n) if n else 'more than 10000'} seeds a row would show that "
                                 "four times in five")
    if "at_least" in claim:
        return [claim["label"], f"a mean ≥ {claim['at_least']:g}", r["verdict"], r["measured"], "—", "—", "—", "—"], over
    seeds_cell = "— (< 2 seeds a side)"
    if r.get("seed_interval") is not None:
        seeds_cell = f"{_interval(*r['seed_interval'])}, p = {r['seeds_p']:.3f}"
    beams = r.get("beams") or [None, None]
    beam = ("—" if beams[0] is None else str(beams[0])) if beams[0] == beams[1] else f"{beams[0]} vs {beams[1]}"
    parameters = r["saving"].split(" (target")[0] or r.get("trained") or "—"
    if r.get("also"):
        parameters += f"; {r['also']}"
    if "interval" not in r:
        return [claim["label"], f"≥ {_sign(r.get('target', 0.0))}", r["verdict"], r["measured"], "—", "—", beam,
                parameters], over
    return [claim["label"], f"≥ {_sign(r['target'])}", r["verdict"], f"{_sign(r['diff'])} vs {claim['baseline']}",
            f"{_interval(*r['interval'])}, {p_is(r['p'])}", seeds_cell, beam, parameters], over


EVIDENCE_HEADER = ["| method | target: Δ BLEU | verdict | Δ BLEU | 95 % interval over test sentences | "
                   "95 % interval over seeds | beam | parameters | seeds | evidence |",
                   "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]


def evidence_table(ledger: str, tables: Dict, claims: List[Dict], seeds: Sequence[int], test: str, cache: Dict,
                   claims_path: str = "claims", link=lambda page: page) -> List[str]:
    """The README's evidence table: per claim its target, its verdict by the rule, the difference with both
    intervals (test sentences resampled for the trained models: the paired bootstrap; training seeds: Welch), the
    beam of the row (and of its baseline where it differs), its parameters against the baseline (and against
    ``also_against``), the seeds and the page."""
    lines, notes = list(EVIDENCE_HEADER), []
    for claim in claims:
        cells, over = evidence_row(ledger, tables, claim, seeds, test, cache, claims_path)
        lines.append("| " + " | ".join(cells + [over, f"[{claim['page'][:-3]}]({link(claim['page'])})"]) + " |")
        if " vs " in cells[6]:
            notes.append(beam_note(tables[claim["table"]], claim, seeds, test))
    return lines + ([""] + notes if notes else [])
