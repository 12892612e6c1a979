"""Markdown tables from the ledger's records alone, regenerated bit for bit (no dates, no machine state).

One table per ``table`` of the records; one line per row: the test score per seed (a seed without a record reads
"missing" and is not averaged in), mean ± sample standard deviation over the recorded seeds, tokenised BLEU, the
difference from the row's baseline and the p-value of the paired bootstrap test (``analysis.compare`` on the
hypotheses and references kept in the ledger), the extra test sets, parameter counts, epochs, updates, speed and
the device; with ``figures``, the plots of ``plots`` (learning curves, score against trained parameters) as SVG
files named in the Markdown. The numbers come from ``analysis``; this module only writes them. The claims'
verdicts are ``claims``'s, the one-line answers (``compare_line``, ``converged_figures``) ``lookups``'s.

The tables, their plots and ``compare_line`` keep to the protocol's seeds (``seeds``, 1-3 by default), so a figure
quoted from them stays what it was when a row later gets more seeds; records of further seeds (run to test a
difference at the seed level) get a table of their own under each table (``further_seeds``), where every recorded
seed counts, and ``compare_line(..., seeds=None)`` counts them all too.
"""
import re
import shlex
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_outlayers.lab.ledger import plots
from fairseq_outlayers.lab.ledger import records as rec
from fairseq_outlayers.lab.ledger.analysis import (DEFAULT_SEEDS, _word_params, capped_runs, compare, group,
                                                   keep_seeds, mean_pm_sd, patience_waits, retrained_seeds,
                                                   seed_scores, step_effect, stop_losses)
from fairseq_outlayers.lab.ledger.stats import N_SAMPLES, SEED, mean_sd, p_is, p_text


def _fmt(value: Optional[float], digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _count_vs(count: int, baseline: Optional[int]) -> str:
    """``1,760,543 (-37.1 %)``: a parameter count and its relative difference from the baseline's."""
    return f"{count:,}" + (f" ({100.0 * (count - baseline) / baseline:+.1f} %)" if baseline else "")


def _seed_list(seeds: Sequence[int]) -> str:
    """'seed 2' or 'seeds 1, 2'."""
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def _welch(c: Dict) -> str:
    return "— (< 2 seeds a side)" if c["welch"] is None else f"{c['welch']['p']:.3f}"


def significance(ledger: str, rows: Dict[str, Dict[int, Dict]], name: str, test: str, cache: Dict) -> List[str]:
    """[Δ vs baseline, paired bootstrap p, seed-level Welch p] cells of one row."""
    baseline = next(iter(rows[name].values())).get("baseline")
    if not baseline:
        return ["(baseline)", "", ""]
    if baseline not in rows:
        return [f"{baseline}: no records", "—", "—"]
    c = compare(ledger, rows, name, baseline, test, cache)
    if "why" in c:
        return ["—", f"— ({c['why']})", "—"]
    note = "" if c["complete"] else f" (seeds {', '.join(map(str, c['seeds']))})"
    low, high = c["interval"]
    retrained = retrained_seeds(rows[name])
    plural = "s" if len(retrained) > 1 else ""
    mixed = f" ({_seed_list(retrained)}: retrained, not {baseline}'s recorded model{plural})" if retrained else ""
    mixed += f" (trained with other {', '.join(c['files'])})" if c["files"] else ""
    if c.get("identical"):  # the same translations: no difference to test (p = 1, not the formula's smallest p)
        return [f"{c['diff']:+.2f} [{low:+.2f}, {high:+.2f}]{mixed} (identical translations)",
                f"1.000 (identical){note}", _welch(c)]
    return [f"{c['diff']:+.2f} [{low:+.2f}, {high:+.2f}]{mixed}", f"{p_text(c['p'])}{note}", _welch(c)]


def table(ledger: str, rows: Dict[str, Dict[int, Dict]], seeds: Sequence[int], test: str, cache: Dict) -> List[str]:
    extra = sorted({t for runs in rows.values() for r in runs.values() for t in r["test"]} - {test})
    head = (["row", "baseline", f"{test} sacreBLEU per seed ({' / '.join(map(str, seeds))})", "mean ± sd",
             "tokenised BLEU", "Δ vs baseline [95 % interval]", "p (paired bootstrap)", "p (seeds: Welch t)"]
            + [f"{t} mean ± sd" for t in extra]
            + ["trained params (vs baseline)", "total params", "embedding", "output layer",
               "word params: embedding + output (vs baseline)", "epochs (best)", "updates", "train tok/s",
               "device"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, runs in rows.items():
        first = runs[min(runs)]
        done = [runs[s] for s in sorted(runs)]
        per_seed = " / ".join(_fmt(runs[s]["test"].get(test, {}).get("sacrebleu")) if s in runs else "missing"
                              for s in seeds)

        def over(key, t=test):
            return mean_pm_sd([r["test"][t][key] for r in done if t in r["test"]])

        p = first["params"]
        baseline = first.get("baseline")
        base_p = rows[baseline][min(rows[baseline])]["params"] if baseline in rows else None
        cells = [name, baseline or "", per_seed, over("sacrebleu"), over("tokenized_bleu")]
        cells += significance(ledger, rows, name, test, cache)
        cells += [over("sacrebleu", t) for t in extra]
        epochs = mean_sd([r["epochs"] for r in done])[0]
        best = mean_sd([r["best_epoch"] for r in done])[0]
        cells += [_count_vs(p["trained"], base_p and base_p["trained"]), f"{p['total']:,}",
                  f"{p['embedding']:,}", f"{p.get('output', 0):,}",
                  _count_vs(_word_params(p), base_p and _word_params(base_p)),
                  f"{_fmt(epochs, 1)} ({_fmt(best, 1)})", f"{mean_sd([r['updates'] for r in done])[0]:,.0f}",
                  _fmt(mean_sd([r["tokens_per_second"] for r in done if r.get("tokens_per_second")])[0], 0),
                  ", ".join(sorted({r["device"] for r in done}))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def further_seeds(ledger: str, rows: Dict[str, Dict[int, Dict]], seeds: Sequence[int], test: str,
                  cache: Dict) -> List[str]:
    """The table of the seeds recorded beyond ``seeds``: each row that has some, or whose baseline has some, with
    those seeds' scores, the mean over every recorded seed and its comparison with its baseline over every recorded
    seed (the paired bootstrap over the seeds both rows have, Welch over all); [] when no row has one."""
    beyond = {row: sorted(s for s in runs if s not in seeds) for row, runs in rows.items()}

    def baseline(row):
        return next(iter(rows[row].values())).get("baseline")

    shown = [row for row in rows if beyond[row] or beyond.get(baseline(row))]
    if not shown:
        return []
    head = ["row", "baseline", f"{test} sacreBLEU of the further seeds", "every recorded seed: mean ± sd",
            "Δ vs baseline [95 % interval]", "p (paired bootstrap)", "p (seeds: Welch t)"]
    lines = [f"Seeds beyond {', '.join(map(str, seeds))} (run later to test a difference at the seed level; the "
             "table above keeps to the protocol's seeds): every recorded seed counts here.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in shown:
        runs = rows[row]
        further = ", ".join(f"seed {s}: {_fmt(runs[s]['test'].get(test, {}).get('sacrebleu'))}"
                            for s in beyond[row]) or "none"
        scores = seed_scores(rows, row, test)
        mean = f"{mean_pm_sd(scores)} ({_seed_list(sorted(s for s, r in runs.items() if test in r['test']))})"
        lines.append("| " + " | ".join([row, baseline(row) or "", further, mean]
                                       + significance(ledger, rows, row, test, cache)) + " |")
    return lines + [""]


def loss_at_stop(rows: Dict[str, Dict[int, Dict]]) -> Optional[str]:
    """One sentence on how converged the runs of a table are by their validation loss (``stop_losses``): in how
    many the loss at the last epoch is below the loss at the tested epoch, by how much, and in how many the last
    epoch has the run's lowest loss, i.e. the stop on the validation score came while the loss still fell. None
    when no record has a curve with losses."""
    falls, last_lowest, counted = stop_losses(rows)
    if not counted:
        return None
    by = f" (by {min(falls):.3f} to {max(falls):.3f})" if falls else ""
    reading = ("the patience on the validation score stopped those runs while the loss was still falling"
               if last_lowest else "no run was stopped at its lowest loss")
    return (f"Validation loss at the stop: lower at the last epoch than at the tested (best validation score) "
            f"epoch in {len(falls)} of {counted} runs{by}; the lowest of the run at the last epoch in "
            f"{last_lowest} of {counted}: {reading}.")


def patience_margin(rows: Dict[str, Dict[int, Dict]]) -> Optional[str]:
    """One sentence on how close the patience came to stopping the runs of a table before a later improvement: the
    runs whose longest wait for a better validation score (``patience_waits``) was one short of their patience. A
    patience that often comes that close may stop other runs early, in a plateau they would have left. None when no
    record has a curve."""
    waits = patience_waits(rows)
    if not waits:
        return None
    close = sum(w == p - 1 for w, p in waits)
    patiences = sorted({p for _, p in waits})
    short = str(patiences[0] - 1) if len(patiences) == 1 else "the patience minus one"
    return (f"Patience ({', '.join(map(str, patiences))} validations): in {close} of {len(waits)} runs a better "
            f"validation score still came after {short} validations without one, one short of the stop; the longest "
            f"such wait per run (validations without a better score, then a better one): "
            f"{_counts(w for w, _ in waits)}.")


def epoch_ceiling(rows: Dict[str, Dict[int, Dict]]) -> Optional[str]:
    """One sentence naming the runs that the epoch ceiling stopped before their patience ran out (``capped_runs``):
    they ended on the budget, not on the validation score, and their row may be understated. None when no run of
    the table was stopped that way."""
    capped, counted, ceilings = capped_runs(rows)
    if not capped:
        return None
    return (f"Epoch ceiling ({', '.join(map(str, ceilings))}): {len(capped)} of {counted} runs stopped on it "
            f"with patience left ({'; '.join(capped)}): they ended on the budget, not on the validation score, so "
            f"their rows may be understated.")


def _counts(values) -> str:
    """"3 in 15 runs, 4 in 8" style counts of the values, in ascending order."""
    counts: Dict[int, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return ", ".join(f"{v} in {n} run{'s' if n > 1 else ''}" for v, n in sorted(counts.items()))


def figure_lines(name: str, rows: Dict[str, Dict[int, Dict]], test: str, figures: Dict[str, str]) -> List[str]:
    """Markdown image links of one table's plots; the SVG texts go into ``figures`` ({file name: text})."""
    captions, images = [], []
    drawn = [("curves", "validation score per epoch", plots.curves_svg(f"{name}: validation per epoch", rows)),
             ("scores", f"{test} sacreBLEU against trained parameters",
              plots.scores_svg(f"{name}: {test} against trained parameters", rows, test))]
    for kind, caption, svg in drawn:
        if svg is not None:
            file_name = f"ledger-{name}-{kind}.svg"
            figures[file_name] = svg
            captions.append(caption)
            images.append(f"![{name}: {caption}]({file_name})")
    if not images:
        return []
    # side by side, as a table: a caption over each plot, and no run-on "sentence" of alt texts in the prose
    return ["| " + " | ".join(captions) + " |", "|" + "---|" * len(captions), "| " + " | ".join(images) + " |", ""]


def _before_step(ledger: str, runs: Dict[int, Dict], parent: Dict[int, Dict], seeds: Sequence[int], test: str,
                 trained: str, cache: Dict) -> List[str]:
    """['test2016 of that checkpoint before the step: 39.07 / missing / ... (seed 1 trained again: ...).', 'The
    step's own effect on those checkpoints (seeds ...): Δ [interval], p = ... (paired bootstrap).']"""
    def before(s):
        if s not in runs:
            return "missing"
        return _fmt(((runs[s]["after"].get("as_trained") or {}).get(test) or {}).get("sacrebleu"))
    text = f"{test} of that checkpoint before the step: {' / '.join(before(s) for s in seeds)}"
    retrained = retrained_seeds(runs)
    if retrained:
        text += (f" ({_seed_list(retrained)}: trained again, not the model of `{trained}`'s record; its difference "
                 f"from `{trained}` mixes a retraining with the step, so the step's own effect is the difference "
                 "from this score)")
    lines = [text + "."]
    effect = step_effect(ledger, runs, parent, test, cache)
    if effect is not None:
        low, high = effect["interval"]
        lines.append(f"The step's own effect on those checkpoints ({_seed_list(effect['seeds'])}): "
                     f"{effect['diff']:+.2f} [{low:+.2f}, {high:+.2f}], {p_is(effect['p'])} (paired bootstrap).")
    return lines


def _named_files(rows: Dict[str, Dict[int, Dict]]) -> str:
    """'`path` `digest` (rows a, b); ...': the digest of every file the rows' options name, with
    the rows trained with each version where the table holds more than one."""
    named: Dict[str, Dict[str, List[str]]] = {}
    for row, runs in rows.items():
        for r in runs.values():
            for path, digest in sorted((r.get("file_digests") or {}).items()):
                names = named.setdefault(path, {}).setdefault(digest, [])
                if row not in names:
                    names.append(row)
    if not named:
        return ""
    parts = []
    for path, versions in sorted(named.items()):
        if len(versions) == 1:
            parts.append(f"`{path}` `{next(iter(versions))}`")
        else:
            parts.append(f"`{path}` in {len(versions)} versions: " + ", ".join(
                f"`{d}` ({', '.join(names)})" for d, names in sorted(versions.items())))
    return "; ".join(parts)


def render(ledger: str, seeds: Sequence[int] = DEFAULT_SEEDS, test: str = "test2016",
           title: str = "Results ledger", figures: Optional[Dict[str, str]] = None,
           claims: Optional[str] = None) -> str:
    """The Markdown text; given a dict as ``figures``, the plots too (written by the caller beside the text); given
    a claims file (``claims``), its verdicts first (``claims_section``)."""
    records = rec.read_records(ledger)
    md = [f"# {title}", "",
          f"Generated by `python -m fairseq_outlayers.lab.ledger render` from the records in `{ledger}` alone "
          "(the protocol: docs/reproducing.md). Scores: sacreBLEU on detokenised output (signature below); "
          "tokenised BLEU on Moses-tokenised text as in the papers. The mean ± sd column: mean and sample standard "
          "deviation over the recorded seeds; a seed without a record reads \"missing\" and is not averaged in. "
          f"The p column: paired bootstrap resampling of the test sentences ({N_SAMPLES} resamples, seed {SEED}, the same "
          "draw for every seed of both systems, the statistic being the difference of mean BLEU over the seeds "
          "both have; with one seed it is `sacrebleu --paired-bs`); the interval is the 2.5-97.5 percentile range "
          "of the resampled differences. Both hold the trained models fixed; p (seeds) is Welch's two-sided "
          "t-test of the per-seed scores, which counts the seed-to-seed spread instead (each seed one "
          "observation; with three seeds a side it has little power). Epochs: trained (of the best checkpoint).",
          ""]
    if records:
        resumed = sum(1 for r in records if r.get("resumed"))
        # a kind of machine is its hardware and torch; the thread count a run was given is a setting of it
        kinds = {re.sub(r",? *OMP_NUM_THREADS=\S+", "", r.get("machine") or r["device"]) for r in records}
        threads = sorted({m.group(1) for r in records
                          for m in [re.search(r"OMP_NUM_THREADS=(\d+)", r.get("machine") or "")] if m}, key=int)
        machines = f"{len(kinds)} kind{'s' if len(kinds) > 1 else ''} of machine"
        if len(threads) > 1:
            machines += f" (runs at {' and '.join(threads)} threads)"
        digests = sum(1 for r in records if r.get("data_digest"))
        named = sum(1 for r in records if "file_digests" in r)
        md += [f"Train tok/s is fairseq's training speed, a mean over the seeds; it does not compare between rows: "
               f"{resumed} of {len(records)} records are resumed runs, on {machines}, shared with "
               f"other work (the speeds measured for comparison are in docs/benchmarks). {digests} of "
               f"{len(records)} records keep the digest of their data (`data_digest`) and {named} the digests of the files "
               "their options name (`file_digests`); the older ones do not.", ""]
    if not records:
        md += ["The ledger holds no record yet.", ""]
        return "\n".join(md)
    cache: Dict = {}
    table_seeds = sorted(seeds)
    if claims is not None:
        md += claims_section(ledger, claims, table_seeds, test, cache)
    for name, rows in group(records).items():
        protocol = keep_seeds(rows, table_seeds)
        md += [f"## {name}", ""] + table(ledger, protocol, table_seeds, test, cache) + [""]
        md += [line for sentence in (loss_at_stop(protocol), patience_margin(protocol), epoch_ceiling(protocol))
               if sentence
               for line in (sentence, "")]
        md += further_seeds(ledger, rows, table_seeds, test, cache)
        if figures is not None:
            md += figure_lines(name, protocol, test, figures)
        signatures = sorted({r["test"][test]["sacrebleu_signature"] for runs in rows.values()
                             for r in runs.values() if test in r["test"]})
        commits = sorted({r["commit"] for runs in rows.values() for r in runs.values()})
        data = sorted({r["data_digest"] for runs in rows.values() for r in runs.values() if r.get("data_digest")})
        named = _named_files(rows)
        # the commits in list items of 20: a list of hashes is not a sentence, and the docs' checker counts words
        md += ([f"- sacreBLEU signature: {', '.join(f'`{s}`' for s in signatures)}.", "- commits:"]
               + [f"  - {', '.join(commits[i:i + 20])}." for i in range(0, len(commits), 20)]
               + ([f"- data digests: {', '.join(f'`{d}`' for d in data)}."] if data else [])
               + ([f"- named files: {named}."] if named else []) + ["", f"### Rows of {name}", ""])
        first = {row: runs[min(runs)] for row, runs in rows.items()}
        shared = shared_options([r["options"][:-2] for r in first.values()])  # without --seed N
        md += ["fairseq-train options every row of this table has (the runner adds `--user-dir`, `--save-dir` "
               "and `--seed`):", "", "```text", shlex.join(shared), "```", "",
               "Each row: what it is, how it stops, and its own options.", ""]
        for row, r in first.items():
            md += row_entry(ledger, row, r, shared, protocol, table_seeds, test, cache)
    return "\n".join(md)


def _option_groups(options: Sequence[str]) -> List[Tuple[str, ...]]:
    """fairseq-train options as groups: a positional argument alone, or a flag with the values after it."""
    def flag(o):
        return o.startswith("-") and not o[1:2].isdigit() and o[1:2] != "."

    groups: List[List[str]] = []
    for o in options:
        if flag(o) or not groups or not flag(groups[-1][0]):
            groups.append([o])
        else:
            groups[-1].append(o)
    return [tuple(g) for g in groups]


def shared_options(options: Sequence[Sequence[str]]) -> List[str]:
    """The option groups (a flag with its values) every list in ``options`` has, in the first list's order."""
    common = set(_option_groups(options[0]))
    for other in options[1:]:
        common &= set(_option_groups(other))
    return [o for g in _option_groups(options[0]) if g in common for o in g]


#: modules that records' descriptions run (``python -m MODULE``) as they were when the run was made, and the
#: command that does it now
MOVED = {"fairseq_outlayers.pairing": "outlayers-pairing"}
#: a planning reference a record's description may hold ("(issue N, item M)" with numbers): not on a user's page
WORK_ITEM = re.compile(r"\s*\(issue \d+(?:, item \d+)?\)")


def row_entry(ledger: str, row: str, r: Dict, shared: Sequence[str], protocol: Dict[str, Dict[int, Dict]],
              seeds: Sequence[int], test: str, cache: Dict) -> List[str]:
    """A row of the ledger page: its name and description, the options it has beyond the table's ``shared`` ones,
    how it stopped, and the step after training with the checkpoint's score before it."""
    v = r["validation"]
    why = f" ({v['reason']})" if v.get("reason") else ""
    stop = (f"{v.get('budget')} updates, last checkpoint" if v["metric"] == "budget"
            else f"Early stopping on validation {v['metric']}{why}")
    beam = (r.get("decoding") or {}).get("beam")
    description = r.get("description", "").strip()
    for module, new in MOVED.items():  # a record's description is kept as it was run; a moved command is named
        description = re.sub(rf"python -m {re.escape(module)}\b(?!\.)", lambda m: f"{m.group(0)} (now `{new}`)",
                             description)
    description = WORK_ITEM.sub("", description)
    if description and description[-1] not in ".!?":
        description += "."
    common = set(_option_groups(shared))
    own = [o for g in _option_groups(r["options"][:-2]) if g not in common for o in g]
    lines = [f"**{row}**: {description}".rstrip(),
             f"Own options: `{shlex.join(own)}`." if own else "No options beyond the shared ones.",
             stop + (f"; beam {beam}" if beam else "") + _scale_words(r.get("decoding") or {}) + "."]
    teacher = r.get("teacher")
    if teacher:  # two stages (teacher.py): the vectors of each seed's own teacher
        mixed = (f", words seen fewer than {teacher['random_below']} times random unit vectors"
                 if teacher.get("random_below") else "")
        lines.append(f"Target vectors: the {teacher.get('matrix', 'output')} matrix of the same seed's "
                     f"`{teacher['row']}` (`checkpoint_best.pt`){mixed}; the digests are in the records.")
    after = r.get("after")
    if after:
        trained = re.sub(r"\.seed\d+$", "", after.get("trained_in") or row)
        lines.append(f"Then `{shlex.join(after['step'])}` on each seed's best checkpoint of `{trained}`.")
        lines += _before_step(ledger, protocol.get(row, {}), protocol.get(trained, {}), seeds, test, trained, cache)
    return lines + [""]


def _scale_words(decoding: Dict) -> str:
    """", score scale chosen on validation among none, 10, 20" for a record of a row with ``# scales:``."""
    tried = decoding.get("scale_validation")
    return f", score scale chosen on validation among {', '.join(tried)}" if tried else ""


# the claims and their verdicts (docs/results/claims.json) live in claims.py, the ledger's one-line answers in
# lookups.py; these names are read from here too
from fairseq_outlayers.lab.ledger.lookups import compare_line, converged_figures  # noqa: E402,F401
from fairseq_outlayers.lab.ledger.claims import (  # noqa: E402,F401
    SAVINGS, VERDICT_RULE, VERDICT_WORDS, _ranges, _sign, claim_result, claim_target, claims_section, claims_table,
    further_result, further_verdicts, read_claims)
