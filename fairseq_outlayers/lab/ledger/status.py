"""Where each row x seed stands: recorded, partly trained (resumable), or not started; ``ledger status`` prints it.

Read from the ledger's records and from the run directories of ``--work`` (``options.json`` and the training log
the runner keeps there); nothing is loaded from checkpoints, so it is quick enough to run at any time. A partial
run's epoch, best validation and pace (minutes an epoch, from the log's time stamps) come from its log; it resumes
from its ``checkpoint_last.pt`` with the same ``ledger run`` command. A run not started is shown with what the
row's recorded seeds took, to plan which runs fit in the time a machine has.
"""
import glob
import os
from typing import Dict, List, Optional, Sequence

from fairseq_outlayers.lab import fairseq_runs
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.lab.ledger import records
from fairseq_outlayers.lab.ledger.rows import LedgerRow, row_options, teacher_vectors, with_vectors


def run_state(row: LedgerRow, seed: int, ledger: str, work: str, patience: int, max_epoch: int,
              beam: int, test: str = "test2016", digests: Optional[Dict[str, str]] = None) -> Dict:
    """{"state": "recorded" | "other options" | "other data" | "trained" | "partial" | "not started" | "unreadable"
    (a damaged record: the text says which file and field), "text": one
    line of detail}. ``digests`` caches the digest of each data directory and named file over calls."""
    digests = {} if digests is None else digests
    options = row_options(row, seed, patience, max_epoch, beam)
    path = records.record_path(ledger, row.name, seed)
    if os.path.exists(path):
        try:
            record = records.load_record(path)
        except OutlayersConfigError as e:  # shown, not a stop: the other rows' states are still worth seeing
            return {"state": "unreadable", "text": f"unreadable record: {e}"}
        if record["options"] != options or ((record.get("after") or {}).get("step") or []) != row.after:
            return {"state": "other options",
                    "text": f"recorded with other options than {row.path} now gives ({path}): rename the row or "
                            "move the record away"}
        if options[0] not in digests:
            digests[options[0]] = records.data_digest(options[0]) if os.path.isdir(options[0]) else None
        now = digests[options[0]]
        if record.get("data_digest") and now and record["data_digest"] != now:
            return {"state": "other data",
                    "text": f"recorded on other data (digest {record['data_digest']}) than '{options[0]}' holds "
                            f"now ({now}): prepare the data as that run did ({path})"}
        for name, before in sorted(record.get("file_digests", {}).items()):
            if name not in digests:
                digests[name] = records.file_digest(name) if os.path.isfile(name) else None
            if digests[name] and digests[name] != before:
                return {"state": "other data",
                        "text": f"recorded with another '{name}' (digest {before}) than the one there now "
                                f"({digests[name]}): restore the file that run used ({path})"}
        score, v = record["test"].get(test, {}).get("sacrebleu"), record["validation"]
        valid = (f"{v.get('budget')} updates, validation BLEU {v.get('bleu')}" if v["metric"] == "budget"
                 else f"best valid {v['best']}, {record['epochs']} epochs")
        return {"state": "recorded", "text": f"recorded: {test} {score:.2f}, {valid}" if score is not None
                else "recorded"}
    run_dir = os.path.join(work, f"{row.training_name()}.seed{seed}")  # a step row's: the row it is ``from``
    claim, log = os.path.join(run_dir, "options.json"), os.path.join(run_dir, "train.log")
    if not os.path.exists(claim):
        if row.trained_as:  # a step row: its parent's training comes first, here, even if the parent is recorded
            return {"state": "not started",
                    "text": f"not started: {row.trained_as} is trained first in {run_dir} (its checkpoints are not "
                            f"there), then {row.after[0]}" + _recorded_cost(row, ledger, row.trained_as)}
        first = (f": first {row.teacher.row} seed {seed} (trained unless its checkpoint is in {work}), exported"
                 if row.teacher else "")
        return {"state": "not started", "text": "not started" + first + _recorded_cost(row, ledger)}
    if row.teacher:  # its run directory names the exported file, where the options hold the placeholder
        options = with_vectors(options, teacher_vectors(row, seed, work))
    claimed = records.read_json(claim)
    if claimed is None:
        return {"state": "unreadable", "text": f"unreadable: {claim} is not the JSON list of options `ledger run` "
                                               f"writes; remove {run_dir} to start that run afresh"}
    if claimed != options:
        return {"state": "other options",
                "text": f"{run_dir} holds a partial run with other options: remove it to start this one"}
    validations = fairseq_runs.validations(log) if os.path.exists(log) else []
    if row.budget is not None:  # a quick row: how far through its updates
        done = int(max([v.get("num_updates", 0) for v in validations] or [0]))
        state = "trained" if done >= row.budget else "partial"
        return {"state": state, "text": f"{'trained, not recorded' if done >= row.budget else 'partial'}: "
                                        f"{done} of {row.budget} updates at the last validation ({run_dir})"}
    metric = "bleu" if row.validate == "bleu" else "loss"
    scored = [v for v in validations if metric in v]
    if not scored:
        return {"state": "partial", "text": f"partial: no validation yet ({run_dir})"}
    pick = max if metric == "bleu" else min
    best = pick(scored, key=lambda v: v[metric])
    last = scored[-1]["epoch"]
    patience = row.stopping_patience(patience)
    left = max(patience - (last - best["epoch"]), 0)
    if left == 0 or last >= max_epoch:  # stopped by the protocol: only the test and the record are left
        step = f"applies {row.after[0]}, " if row.after else ""
        return {"state": "trained",
                "text": f"trained, not recorded: stopped at epoch {last}, best valid {metric} {best[metric]} at "
                        f"epoch {best['epoch']}; `ledger run` {step}tests and records it ({run_dir})"}
    pace = fairseq_runs.epoch_seconds(log)
    more = min(left, max_epoch - last)
    pace = "" if pace is None else (f", {pace / 60:.1f} min an epoch here (at least {more * pace / 60:.0f} min "
                                    "more)")
    return {"state": "partial",
            "text": f"partial: epoch {last} of at most {max_epoch}, best valid {metric} {best[metric]} at epoch "
                    f"{best['epoch']}, {left} of {patience} epochs of patience left{pace} ({run_dir})"}


def _recorded_cost(row: LedgerRow, ledger: str, name: Optional[str] = None) -> str:
    """What the recorded seeds of the row (or of row ``name``) took (epochs, fairseq's training time, device), to
    plan the runs not started; "" when none is recorded. Records made with other options are counted too: this is a
    guide, not a result."""
    if not os.path.isdir(ledger):
        return ""
    done = []
    for path in sorted(glob.glob(os.path.join(ledger, f"{glob.escape(name or row.name)}.seed*.json"))):
        if not records.is_record_name(os.path.basename(path)):
            continue  # a stray copy beside the records: render and run refuse it, a guide leaves it out
        try:
            done.append(records.load_record(path))
        except OutlayersConfigError:
            continue  # status shows it as unreadable where its row and seed are asked for
    done = [r for r in done if r["row"] == (name or row.name)]
    if not done:
        return ""
    epochs = sorted(r["epochs"] for r in done)
    minutes = sorted(r["training_seconds"] / 60 for r in done)
    devices = ", ".join(sorted(set(r["device"] for r in done)))
    span = (lambda v, fmt: fmt.format(v[0]) if v[0] == v[-1] else (fmt + "-" + fmt).format(v[0], v[-1]))
    return (f" (its {len(done)} recorded seed{'s' if len(done) > 1 else ''} took {span(epochs, '{}')} epochs, "
            f"{span(minutes, '{:.0f}')} min of training on {devices})")


def status_lines(rows: List[LedgerRow], seeds: Sequence[int], ledger: str, work: str, patience: int,
                 max_epoch: int, beam: int) -> List[str]:
    """One line per row x seed, grouped by table, then the counts per state."""
    lines, counts, table, digests = [], {}, None, {}
    for row in sorted(rows, key=lambda r: (r.table, os.path.basename(r.path))):
        if row.table != table:
            table = row.table
            lines.append(f"{table}:")
        for seed in seeds:
            state = run_state(row, seed, ledger, work, patience, max_epoch, beam, digests=digests)
            counts[state["state"]] = counts.get(state["state"], 0) + 1
            lines.append(f"  {row.name} seed {seed}: {state['text']}")
    order = ("recorded", "trained", "partial", "not started", "other options", "other data", "unreadable")
    lines.append(", ".join(f"{counts[s]} {s}" for s in order if s in counts))
    return lines
