"""The numbers behind the ledger's tables, from the records: rows grouped by table and seed, two rows compared (the
paired bootstrap over the kept translations, Welch's test over the seeds), a step row's own effect, and how the runs
stopped (validation loss, patience, epoch ceiling). ``render`` writes them out as Markdown."""
import os
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.lab.ledger import records as rec
from fairseq_outlayers.lab.ledger import patience
from fairseq_outlayers.lab.ledger.stats import mean_sd, paired_bootstrap_test, sentence_stats, welch_t_test

#: the protocol's seeds: the tables, their plots and ``compare_line`` keep to them
DEFAULT_SEEDS = (1, 2, 3)


def group(records: List[Dict]) -> Dict[str, Dict[str, Dict[int, Dict]]]:
    """{table: {row: {seed: record}}}, tables and rows in order (rows by their row file's name)."""
    tables: Dict[str, Dict[str, Dict[int, Dict]]] = {}
    for r in sorted(records, key=lambda r: (r["table"], r.get("row_file", ""), r["row"], r["seed"])):
        tables.setdefault(r["table"], {}).setdefault(r["row"], {})[r["seed"]] = r
    return tables


def keep_seeds(rows: Dict[str, Dict[int, Dict]], seeds: Optional[Sequence[int]]) -> Dict[str, Dict[int, Dict]]:
    """``rows`` with only the records of ``seeds`` (None: all of them); a row left without records is dropped."""
    if seeds is None:
        return rows
    kept = {row: {s: r for s, r in runs.items() if s in seeds} for row, runs in rows.items()}
    return {row: runs for row, runs in kept.items() if runs}


def _entry_stats(ledger: str, entry: Dict, lowercase: bool, cache: Dict):
    """The sentence statistics of one set's hypotheses against its reference (``entry`` names both files)."""
    key = (entry["hypotheses"], entry["reference"])
    if key not in cache:
        hyps, refs = rec.read_lines(ledger, entry["hypotheses"]), rec.read_lines(ledger, entry["reference"])
        if not refs:
            raise OutlayersConfigError(f"{os.path.join(ledger, entry['reference'])} is empty (the reference named by "
                                       "a record); restore it from git or remove the records naming it")
        if len(hyps) != len(refs) or entry.get("sentences", len(refs)) != len(refs):
            raise OutlayersConfigError(
                f"{os.path.join(ledger, entry['hypotheses'])} has {len(hyps)} lines but its reference "
                f"{os.path.join(ledger, entry['reference'])} has {len(refs)}"
                + (f" and the record says {entry['sentences']} sentences" if "sentences" in entry else "")
                + ": the file was cut or changed; restore it from git or remove the record naming it to rerun "
                "that run")
        cache[key] = sentence_stats(hyps, refs, lowercase)
    return cache[key]


def _stats_by_seed(ledger: str, runs: Dict[int, Dict], test: str, cache: Dict) -> Dict[int, object]:
    return {seed: _entry_stats(ledger, r["test"][test], r.get("lowercase", False), cache)
            for seed, r in runs.items() if r["test"].get(test)}


def step_effect(ledger: str, runs: Dict[int, Dict], parent: Dict[int, Dict], test: str,
                cache: Optional[Dict] = None) -> Optional[Dict]:
    """A step row's test after the step against the same checkpoints before it (``paired_bootstrap_test``), over
    the seeds whose before-step translations the ledger holds: the record's own (``after.as_trained``) or, when
    the step ran on the very model of the parent row's record (``after.parent_record_matches``), the parent's
    (``parent``: its runs by seed). None when no seed has them."""
    cache = {} if cache is None else cache
    before = {}
    for seed, r in runs.items():
        entry = (r["after"].get("as_trained") or {}).get(test) or {}
        if entry.get("hypotheses"):
            before[seed] = _entry_stats(ledger, entry, r.get("lowercase", False), cache)
        elif r["after"].get("parent_record_matches") and parent.get(seed, {}).get("test", {}).get(test):
            before[seed] = _entry_stats(ledger, parent[seed]["test"][test], r.get("lowercase", False), cache)
    system = _stats_by_seed(ledger, runs, test, cache)
    common = sorted(set(system) & set(before))
    if not common:
        return None
    return paired_bootstrap_test({s: system[s] for s in common}, {s: before[s] for s in common})


def compare(ledger: str, rows: Dict[str, Dict[int, Dict]], name: str, other: str, test: str,
            cache: Optional[Dict] = None) -> Dict:
    """Row ``name`` against row ``other`` of one table: {"diff", "p", "seeds", "complete", "interval", "welch",
    "files"} (the paired bootstrap over the test sentences, ``welch_t_test`` of every recorded seed's score, None
    below two seeds a side, and ``records.files_differ``: the named files the two rows were trained with in other
    versions), or {"why"} when the two cannot be compared (no records, different devices, no common seed)."""
    cache = {} if cache is None else cache
    if other not in rows:
        return {"why": f"{other}: no records"}
    devices = {r["device"] for r in rows[name].values()} | {r["device"] for r in rows[other].values()}
    if len(devices) > 1:
        return {"why": "devices differ"}
    system = _stats_by_seed(ledger, rows[name], test, cache)
    base = _stats_by_seed(ledger, rows[other], test, cache)
    if not set(system) & set(base):
        return {"why": "no common seed"}
    result = paired_bootstrap_test(system, base)
    return dict(result, complete=set(result["seeds"]) == set(system) == set(base),
                welch=welch_t_test(seed_scores(rows, name, test), seed_scores(rows, other, test)),
                files=rec.files_differ(list(rows[name].values()), list(rows[other].values())))


def seed_scores(rows: Dict[str, Dict[int, Dict]], row: str, test: str) -> List[float]:
    """The test sacreBLEU of each recorded seed of ``row``, in seed order."""
    return [r["test"][test]["sacrebleu"] for _, r in sorted(rows[row].items()) if test in r["test"]]


def retrained_seeds(runs: Dict[int, Dict]) -> List[int]:
    """Seeds of a step row (``# after:``) whose step ran on a checkpoint trained again, not the model its parent
    row's record was made with (``after.parent_record_matches`` false: the parent's checkpoints were gone)."""
    return [s for s, r in sorted(runs.items()) if (r.get("after") or {}).get("parent_record_matches") is False]


def longest_wait(curve: List[Dict], metric: str) -> Optional[int]:
    """The most validations in a row without a better score (strictly, as fairseq's ``--patience`` counts) that
    were still followed by a better one; None without scores."""
    scores = [c[metric] for c in curve if c.get(metric) is not None]
    if not scores:
        return None
    best, since, longest = scores[0], 0, 0
    for score in scores[1:]:
        if patience.is_better(score, best, metric):
            best, longest, since = score, max(longest, since), 0
        else:
            since += 1
    return longest


def stop_losses(rows: Dict[str, Dict[int, Dict]]) -> Tuple[List[float], int, int]:
    """(how far the validation loss fell after the tested epoch, in each run where it fell; runs whose last epoch
    has their lowest loss; runs counted): runs with a loss curve, step rows (``after``) left out as they share their
    parent's training."""
    falls, last_lowest, counted = [], 0, 0
    for runs in rows.values():
        for r in runs.values():
            curve = [c for c in r.get("curve") or [] if c.get("loss") is not None]
            best = [c for c in curve if c["epoch"] == r.get("best_epoch")]
            if r.get("after") or not best or (r.get("validation") or {}).get("metric") == "budget":
                continue
            counted += 1
            last = curve[-1]
            if last["loss"] < best[0]["loss"]:
                falls.append(best[0]["loss"] - last["loss"])
            last_lowest += min(curve, key=lambda c: (c["loss"], c["epoch"]))["epoch"] == last["epoch"]
    return falls, last_lowest, counted


def patience_waits(rows: Dict[str, Dict[int, Dict]]) -> List[Tuple[int, int]]:
    """(``longest_wait``, patience) of every run with a validation curve and a patience; step rows left out."""
    waits = []
    for runs in rows.values():
        for r in runs.values():
            v = r.get("validation") or {}
            wait = longest_wait(r.get("curve") or [], v.get("metric", "bleu"))
            if r.get("after") or wait is None or not v.get("patience"):
                continue
            waits.append((wait, v["patience"]))
    return waits


def capped_runs(rows: Dict[str, Dict[int, Dict]]) -> Tuple[List[str], int, List[int]]:
    """(the runs that the epoch ceiling (``--max-epoch``) stopped before their patience ran out, as "ROW seed N,
    best at epoch E"; runs with a ceiling; the ceilings): step rows left out."""
    capped, counted, ceilings = [], 0, set()
    for name, runs in rows.items():
        for seed, r in sorted(runs.items()):
            v = r.get("validation") or {}
            if r.get("after") or not v.get("max_epoch"):
                continue
            counted += 1
            ceilings.add(v["max_epoch"])
            best = r.get("best_epoch")
            if r.get("epochs", 0) >= v["max_epoch"] and best is not None and \
                    r["epochs"] - best < v.get("patience", float("inf")):
                capped.append(f"{name} seed {seed}, best at epoch {best}")
    return capped, counted, sorted(ceilings)


def mean_pm_sd(values: Sequence[float]) -> str:
    mean, sd = mean_sd(values)
    if mean is None:
        return "—"
    return f"{mean:.2f}" + (f" ± {sd:.2f}" if sd is not None else " (1 seed)")


def _word_params(params: Dict) -> int:
    """Parameters that represent words (input embeddings and the output layer, trained or frozen): the papers'
    "embedding parameters" (Liu et al. 2019 count source, target and output matrices)."""
    return params["embedding"] + params.get("output", 0)
