"""The documents' blocks rendered from the results ledger (``docs/results/runs``) and its claims
(``docs/results/claims.json``): ``claims``, ``rule``, ``further-seeds``, ``readme-evidence``, ``rows`` and
``seed-scores`` (``python -m fairseq_outlayers.lab.docs`` describes each). Each takes the ``docs.Context`` the
figures are read from and the block's words, and gives the block's lines.
"""
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
             "rows have them ([docs/results.md](docs/results.md#further-seeds)).", ""]
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
        scores = seed_scores(rows, row, TEST)
        def seeds(name):
            return f" (seeds {_ranges(sorted(rows[name]))})" if set(rows[name]) != set(_seeds()) else ""

        cells = [f"`{row}`", mean_pm_sd(scores) + seeds(row), f"`{other}`" if other else "—"]
        if other:
            if other not in rows:
                raise OutlayersConfigError(f"rows block: '{other}' is not a row of table '{table}'")
            cells.append(mean_pm_sd(seed_scores(rows, other, TEST)) + seeds(other))
            c = compare(ctx.path(LEDGER), rows, row, other, TEST, ctx.cache)
            if "why" in c:
                cells += [f"not compared ({c['why']})", "—", "—"]
            else:
                low, high = c["interval"]
                # the paired test is over the seeds both rows have; where a mean above counts others, say which
                over = (f" over seeds {_ranges(c['seeds'])}"
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
