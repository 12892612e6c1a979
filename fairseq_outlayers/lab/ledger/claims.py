"""The claims the ledger judges (``docs/results/claims.json``) and their verdicts: ``read_claims`` checks the file
(every figure finite and in range), ``claim_result`` gives one claim's difference, intervals, saving and verdict by
the rule of ``stats.target_verdict``, ``claims_table`` / ``further_verdicts`` / ``claims_section`` write them.
``render`` re-exports these names; the README's evidence table is ``evidence``'s.
"""
import json
import math
import re
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_outlayers.command_line import option_value
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.lab.ledger import records as rec
from fairseq_outlayers.lab.ledger.analysis import _word_params, compare, group, keep_seeds, mean_pm_sd, seed_scores
from fairseq_outlayers.lab.ledger.stats import (mean_sd, p_is, seeds_for_power, target_verdict, welch_interval,
                                                welch_t_test)


# --- claims and their verdicts (docs/results/claims.json) -------------------------------------------------------

#: the parameter counts a claim's saving can be about: (name in the claims file, what the tables call it)
SAVINGS = {"trained": "trained parameters", "word": "word parameters", "output_trained": "trained output-layer "
           "parameters"}
#: the words of a verdict, by the kind of claim: a paper's claim is reproduced or not; the package's own holds or not
VERDICT_WORDS = {"paper": {"above": "reproduced", "below": "not reproduced"},
                 "package": {"above": "holds", "below": "does not hold"}}
_TARGET_IN_DESCRIPTION = re.compile(r"target: [\w-]+ ([+\-−]) ?([0-9]+(?:\.[0-9]+)?) BLEU")


def _in_range(value, low: float, high: float) -> bool:
    """A finite number (not a bool) from ``low`` to ``high``: what a claim's target, saving or least BLEU is."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and low <= value <= high)


def _claims_error(path: str, where: str, what: str):
    raise OutlayersConfigError(f"{path}: {where}: {what}")


def read_claims(path: str) -> List[Dict]:
    """The claims of ``path`` (JSON: {"claims": [...]}), each checked: a comparison claim names a table, a row,
    its baseline, a numeric ``target`` (the least difference in BLEU the claim asks for), optionally a
    ``saving`` {"parameters": one of SAVINGS, "at_least": percent} and ``further_seeds`` (the seeds planned for a
    verdict over more seeds); a "best" claim names a table and ``at_least`` (a mean BLEU)."""

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise OutlayersConfigError(f"{path}: cannot be read as JSON ({e}); restore it from git") from e
    claims = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(claims, list) or not claims:
        _claims_error(path, "claims", "a non-empty list of claims is needed")
    names = set()
    for i, c in enumerate(claims):
        where = f"claim {i + 1}"
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c["name"]:
            _claims_error(path, where, "every claim needs a \"name\"")
        where = f"claim '{c['name']}'"
        if c["name"] in names:
            _claims_error(path, where, "the name is used twice")
        names.add(c["name"])
        for key in ("claim", "table", "page", "label"):
            if not isinstance(c.get(key), str) or not c[key]:
                _claims_error(path, where, f"\"{key}\" (a text) is missing")
        if c.get("kind", "paper") not in VERDICT_WORDS:
            _claims_error(path, where, f"\"kind\" must be one of {', '.join(VERDICT_WORDS)}")
        if "at_least" in c:
            if not _in_range(c["at_least"], 0.0, 100.0):
                _claims_error(path, where, "\"at_least\" must be a mean BLEU, a finite number from 0 to 100, "
                              f"not {c['at_least']!r}")
            continue
        for key in ("row", "baseline"):
            if not isinstance(c.get(key), str) or not c[key]:
                _claims_error(path, where, f"\"{key}\" (a row name) is missing")
        if "target" in c and not _in_range(c["target"], -100.0, 100.0):
            _claims_error(path, where, "\"target\" must be the least BLEU difference claimed, a finite number "
                          f"from -100 to 100 (e.g. 0.5 or -0.3), not {c['target']!r}")
        saving = c.get("saving")
        if saving is not None and (not isinstance(saving, dict) or saving.get("parameters") not in SAVINGS
                                   or not _in_range(saving.get("at_least"), 0.0, 100.0)):
            _claims_error(path, where, "\"saving\" needs \"parameters\" (one of "
                          f"{', '.join(SAVINGS)}) and \"at_least\" (a percent, a finite number from 0 to 100)")
        if "also_against" in c and (not isinstance(c["also_against"], str) or not c["also_against"]):
            _claims_error(path, where, "\"also_against\" must be a row name (parameters are also compared with it)")
        further = c.get("further_seeds")
        if further is not None and (not isinstance(further, list) or not further
                                    or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in further)
                                    or len(set(further)) != len(further)):
            _claims_error(path, where, "\"further_seeds\" must be a list of distinct seed numbers (>= 1)")
    return claims


def _described_target(runs: Dict[int, Dict]) -> Optional[float]:
    """The target the row file names in its description ("target: tied + 0.5 BLEU"), or None."""
    m = _TARGET_IN_DESCRIPTION.search(next(iter(runs.values())).get("description", ""))
    return None if m is None else (-1.0 if m.group(1) in "-−" else 1.0) * float(m.group(2))


def claim_target(rows: Dict[str, Dict[int, Dict]], claim: Dict, claims_path: str = "claims") -> float:
    """The target of a comparison claim: the one its row file names in its description ("target: tied + 0.5
    BLEU", kept in the records), else the claims file's; both given and different, or neither, is an error."""
    named = _described_target(rows[claim["row"]])
    given = claim.get("target")
    where = f"claim '{claim['name']}'"
    if named is not None and given is not None and abs(named - given) > 1e-9:
        _claims_error(claims_path, where, f"target {given:+g} but the row file of '{claim['row']}' names "
                      f"{named:+g}; make them agree")
    if named is None and given is None:
        _claims_error(claims_path, where, f"no target: give \"target\" here, or name one in the row file of "
                      f"'{claim['row']}' (\"target: BASELINE + 0.5 BLEU\")")
    return named if named is not None else given


def _param_count(params: Dict, kind: str) -> int:
    return _word_params(params) if kind == "word" else params[kind]


def _sign(value: float, digits: int = 2) -> str:
    """+0.50 / −0.30 (a true minus sign, as the documents write it)."""
    return f"{value:+.{digits}f}".replace("-", "−")


def claim_result(ledger: str, tables: Dict[str, Dict[str, Dict[int, Dict]]], claim: Dict,
                 seeds: Optional[Sequence[int]], test: str, cache: Dict, claims_path: str = "claims") -> Dict:
    """One claim's figures and verdict over ``seeds`` (None: every seed both rows have): {"measured", "saving",
    "verdict", "why", "seeds"}; a row without records, or whose row file names another target than the claim,
    is an error naming the claims file."""
    rows_all = tables.get(claim["table"])
    if rows_all is None:
        _claims_error(claims_path, f"claim '{claim['name']}'", f"the ledger has no table '{claim['table']}'")
    if "at_least" in claim:
        return _best_result(rows_all, claim, seeds, test)
    words = VERDICT_WORDS[claim.get("kind", "paper")]
    for key in ("row", "baseline"):
        if claim[key] not in rows_all:
            _claims_error(claims_path, f"claim '{claim['name']}'", f"{key} '{claim[key]}' has no record in table "
                          f"'{claim['table']}'")
    target = claim_target(rows_all, claim, claims_path)
    if seeds is None:
        common = sorted(set(rows_all[claim["row"]]) & set(rows_all[claim["baseline"]]))
        rows = keep_seeds(rows_all, common)
    else:
        rows = keep_seeds(rows_all, seeds)
    c = compare(ledger, rows, claim["row"], claim["baseline"], test, cache)
    if "why" in c:
        return {"measured": f"not compared ({c['why']})", "saving": "", "verdict": "inconclusive",
                "why": c["why"], "seeds": []}
    system, base = seed_scores(rows, claim["row"], test), seed_scores(rows, claim["baseline"], test)
    side, why = target_verdict(c["interval"], system, base, target)
    missing = "" if seeds is None or set(seeds) <= set(c["seeds"]) else \
        f"seed{'s' if len(c['seeds']) > 1 else ''} {_ranges(c['seeds'])} of {_ranges(seeds)} recorded"
    if missing:  # no verdict before every seed of the protocol: the seeds so far are shown, not judged
        side, why, missing = "inconclusive", f"only {missing}", "; " + missing
    low, high = c["interval"]
    welch = "—" if c["welch"] is None else f"{c['welch']['p']:.3f}"
    measured = f"{_sign(c['diff'])} [{_sign(low)}, {_sign(high)}], {p_is(c['p'])}; seeds p = {welch}"
    verdict = words.get(side, "inconclusive")
    saving = ""
    if claim.get("saving"):
        kind, least = claim["saving"]["parameters"], claim["saving"]["at_least"]
        count = _param_count(rows[claim["row"]][min(rows[claim["row"]])]["params"], kind)
        base_count = _param_count(rows[claim["baseline"]][min(rows[claim["baseline"]])]["params"], kind)
        cut = 100.0 * (base_count - count) / base_count
        met = cut >= least
        saving = f"{_sign(-cut, 1)} % {SAVINGS[kind]} (target ≥ {least:g} % fewer: {'met' if met else 'not met'})"
        verdict += f" (saving {words['above'] if met else words['below']})"
    verdict += missing
    trained = [rows[r][min(rows[r])]["params"]["trained"] for r in (claim["row"], claim["baseline"])]
    beams = [(rows[r][min(rows[r])].get("decoding") or {}).get("beam") for r in (claim["row"], claim["baseline"])]
    return {"measured": measured, "saving": saving, "verdict": verdict, "why": why, "seeds": c["seeds"],
            "diff": c["diff"], "interval": c["interval"], "target": target, "p": c["p"],
            "seed_interval": welch_interval(system, base), "seeds_p": None if c["welch"] is None else c["welch"]["p"],
            "beams": beams, "also": _also_against(rows, claim, test),
            "trained": f"{_sign(100.0 * (trained[0] - trained[1]) / trained[1], 1)} % trained parameters"}


def _also_against(rows: Dict[str, Dict[int, Dict]], claim: Dict, test: str) -> str:
    """The claim's parameters and mean score against its ``also_against`` row (the comparison that matters beside
    the paper's baseline, e.g. tying), over the seeds of ``rows``: "−36.3 % word parameters vs tiny-tied (Δ −0.85
    BLEU)", or ""."""
    other = claim.get("also_against")
    if not other:
        return ""
    if other not in rows:
        raise OutlayersConfigError(f"claim '{claim['name']}': also_against '{other}' has no record in table "
                                   f"'{claim['table']}' over the seeds compared")
    kind = (claim.get("saving") or {}).get("parameters", "trained")
    count = _param_count(rows[claim["row"]][min(rows[claim["row"]])]["params"], kind)
    base = _param_count(rows[other][min(rows[other])]["params"], kind)
    diff = mean_sd(seed_scores(rows, claim["row"], test))[0] - mean_sd(seed_scores(rows, other, test))[0]
    return f"{_sign(100.0 * (count - base) / base, 1)} % {SAVINGS[kind]} vs {other} (Δ {_sign(diff)} BLEU)"


def _best_result(rows: Dict[str, Dict[int, Dict]], claim: Dict, seeds: Optional[Sequence[int]], test: str) -> Dict:
    """A "best" claim: the highest mean over ``seeds`` among the table's rows that have every one of them."""
    kept = keep_seeds(rows, seeds)
    full = {row: seed_scores(kept, row, test) for row, runs in kept.items()
            if seeds is None or set(runs) >= set(seeds)}
    means = sorted(((mean_sd(v)[0], row) for row, v in full.items() if v), reverse=True)
    if not means:
        return {"measured": "no row has every seed", "saving": "", "verdict": "inconclusive", "why": "", "seeds": []}
    best, row = means[0]
    above = [r for m, r in means if m >= claim["at_least"]]

    def arch(name):
        options = next(iter(rows[name].values()))["options"]
        return option_value(options, "--arch", "?")

    # rows whose means are equal (to rounding) share the place: every one is named, in name order
    tied = {}
    for mean, name in means:
        tied.setdefault((arch(name), round(mean, 6)), []).append(name)
    top = {}
    for (a, _), names in tied.items():
        top.setdefault(a, sorted(names))

    def best_of(names):
        if len(names) == 1:
            return f"{names[0]}, {mean_pm_sd(full[names[0]])}"
        return f"{' and '.join(names)}, a tie: {' and '.join(mean_pm_sd(full[n]) for n in names)}"

    first = top.pop(arch(row))
    second = "; ".join(f"best `{a}` row: {best_of(names)}" for a, names in top.items())
    lead = (f"{row} (`{arch(row)}`): {mean_pm_sd(full[row])}" if len(first) == 1
            else f"`{arch(row)}`: {best_of(first)}")
    measured = f"{lead}; {second + '; ' if second else ''}{len(above)} of {len(means)} rows at or above " \
               f"{claim['at_least']:g}"
    met = best >= claim["at_least"]
    return {"measured": measured, "saving": "", "verdict": "met" if met else "not met",
            "why": f"the best mean is {best:.2f}", "seeds": list(seeds or [])}


def claims_table(ledger: str, claims: List[Dict], seeds: Sequence[int], test: str, cache: Dict,
                 claims_path: str = "claims") -> List[str]:
    """The claims table: each claim's rows, target, measured difference over ``seeds`` and the verdict the rule
    gives (``stats.target_verdict``)."""
    tables = group(rec.read_records(ledger))
    lines = ["| claim (source) | row vs baseline | target | Δ BLEU [95 % interval], p; seeds p (Welch, against 0) | "
             "parameters | verdict |", "|---|---|---|---|---|---|"]
    for claim in claims:
        r = claim_result(ledger, tables, claim, seeds, test, cache, claims_path)
        if "at_least" in claim:
            rows, target = f"every row of {claim['table']}", f"a mean ≥ {claim['at_least']:g} BLEU"
        else:
            rows = f"{claim['row']} vs {claim['baseline']}"
            target = f"Δ ≥ {_sign(r['target'], 1)} BLEU"
        lines.append(f"| {claim['claim']} | {rows} | {target} | {r['measured']} | {r['saving'] or '—'} | "
                     f"**{r['verdict']}** |")
    notes = beam_notes(tables, claims, seeds, test)
    return lines + ([""] + notes if notes else [])


def beam_notes(tables: Dict[str, Dict[str, Dict[int, Dict]]], claims: List[Dict], seeds: Sequence[int],
               test: str) -> List[str]:
    """``beam_note``'s sentence for each comparison claim whose row decodes with another beam than its baseline
    (their first records over ``seeds``, as ``claim_result`` reads them)."""
    notes = []
    for claim in claims:
        if "at_least" in claim:
            continue
        rows = keep_seeds(tables.get(claim["table"], {}), seeds)
        if not rows.get(claim["row"]) or not rows.get(claim["baseline"]):
            continue
        beams = [(rows[r][min(rows[r])].get("decoding") or {}).get("beam") for r in (claim["row"], claim["baseline"])]
        if beams[0] != beams[1]:
            notes.append(beam_note(tables[claim["table"]], claim, seeds, test))
    return notes


def beam_note(rows: Dict[str, Dict[int, Dict]], claim: Dict, seeds: Sequence[int], test: str) -> str:
    """A sentence for a claim whose row decodes with another beam than its baseline: the row's score at the
    baseline's beam where its records hold one (``decodes``), else that none does."""
    kept = keep_seeds(rows, seeds)
    row, base = kept[claim["row"]], kept[claim["baseline"]]
    beam, other = (next(iter(runs.values())).get("decoding", {}).get("beam") for runs in (row, base))
    at_other = [((r.get("decodes") or {}).get(test) or {}).get(str(other)) for r in row.values()]
    text = f"- {claim['label']} decodes with beam {beam}, its baseline {claim['baseline']} with beam {other}"
    if at_other and all(v is not None for v in at_other):
        return text + f"; at beam {other} the row's mean is {sum(at_other) / len(at_other):.2f}."
    return text + f"; no committed record decodes the row at beam {other}, so Δ mixes the method with the beam."


def further_result(ledger: str, tables: Dict[str, Dict[str, Dict[int, Dict]]], claim: Dict, test: str,
                   cache: Dict, claims_path: str = "claims") -> Dict:
    """A claim with ``further_seeds`` planned, over every seed both rows have: ``claim_result``'s dict plus
    "missing" (the planned seeds each row still lacks, as "ROW 4-9" strings; empty when the verdict may be read),
    "recorded" (each row's seeds) and, for an inconclusive verdict over every planned seed, "need" (what more
    seeds would do, ``_unsettled``, and "need_seeds", its number of seeds a row)."""
    rows = tables.get(claim["table"], {})
    want = set(claim["further_seeds"])
    have = {k: sorted(rows.get(claim[k], {})) for k in ("row", "baseline")}
    r = dict(claim_result(ledger, tables, claim, None, test, cache, claims_path))
    r["missing"] = [f"{claim[k]} {_ranges(sorted(want - set(h)))}" for k, h in have.items() if want - set(h)]
    r["recorded"] = "; ".join(f"{claim[k]}: {_ranges(h) or 'none'}" for k, h in have.items())
    r["need"], r["need_seeds"] = "", None
    if not r["missing"] and r["verdict"].startswith("inconclusive") and "diff" in r:
        common = keep_seeds(rows, r["seeds"])
        r["need"], r["need_seeds"] = _unsettled(seed_scores(common, claim["row"], test),
                                                seed_scores(common, claim["baseline"], test), r["target"])
    return r


def _unsettled(system: Sequence[float], baseline: Sequence[float], target: float) -> Tuple[str, Optional[int]]:
    """Why a verdict over every planned seed is still open, in seeds: how many seeds a row the seed-level test would
    need to find the measured distance of the two rows' means from the target four times in five, at their pooled
    seed spread (``seeds_for_power``); the sentence and that number (None: more than 10000)."""
    (m1, s1), (m2, s2) = mean_sd(system), mean_sd(baseline)
    spread = math.sqrt((s1 * s1 + s2 * s2) / 2.0)
    gap = (m1 - m2) - target
    n = seeds_for_power(gap, spread) if spread > 0.0 and gap != 0.0 else None
    need = "more than 10000" if n is None else f"about {n}"
    side = "above" if gap > 0 else "below"
    welch = welch_t_test([v - target for v in system], baseline)
    p = "" if welch is None else f", Welch's p = {welch['p']:.3f}"
    return (f"{len(system)} seeds a row do not settle it: the means differ by {_sign(m1 - m2)}, {abs(gap):.2f} "
            f"{side} the target {_sign(target)} (seed sd {spread:.2f}{p}); {need} seeds a row would find "
            "that gap four times in five"), n


def further_verdicts(ledger: str, claims: List[Dict], test: str, cache: Dict,
                     claims_path: str = "claims") -> List[str]:
    """The verdicts over every seed both rows have, for the claims with ``further_seeds`` planned: "waiting for
    seeds" until both rows have every planned seed, and, for a verdict those seeds leave inconclusive, the seeds a
    row it would take; [] when no claim plans any."""
    planned = [c for c in claims if c.get("further_seeds")]
    if not planned:
        return []
    tables = group(rec.read_records(ledger))
    lines = ["| claim | planned seeds | recorded seeds (row; baseline) | Δ BLEU over the seeds both have | "
             "verdict |", "|---|---|---|---|---|"]
    for claim in planned:
        r = further_result(ledger, tables, claim, test, cache, claims_path)
        if r["missing"]:
            verdict = f"waiting for seeds ({'; '.join(r['missing'])})"
        else:
            verdict = f"**{r['verdict']}**" + (f": {r['need']}" if r["need"] else "")
        lines.append(f"| {claim['claim']} | {_ranges(sorted(claim['further_seeds']))} | {r['recorded']} | "
                     f"{r['measured']}, over seeds {_ranges(r['seeds'])} | {verdict} |")
    return lines


def _ranges(seeds: Sequence[int]) -> str:
    """'1-4, 7': seed numbers, runs of consecutive ones joined."""
    runs: List[List[int]] = []
    for s in sorted(seeds):
        if runs and runs[-1][1] == s - 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def claims_section(ledger: str, claims_path: str, seeds: Sequence[int], test: str, cache: Dict) -> List[str]:
    """The ledger's "Claims" section: the rule, the claims table over ``seeds`` and, for claims with further seeds
    planned, their verdict over every seed both rows have."""
    claims = read_claims(claims_path)
    md = ["## Claims and their verdicts", "",
          f"From `{claims_path}` and the records. {VERDICT_RULE}", "",
          f"Over seeds {_ranges(seeds)} (the protocol's):", ""]
    md += claims_table(ledger, claims, seeds, test, cache, claims_path) + [""]
    further = further_verdicts(ledger, claims, test, cache, claims_path)
    if further:
        md += ["Over every seed both rows have, once both have the planned seeds.", ""] + further + [""]
    return md


VERDICT_RULE = (
    "The rule (`stats.target_verdict`) judges a claim \"row − baseline ≥ target\" in test2016 sacreBLEU. "
    "It says reproduced (for a claim of this package: holds) when two things are true. "
    "First, the 95 % paired-bootstrap interval of the difference, which resamples the test sentences for the trained "
    "models, lies at or above the target (its lower end ≥ the target). "
    "Second, the seeds back it, by one of two routes. "
    "Either every seed of the row scores more than the target above every seed of the baseline. "
    "Or Welch's two-sided t-test of the row's seeds minus the target against the baseline's seeds gives p < 0.05, "
    "with the row on the upper side: a one-sided test at 0.025. "
    "It says not reproduced (does not hold) in the mirror case: the interval wholly below the target (its upper end "
    "< the target), and the seeds below the target by either route. "
    "Anything else is inconclusive, and so is a claim until both rows have every seed of the protocol. "
    "The two routes are not equally strict: at three seeds a row the seed pairs are 9, at nine seeds 81, and "
    "Welch's test at three seeds a row finds only gaps of several seed standard deviations. "
    "A parameter saving is read off the records' counts; it is reported beside the verdict and does not change it.")
