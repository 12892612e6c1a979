"""The documents' blocks rendered from the results ledger (``docs/results/runs``) and its claims
(``docs/results/claims.json``): ``claims``, ``rule``, ``further-seeds``, ``readme-evidence``, ``rows``,
``seed-scores`` and ``decodes`` (``python -m fairseq_outlayers.lab.docs`` describes each). Each takes the
``docs.Context`` the figures are read from and the block's words, and gives the block's lines.
"""
import glob
import os
from typing import List

from fairseq_outlayers.errors import OutlayersConfigError

LEDGER = "docs/results/runs"
CLAIMS = "docs/results/claims.json"
TEST = "test2016"


def _seeds():
    from fairseq_outlayers.lab.ledger.analysis import DEFAULT_SEEDS

    return list(DEFAULT_SEEDS)


def _claims_block(ctx, args: List[str]) -> List[str]:
    from fairseq_outlayers.lab.ledger.render import _ranges, claims_table

    claims = [c for c in ctx.claims if not args or c["page"] in args]
    if not claims:
        raise OutlayersConfigError(f"{CLAIMS}: no claim names page {' '.join(args)}")
    lines = claims_table(ctx.path(LEDGER), claims, _seeds(), TEST, ctx.cache, CLAIMS)
    return [f"Seeds {_ranges(_seeds())} of each row (the protocol's); the rule: [results](results.md#the-rule)."
            if args else f"Seeds {_ranges(_seeds())} of each row (the protocol's).", ""] + lines


def _further_block(ctx, args: List[str]) -> List[str]:
    from fairseq_outlayers.lab.ledger.render import further_verdicts

    claims = [c for c in ctx.claims if not args or c["page"] in args]
    lines = further_verdicts(ctx.path(LEDGER), claims, TEST, ctx.cache, CLAIMS)
    if not lines and args:
        raise OutlayersConfigError(f"{CLAIMS}: no claim of page {' '.join(args)} plans further seeds")
    return lines or ["No claim plans further seeds."]


def _rule_block(ctx, args: List[str]) -> List[str]:
    from fairseq_outlayers.lab.ledger.render import VERDICT_RULE

    return [VERDICT_RULE]


def _readme_block(ctx, args: List[str]) -> List[str]:
    from fairseq_outlayers.lab.ledger.claims import _ranges
    from fairseq_outlayers.lab.ledger.evidence import evidence_table

    lines = [f"Seeds {_ranges(_seeds())} of each row (the protocol's), or all the seeds planned for a claim once both "
             "rows have them ([docs/results.md](docs/results.md#further-seeds)).",
             "A claim whose row lacks a protocol seed shows the seeds recorded so far, and no verdict.", ""]
    return lines + evidence_table(ctx.path(LEDGER), ctx.tables, ctx.claims, _seeds(), TEST, ctx.cache, CLAIMS,
                                  link=lambda page: f"docs/{page}")


def _sign(value: float) -> str:
    return f"{value:+.2f}".replace("-", "−")


def _row_table(ctx, row: str):
    for name, rows in ctx.tables.items():
        if row in rows:
            return name, rows
    raise OutlayersConfigError(f"no record of row '{row}' in {LEDGER}; name a row the ledger has")


def _rows_block(ctx, args: List[str]) -> List[str]:
    from fairseq_outlayers.lab.ledger.analysis import compare, keep_seeds, seed_scores
    from fairseq_outlayers.lab.ledger.render import _ranges, mean_pm_sd
    from fairseq_outlayers.lab.ledger.stats import p_text

    if not args:
        raise OutlayersConfigError("a rows block names at least one row")
    lines = [f"{TEST} sacreBLEU, seeds {_ranges(_seeds())} (the protocol's); Δ with its 95 % paired-bootstrap "
             "interval, over the seeds both rows have; p (seeds): Welch's test over every recorded seed.", "",
             "| row | mean ± sd | against | its mean ± sd | Δ BLEU [95 % interval] | p (paired) | p (seeds) |",
             "|---|---|---|---|---|---|---|"]
    for arg in args:
        row, _, other = arg.partition(":")
        table, rows = _row_table(ctx, row)
        rows = keep_seeds(rows, _seeds())
        other = other or next(iter(rows[row].values())).get("baseline") or ""
        def mean(name):  # "37.46 (seed 1)", "32.76 ± 1.50 (seeds 1-2)" or, over the protocol's seeds, no seeds
            text = mean_pm_sd(seed_scores(rows, name, TEST))
            if set(rows[name]) == set(_seeds()):
                return text
            if len(rows[name]) == 1:
                return text.replace(" (1 seed)", "") + f" (seed {next(iter(rows[name]))})"
            return text + f" (seeds {_ranges(sorted(rows[name]))})"

        cells = [f"`{row}`", mean(row), f"`{other}`" if other else "—"]
        if other:
            if other not in rows:
                raise OutlayersConfigError(f"rows block: '{other}' is not a row of table '{table}'")
            cells.append(mean(other))
            c = compare(ctx.path(LEDGER), rows, row, other, TEST, ctx.cache)
            if "why" in c:
                cells += [f"not compared ({c['why']})", "—", "—"]
            else:
                low, high = c["interval"]
                # the paired test is over the seeds both rows have; where a mean above counts others, say which
                over = (f" over seed{'s' if len(c['seeds']) > 1 else ''} {_ranges(c['seeds'])}"
                        if set(c["seeds"]) != set(rows[row]) | set(rows[other]) else "")
                cells += [f"{_sign(c['diff'])} [{_sign(low)}, {_sign(high)}]{over}", p_text(c['p']),
                          "—" if c["welch"] is None else f"{c['welch']['p']:.3f}"]
        else:
            cells += ["—", "—", "—", "—"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _seed_scores_block(ctx, args: List[str]) -> List[str]:
    """``seed-scores ROW BASELINE``: every recorded seed of two rows side by side, their difference over the seeds
    both have (paired bootstrap and Welch), and, where a claim sets ROW against BASELINE, its verdict over every
    seed both rows have."""
    from fairseq_outlayers.lab.ledger.analysis import compare, seed_scores
    from fairseq_outlayers.lab.ledger.render import _ranges, further_result, mean_pm_sd
    from fairseq_outlayers.lab.ledger.stats import p_is

    if len(args) != 2:
        raise OutlayersConfigError("a seed-scores block names two rows: ROW BASELINE")
    row, other = args
    table, rows = _row_table(ctx, row)
    if other not in rows:
        raise OutlayersConfigError(f"seed-scores block: '{other}' is not a row of table '{table}'")

    def score(name, seed):
        r = rows[name].get(seed)
        return r["test"][TEST]["sacrebleu"] if r and TEST in r["test"] else None

    lines = [f"{TEST} sacreBLEU of every recorded seed (`python -m fairseq_outlayers.lab.ledger compare {row} "
             f"{other} --all-seeds`).", "", f"| seed | `{row}` | `{other}` | Δ |", "|---|---|---|---|"]
    for seed in sorted(set(rows[row]) | set(rows[other])):
        a, b = score(row, seed), score(other, seed)
        cells = ["—" if v is None else f"{v:.2f}" for v in (a, b)]
        lines.append(f"| {seed} | {cells[0]} | {cells[1]} | {'—' if None in (a, b) else _sign(a - b)} |")
    lines.append(f"| mean ± sd | {mean_pm_sd(seed_scores(rows, row, TEST))} | "
                 f"{mean_pm_sd(seed_scores(rows, other, TEST))} | |")
    c = compare(ctx.path(LEDGER), rows, row, other, TEST, ctx.cache)
    lines.append("")
    if "why" in c:
        return lines + [f"Not compared: {c['why']}."]
    low, high = c["interval"]
    lines.append(f"- Δ {_sign(c['diff'])} over seeds {_ranges(c['seeds'])}: 95 % paired-bootstrap interval "
                 f"[{_sign(low)}, {_sign(high)}], {p_is(c['p'])}.")
    if c["welch"] is not None:
        lines.append(f"- Welch's t-test over the seeds, against no difference: p = {c['welch']['p']:.3f}.")
    for claim in ctx.claims:
        if (claim.get("row"), claim.get("baseline")) != (row, other) or not claim.get("further_seeds"):
            continue
        r = further_result(ctx.path(LEDGER), ctx.tables, claim, TEST, ctx.cache, CLAIMS)
        planned = _ranges(sorted(claim["further_seeds"]))
        if r["missing"]:
            lines.append(f"- The claim's verdict waits for seeds {planned} of both rows ({'; '.join(r['missing'])}).")
        else:
            lines.append(f"- The claim's verdict over seeds {planned}, by the rule: **{r['verdict']}**.")
            if r["need"]:
                lines.append(f"- {r['need'][0].upper()}{r['need'][1:]}.")
    return lines


def _row_file_exists(ctx, row: str) -> bool:
    from fairseq_outlayers.lab.ledger.rows import read_row

    files = glob.glob(ctx.path(os.path.join("configs", "ledger", "*", "*.args")))
    return any(read_row(p)[0] == row for p in files)


def _decodes_block(ctx, args: List[str]) -> List[str]:
    """``decodes ROW ...``: every recorded seed of rows tested at a beam with the score scale chosen on validation
    (``# scales:``): the greedy validation figure training stopped on, the validation score of each scale, the scale
    chosen, the test score at that beam and greedy, the epochs and fairseq's training time (the teacher's too), then
    the range of test at the beam minus greedy over those seeds. A row with a row file but no record yet is one line
    saying so; a name with neither is refused."""
    if not args:
        raise OutlayersConfigError("a decodes block names at least one row")
    entries, scales, beams = [], [], set()
    for row in args:
        runs = next((rows[row] for rows in ctx.tables.values() if row in rows), None)
        if runs is None:
            if not _row_file_exists(ctx, row):
                raise OutlayersConfigError(f"decodes block: '{row}' has neither a record in {LEDGER} nor a row file "
                                           "under configs/ledger/")
            entries.append((row, None, None))
            continue
        for seed in sorted(runs):
            r = runs[seed]
            decoding = r.get("decoding") or {}
            if "scale_validation" not in decoding:
                raise OutlayersConfigError(f"decodes block: {row} seed {seed} chose no score scale on validation "
                                           "(its row has no '# scales:'); name rows tested that way")
            beams.add(decoding.get("beam"))
            for s in decoding["scale_validation"]:
                if s not in scales:
                    scales.append(s)
            entries.append((row, seed, r))
    beam = beams.pop() if len(beams) == 1 else None
    at = f"beam {beam}" if beam else "the row's beam"
    lines = [f"| row, seed | valid BLEU, greedy (best) | valid sacreBLEU, {at}, per scale ({' / '.join(scales)}) | "
             f"scale chosen | {TEST}, {at} | {TEST}, greedy | epochs (best) | training seconds |",
             "|---|---|---|---|---|---|---|---|"]

    def fmt(v):
        return "—" if v is None else f"{v:.2f}"

    gains = []  # test at the row's beam minus greedy, one a seed that has both
    for row, seed, r in entries:
        if r is None:
            lines.append(f"| `{row}` | not run | — | — | — | — | — | — |")
            continue
        d = r["decoding"]
        per = " / ".join(fmt(d["scale_validation"].get(s)) for s in scales)
        scale = d.get("scale")
        scale = "none" if scale is None else f"{scale:g}"
        test = r["test"].get(TEST, {}).get("sacrebleu")
        greedy = ((r.get("decodes") or {}).get(TEST) or {}).get("1")
        teacher = r.get("teacher") or {}
        # fairseq's training time summed over a run's resumptions; the teacher's wall time where it was trained
        secs = (f"{r['training_seconds']:,.0f}" + (", resumed" if r.get("resumed") else "")
                + ("" if not teacher else f"; teacher {teacher['seconds']:,.0f}" if teacher.get("seconds", 0) >= 1
                   else "; teacher reused"))
        lines.append(f"| `{row}`, {seed} | {fmt(r['validation']['best'])} | {per} | {scale} | {fmt(test)} | "
                     f"{fmt(greedy)} | {r['epochs']} ({r['best_epoch']}) | {secs} |")
        if test is not None and greedy is not None:
            gains.append(round(test, 2) - round(greedy, 2))
    if gains:
        lines += ["", f"On {TEST}, {at} minus greedy: {_sign(min(gains))} to {_sign(max(gains))} BLEU over "
                      + (f"these {len(gains)} seeds." if len(gains) > 1 else "this seed.")]
    return lines
