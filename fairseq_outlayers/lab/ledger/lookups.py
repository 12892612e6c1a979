"""The ledger's answers outside its page, one line each: ``compare_line`` sets any two rows of a table against each
other (``python -m fairseq_outlayers.lab.ledger compare``), ``converged_figures`` gives each method's mean over the
protocol's seeds. Both keep to the protocol's seeds unless told otherwise, as the page does (``render``).
"""
import math
from typing import Dict, List, Optional, Sequence

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.lab.ledger import records as rec
from fairseq_outlayers.lab.ledger.analysis import DEFAULT_SEEDS, compare, group, keep_seeds, mean_pm_sd, seed_scores
from fairseq_outlayers.lab.ledger.stats import N_SAMPLES, SEED, mean_sd, p_is, seeds_for_power


def _power(system: Sequence[float], baseline: Sequence[float]) -> str:
    """'; N seeds a row would find ...': how many seeds a row the seed-level test would need to find the difference
    of the two rows' seed means four times in five (two-sided, 5 % level; ``seeds_for_power``) at their pooled
    seed standard deviation."""
    (m1, s1), (m2, s2) = mean_sd(system), mean_sd(baseline)
    spread = math.sqrt((s1 * s1 + s2 * s2) / 2.0)
    if m1 == m2 or spread == 0.0:
        return ""
    n = seeds_for_power(m1 - m2, spread)
    need = "more than 10000" if n is None else str(n)
    return (f"; {need} seeds a row would find a true difference of {abs(m1 - m2):.2f} four times in five at this "
            f"seed spread ({spread:.2f})")



def compare_line(ledger: str, name: str, other: str, test: str = "test2016",
                 seeds: Optional[Sequence[int]] = DEFAULT_SEEDS) -> str:
    """One line: row ``name`` against row ``other`` (any two rows of one table, not only a row and its baseline),
    the per-seed scores, means, Δ and the paired bootstrap p-value, over the records of ``seeds`` (None: every
    recorded seed); ``ledger compare`` prints it."""
    grouped = {t: keep_seeds(rows, seeds) for t, rows in group(rec.read_records(ledger)).items()}
    tables = [(t, rows) for t, rows in grouped.items() if name in rows and other in rows]
    if not tables:
        known = sorted({row for rows in grouped.values() for row in rows})
        raise OutlayersConfigError(f"no table of '{ledger}' has records of both '{name}' and '{other}'; rows "
                                   f"with records: {', '.join(known) or 'none'}")
    table_name, rows = tables[0]

    def side(row):
        runs = {s: r["test"][test]["sacrebleu"] for s, r in sorted(rows[row].items()) if test in r["test"]}
        if not runs:
            return f"{row} (no {test} score)"
        if len(runs) == 1:
            (seed, value), = runs.items()
            return f"{row} {value:.2f} (seed {seed})"
        return (f"{row} {' / '.join(f'{v:.2f}' for v in runs.values())} (seeds {', '.join(map(str, runs))}: "
                f"{mean_pm_sd(list(runs.values()))})")

    c = compare(ledger, rows, name, other, test)
    if "why" in c:
        return f"{table_name}, {test}: {side(name)} vs {side(other)}: not compared ({c['why']})"
    files = (f"; the rows were trained with different files, so the difference mixes them with the methods: "
             f"{'; '.join(c['files'])}" if c["files"] else "")
    if c.get("identical"):
        same = "the same row" if name == other else "identical translations"
        return (f"{table_name}, {test}: {side(name)} vs {side(other)}: identical ({same}: every test sentence "
                f"translated the same over seeds {', '.join(map(str, c['seeds']))}): Δ 0.00, p = 1 (no difference "
                "to test)" + files)
    low, high = c["interval"]
    welch = ("" if c["welch"] is None else
             f"; over seeds p = {c['welch']['p']:.3f} (Welch t = {c['welch']['t']:+.2f}, df {c['welch']['df']:.1f})"
             + _power(seed_scores(rows, name, test), seed_scores(rows, other, test)))
    return (f"{table_name}, {test}: {side(name)} vs {side(other)}: Δ {c['diff']:+.2f} over seeds "
            f"{', '.join(map(str, c['seeds']))}, 95 % interval [{low:+.2f}, {high:+.2f}], {p_is(c['p'])} "
            f"(paired bootstrap, {N_SAMPLES} resamples, seed {SEED}){welch}"
            + files)


def converged_figures(ledger: str, test: str = "test2016") -> Dict[str, List[str]]:
    """{method: ["33.10 ± 0.40 (3 seeds, TABLE)", ...]}: the ledger's figure for each method over the protocol's
    seeds. (``make demo``'s table takes its converged figures from ``lab.compare.ledger_figures``.)"""
    out: Dict[str, List[str]] = {}
    for table_name, rows in group(rec.read_records(ledger)).items():
        rows = keep_seeds(rows, DEFAULT_SEEDS)
        for name, runs in rows.items():
            values = [r["test"][test]["sacrebleu"] for r in runs.values() if test in r["test"]]
            if values:
                method = next(iter(runs.values())).get("method") or name
                mean, sd = mean_sd(values)
                spread = "" if sd is None else f" ± {sd:.2f}"
                n = len(values)
                out.setdefault(method, []).append(
                    f"{mean:.2f}{spread} ({n} seed{'s' if n > 1 else ''}, {table_name}/{name})")
    return out
