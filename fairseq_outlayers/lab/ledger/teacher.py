"""Two stages inside the ledger: a row's target vectors from another row's trained model of the same seed.

A row with ``# teacher: ROW [--matrix output|input] [--random-below N] [--center]`` trains against
``outlayers-vectors export`` of ROW's ``checkpoint_best.pt`` (seed N of the row from seed N of ROW). ``prepare``:

1. ROW recorded and its checkpoint at the recorded update in ``--work``: reused. ROW not recorded: trained and
   recorded first (``runner.run``). ROW recorded but its checkpoint gone: trained again in its run directory
   (``runner.train``; an interrupted training resumes there), not recorded again; the student's record says so
   (``teacher.retrained``), and whether the checkpoint is the recorded model (``teacher.record_matches``: the
   record's best update and validation score). A teacher trained again to the end keeps its checkpoint's digest
   (``retrained.json``): the seed's later students reuse that model while the file is unchanged;
2. the export into ROW's run directory (``vectors.output.vec``, or the mixed table's name), with ``NAME.json``
   beside it: the digests of the checkpoint it was exported from and of the vectors. An export whose checkpoint is
   still the same is reused; a changed checkpoint is exported again;
3. the student's run directory keeps the digest it started with (``teacher.json``): a student resumed against
   vectors of another digest (its teacher trained again differently) is refused, naming both digests.

The student's record holds ``teacher``: the row, the checkpoint's update and validation score, the export command
and the vectors' digest. Teacher checkpoints stay in ``--work``; nothing of a run directory is removed.
"""
import json
import os
import shlex
import time
from typing import Dict, Tuple

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.lab.fairseq_runs import log
from fairseq_outlayers.lab.ledger import records
from fairseq_outlayers.lab.ledger.run_state import checkpoint_state, locked
from fairseq_outlayers.lab.ledger.rows import LedgerRow, read_ledger_row, row_options, teacher_path
from fairseq_outlayers.outfiles import write_text

#: the bookkeeping file of a student's run directory: the teacher's vectors it trains against
STUDENT_FILE = "teacher.json"
#: the bookkeeping file of a teacher's run directory after the ledger trained it again to the end: its checkpoint's
#: digest, so that the next student of the same seed reuses that model instead of training it once more
RETRAINED_FILE = "retrained.json"


def _retrained_here(run_dir: str, best: str) -> bool:
    """True when the ledger finished training ``best`` again in ``run_dir`` and the file is still that model."""
    path = os.path.join(run_dir, RETRAINED_FILE)
    if not os.path.exists(path):
        return False
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("checkpoint_digest") == records.file_digest(best)


def teacher_row(row: LedgerRow) -> LedgerRow:
    """The teacher's row (a row file of the student's folder, read with the student's data)."""
    teacher = read_ledger_row(teacher_path(row), row.data_bin)
    if teacher.teacher is not None:
        raise OutlayersConfigError(f"{row.path}: its teacher {teacher.path} has a teacher of its own; a teacher is "
                                   "a row trained on its own (one stage)")
    if teacher.trained_as:
        raise OutlayersConfigError(f"{row.path}: its teacher {teacher.path} is a step row ('# from:'); name the row "
                                   "it is trained as")
    if teacher.budget is not None:
        raise OutlayersConfigError(f"{row.path}: its teacher {teacher.path} is a quick row ('# budget:'); a "
                                   "teacher is trained under the converged protocol")
    return teacher


def _teacher_checkpoint(teacher: LedgerRow, seed: int, s, run, train) -> Tuple[str, Dict]:
    """(checkpoint_best.pt of the teacher's seed, facts for the student's record): reused, trained and recorded,
    or trained again (see the module's docstring)."""
    options = row_options(teacher, seed, s.patience, s.max_epoch, s.beam)
    run_dir = os.path.join(s.work, f"{teacher.training_name()}.seed{seed}")
    best = os.path.join(run_dir, "checkpoint_best.pt")
    record = records.recorded(s.ledger, teacher.name, seed, options, teacher.path)
    retrained, start = False, time.time()
    if record is None:
        log(f"{teacher.name} seed {seed}: the teacher is not recorded; training and recording it first", "ledger")
        record, _ = run(teacher, seed, s)
    elif os.path.exists(best) and _retrained_here(run_dir, best):
        retrained = True  # trained again to the end by an earlier call (other threads or device): the same model
    elif not (os.path.exists(best) and checkpoint_state(best)["updates"] == record["best_updates"]):
        why = "is gone" if not os.path.exists(best) else "is not the recorded model"
        log(f"{teacher.name} seed {seed}: {best} {why}; training the teacher again (its record stays)", "ledger")
        train(teacher, seed, s, options, run_dir)
        retrained = True
        write_text(os.path.join(run_dir, RETRAINED_FILE),
                   json.dumps({"checkpoint_digest": records.file_digest(best)}, indent=1) + "\n")
    state = checkpoint_state(best)
    facts = {"row": teacher.name, "seed": seed, "checkpoint": os.path.basename(best),
             "best_updates": state["updates"], "validation_best": state["best"], "retrained": retrained,
             "seconds": round(time.time() - start, 1)}  # this call's time on the teacher (0 when reused)
    # the checkpoint is the recorded model when its best update and validation score are the record's (a teacher
    # trained again by this call, or by hand into its run directory, may differ: CPU runs reproduce, GPU runs not)
    facts["record_matches"] = (state["updates"] == record["best_updates"]
                               and state["best"] == record["validation"].get("best"))
    if not facts["record_matches"]:
        log(f"warning: {teacher.name} seed {seed}: {best} is not its recorded model (best at update "
            f"{state['updates']} vs {record['best_updates']}, validation {state['best']} vs "
            f"{record['validation'].get('best')}); the student's record says so", "ledger")
    return best, facts


def export_command(row: LedgerRow, checkpoint: str, output: str, seed: int):
    t = row.teacher
    cmd = ["outlayers-vectors", "export", checkpoint, output, "--matrix", t.matrix]
    if t.random_below:
        cmd += ["--random-below", str(t.random_below), "--seed", str(seed)] + (["--center"] if t.center else [])
    return cmd


def _export(row: LedgerRow, seed: int, checkpoint: str, data_bin: str) -> Tuple[str, Dict]:
    """(vectors file, {"export", "vectors_digest", "checkpoint_digest"}): the export of ``checkpoint``, reused when
    its bookkeeping file names the same checkpoint digest."""
    from fairseq_outlayers.tools.vectors import MixedTable, export_target_vectors

    t = row.teacher
    output = os.path.join(os.path.dirname(checkpoint), t.vectors_name())  # rows.teacher_vectors: the seed's
    sidecar = os.path.splitext(output)[0] + ".json"
    ckpt_digest = records.file_digest(checkpoint)
    done = records.read_json(sidecar) if os.path.exists(sidecar) else None
    cmd = export_command(row, checkpoint, output, seed)
    if (isinstance(done, dict) and done.get("checkpoint_digest") == ckpt_digest and os.path.exists(output)
            and records.file_digest(output) == done.get("vectors_digest")):
        return output, done
    mixed = MixedTable(t.random_below, seed, t.center) if t.random_below else None
    log(f"{row.name} seed {seed}: {shlex.join(cmd)}", "ledger")
    export_target_vectors(checkpoint, output, t.matrix, data_bin, force=True, mixed=mixed)
    done = {"export": shlex.join(cmd), "checkpoint_digest": ckpt_digest, "vectors_digest": records.file_digest(output)}
    if mixed is not None:
        done["random_rows"] = mixed.drawn
    write_text(sidecar, json.dumps(done, sort_keys=True) + "\n")
    return output, done


def prepare(row: LedgerRow, seed: int, s, student_dir: str, run, train) -> Tuple[str, Dict]:
    """(the vectors file the student trains against, the record's ``teacher`` entry); see the module's docstring.
    An error when the student's run directory started with vectors of another digest. ``run``/``train``: the
    runner's ``run`` (train and record the teacher) and ``train`` (train it again), handed in by the runner."""

    teacher = teacher_row(row)
    teacher_dir = os.path.join(s.work, f"{teacher.training_name()}.seed{seed}")
    os.makedirs(teacher_dir, exist_ok=True)
    checkpoint, facts = _teacher_checkpoint(teacher, seed, s, run, train)
    with locked(teacher_dir, ".export.lock"):  # two students of one teacher (--jobs): one export at a time
        vectors, export = _export(row, seed, checkpoint, row.data_bin)
    facts.update(export, matrix=row.teacher.matrix, random_below=row.teacher.random_below,
                 center=row.teacher.center)
    claim = os.path.join(student_dir, STUDENT_FILE)
    before = records.read_json(claim) if os.path.exists(claim) else None
    if os.path.exists(claim) and not isinstance(before, dict):
        raise OutlayersConfigError(f"{claim} is damaged; remove {student_dir} (or give another --work) to start "
                                   "this run afresh")
    if before and before.get("vectors_digest") != facts["vectors_digest"]:
        raise OutlayersConfigError(
            f"{student_dir} started against the vectors of {teacher.name} seed {seed} with digest "
            f"{before.get('vectors_digest')}, but its teacher's export is now {facts['vectors_digest']} (the teacher "
            f"was trained again or changed); restore that teacher, or remove {student_dir} to train the row "
            "afresh against the new vectors")
    os.makedirs(student_dir, exist_ok=True)
    write_text(claim, json.dumps(facts, sort_keys=True) + "\n")
    return vectors, facts
