"""One converged run: train a row with one seed under the protocol, evaluate its best checkpoint, record it.

``run(row, seed, settings)`` returns the record, from the ledger when the run is recorded already (checked
against the row's options), else after:

1. ``fairseq-train`` with the row's options, the protocol (``rows.protocol_options``: ``--patience`` on validation
   BLEU or loss within ``--max-epoch``), the seed, and ``--save-dir WORK/ROW.seedN`` (an interrupted run resumes
   from its ``checkpoint_last.pt``, fairseq's own behaviour; ``options.json``, ``data_digest`` and ``file_digests.json``
   there make sure it is the same run on the same data and files);
2. epochs, updates, training time and the best validation score from the checkpoints fairseq wrote; target
   tokens per second and the validation figures of every epoch (the learning curve) from its log; parameter
   counts of ``checkpoint_best.pt``;
3. ``checkpoint_best.pt`` on the data's test split against the raw references (``--test-ref``), and on each extra
   raw test set (``NAME=SRC_FILE,REF_FILE``, prepared with the training data's tokeniser, case and BPE);
4. the record and the detokenised hypotheses written into the ledger (``records.write_record``).

A row with ``# budget: N`` (``make demo``, the continuous sweep) trains N updates with no early stopping and is
tested on ``checkpoint_last.pt``; with ``--valid-ref`` its validation split is translated too (the figure quick rows
are chosen by: ``validation.bleu``). A row's ``# decodes:`` are further test decodes (``decodes`` in the record),
added to a recorded run as well while its checkpoint is in ``--work``.

A row with ``# after: STEP`` is tested on the step applied to ``checkpoint_best.pt`` (``steps.py``; written to
``work/ROW.seedN/checkpoint_after.pt``), with the test score of ``checkpoint_best.pt`` itself kept beside it; with
``# from: PARENT`` it trains (or finds trained) in PARENT's run directory, under a lock, so both rows share one
training per seed.
"""
import json
import os
import platform
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from fairseq_outlayers import USER_DIR
from fairseq_outlayers.lab import fairseq_runs, gpus
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.tools.evaluation.scoring import evaluate
from fairseq_outlayers.lab.fairseq_runs import log
from fairseq_outlayers.lab.ledger import records, patience, steps, teacher
from fairseq_outlayers.lab.ledger.rows import LedgerRow, row_options, with_vectors
from fairseq_outlayers.lab.ledger.run_state import checkpoint_state, locked as _locked  # noqa: F401
from fairseq_outlayers.lab.ledger.decodes import (  # noqa: F401  (read from here too)
    add_decodes, check_decoding, choose_scale, decode_scale)
from fairseq_outlayers.outfiles import check_writable_dir, write_text
from fairseq_outlayers.tools.commands import executable
from fairseq_outlayers.tools.rawtext import Preparation

#: git is asked for the commit of the code that runs from here (it finds the repository above this directory)
CODE_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Settings:
    ledger: str
    work: str
    test_ref: str
    test_name: str = "test2016"
    extra_sets: Dict[str, Tuple[str, str]] = field(default_factory=dict)
    patience: int = 5
    max_epoch: int = 50
    beam: int = 5
    lenpen: float = 1.0
    batch_size: int = 128
    env: Dict[str, str] = field(default_factory=dict)  # for this run's fairseq processes only (its GPU: gpus.py)
    valid_ref: Optional[str] = None  # raw reference of the validation split: quick rows are decoded on it


def machine(env: Optional[Dict[str, str]] = None) -> Tuple[str, str]:
    """(machine description, device) of this process: the device fairseq-train picks (CUDA when present), and the
    threads of a run whose processes get ``env`` (``slots.py``) on top of this process's environment."""
    import torch

    threads = (env or {}).get("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "unset"))
    desc = (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
            f"OMP_NUM_THREADS={threads}")
    device = f"cuda: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "cpu"
    return desc, device


def _relative_to_cwd(path: str) -> str:
    """A row file as the records name it: relative to the working directory (the repository's root when run as
    documented) when it lies under it, else as given."""
    here = os.getcwd()
    full = os.path.abspath(path)
    return os.path.relpath(full, here) if full.startswith(here + os.sep) else path


def git_commit() -> str:
    """The short commit of the package's checkout, with "-dirty" when tracked files differ from it; outside a git
    checkout, the environment's ``OUTLAYERS_COMMIT`` (else "unknown")."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=CODE_DIR)
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                            text=True, cwd=CODE_DIR)
    # a copy of the checkout without its .git (a tarball, a device machine's working tree) can name its commit
    return ((head.stdout.strip() or os.environ.get("OUTLAYERS_COMMIT", "unknown"))
            + ("-dirty" if status.stdout.strip() else ""))


def finite(value: float):
    """``value`` rounded, or None when it is not a number (JSON has no NaN)."""
    return round(value, 1) if value == value and abs(value) != float("inf") else None


#: the validation figures a record keeps per epoch (the continuous criterions' κ, cos and nearest-neighbour
#: accuracy where they log them)
CURVE_FIELDS = ("num_updates", "loss", "nll_loss", "bleu", "cos", "norm", "nn_acc", "kappa_low", "kappa_high")


def curve(log_path: str) -> List[Dict]:
    """[{"epoch": 1, "num_updates": 126, "loss": 7.689, "nll_loss": 6.911, "bleu": 3.45}, ...] from a training log
    (epochs logged before a resume made by an older version of the runner, which rewrote the log, are absent)."""
    out = []
    for v in fairseq_runs.validations(log_path):
        point = {"epoch": v["epoch"]}
        point.update({k: (int(v[k]) if k == "num_updates" else v[k]) for k in CURVE_FIELDS
                      if k in v and v[k] == v[k] and abs(v[k]) != float("inf")})
        out.append(point)
    return out


def check_before_training(runs: List[Tuple[LedgerRow, int]], s: Settings) -> List[str]:
    """Every check that can stop a batch of runs, made before the first one trains: ``--ledger`` and ``--work``
    writable; a record made with other options or another step (an error naming both); a run not recorded yet
    whose data directory now holds other data than its table's records were trained on, or whose named files
    differ from its row's recorded seeds' (an error). Returns the warnings (a named file that differs from another
    row's of the table), once each."""
    check_writable_dir(s.ledger, "--ledger")
    if os.path.isdir(os.path.join(s.ledger, "refs")):
        check_writable_dir(os.path.join(s.ledger, "refs"), "--ledger (its refs/)")
    check_writable_dir(s.work, "--work")
    existing = records.read_records(s.ledger)
    digests, warnings = {}, []
    for row, seed in runs:
        options = row_options(row, seed, s.patience, s.max_epoch, s.beam)
        if records.recorded(s.ledger, row.name, seed, options, row.path, after=row.after) is None:
            check_decoding(existing, row, s)
            digest = digests.setdefault(options[0], records.data_digest(options[0]))
            records.check_data(existing, row.table, options[0], digest, row.path)
            for warning in records.check_files(existing, row.table, row.name, records.file_digests(options),
                                               row.path):
                if warning not in warnings:
                    warnings.append(warning)
    return warnings


def train_command(options: List[str], run_dir: str) -> List[str]:
    """The fairseq-train command of a run's options (``rows.row_options``) saving into ``run_dir``."""
    return [executable("fairseq-train"), options[0], "--user-dir", USER_DIR, *options[1:],
            "--save-dir", run_dir, "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "50",
            "--no-progress-bar"]


def train(row: LedgerRow, seed: int, s: Settings, options: List[str], run_dir: str,
          finished_updates: Optional[int] = None) -> Dict:
    """Train (or resume, or find trained) the run of ``options`` in ``run_dir``; {"seconds", "data_digest",
    "file_digests", "resumed", "command", "log"}. ``finished_updates``: the updates of the record of this training
    (a step row's parent): a ``checkpoint_last.pt`` that far is finished whatever its log says."""
    os.makedirs(run_dir, exist_ok=True)
    with _locked(run_dir):
        return _train(row, seed, s, options, run_dir, finished_updates)


def _train(row: LedgerRow, seed: int, s: Settings, options: List[str], run_dir: str,
           finished_updates: Optional[int]) -> Dict:
    claim = os.path.join(run_dir, "options.json")  # fairseq resumes from run_dir: only a run of these options
    if os.path.exists(claim) and records.read_json(claim) is None:
        raise OutlayersConfigError(f"{claim} is damaged (not the JSON list of options this runner writes); remove "
                                   f"{run_dir} (or give another --work) to start this run afresh")
    if os.path.exists(claim) and records.read_json(claim) != options:
        raise OutlayersConfigError(f"{run_dir} holds a partial run made with other options ({claim}); remove that "
                                   "directory (or give another --work) to start this one afresh")
    write_text(claim, json.dumps(options) + "\n")
    digest, digest_file = records.data_digest(options[0]), os.path.join(run_dir, "data_digest")
    if os.path.exists(digest_file) and open(digest_file, encoding="utf-8").read().strip() != digest:
        raise OutlayersConfigError(f"{run_dir} was trained on other data than '{options[0]}' holds now (digest "
                                   f"{open(digest_file, encoding='utf-8').read().strip()}, now {digest}); prepare "
                                   "the data as before, or remove that directory to start afresh")
    write_text(digest_file, digest + "\n")
    files, files_file = records.file_digests(options), os.path.join(run_dir, "file_digests.json")
    if os.path.exists(files_file):
        before = records.read_json(files_file)
        if not isinstance(before, dict):
            raise OutlayersConfigError(f"{files_file} is damaged (not the JSON object of file digests this runner "
                                       f"writes); remove {run_dir} (or give another --work) to start afresh")
        changed = sorted(p for p in files if before.get(p) not in (None, files[p]))
        if changed:
            raise OutlayersConfigError(f"{run_dir} was trained with another '{changed[0]}' than the one there now "
                                       f"(digest {before[changed[0]]}, now {files[changed[0]]}); restore that file, "
                                       "or remove that directory to start afresh")
    write_text(files_file, json.dumps(files, sort_keys=True) + "\n")
    log_path = os.path.join(run_dir, "train.log")
    cmd = train_command(options, run_dir)
    last_ckpt = os.path.join(run_dir, "checkpoint_last.pt")
    resumed = os.path.exists(last_ckpt)
    # fairseq forgets its --patience count on a resume: carry it over from the log (patience.py), and do not train
    # at all when the protocol had already stopped the run (killed between fairseq's stop and the record)
    saved = checkpoint_state(last_ckpt) if resumed else None
    state = (patience.early_stopping_state(log_path, row.validate, saved["epoch"])
             if resumed and os.path.exists(log_path) and row.budget is None else None)
    if row.budget is not None and saved is not None and saved["updates"] > row.budget:
        raise OutlayersConfigError(f"{last_ckpt} has trained {saved['updates']} updates, more than the row's budget "
                                   f"of {row.budget}; remove {run_dir} (or give another --work) to run this row")
    if (state is not None and state[1] >= row.stopping_patience(s.patience)) or (
            finished_updates is not None and saved is not None and saved.get("updates") == finished_updates) or (
            row.budget is not None and saved is not None and saved["updates"] == row.budget):
        seconds = 0.0
    else:
        seconds = fairseq_runs.run_training(cmd if state is None else patience.command(cmd, state), log_path, run_dir,
                                            prog="ledger", append=resumed,
                                            label=f"{row.training_name()} seed {seed}: ", env=s.env)
    return {"seconds": seconds, "data_digest": digest, "file_digests": files, "resumed": resumed, "command": cmd,
            "log": log_path}


def run(row: LedgerRow, seed: int, s: Settings) -> Tuple[Dict, bool]:
    """(record, True when it was already in the ledger). One call at a time per row and seed (a lock in its own run
    directory): a teacher's own run and a student that needs it (``--jobs N``) never both record it."""
    options = row_options(row, seed, s.patience, s.max_epoch, s.beam)
    done = records.recorded(s.ledger, row.name, seed, options, row.path, after=row.after)
    if done is not None:
        return add_decodes(row, done, s), True
    own = os.path.join(s.work, f"{row.name}.seed{seed}")
    os.makedirs(own, exist_ok=True)
    with _locked(own, ".run.lock"):
        return _run_locked(row, seed, s, options)


def _run_locked(row: LedgerRow, seed: int, s: Settings, options: List[str]) -> Tuple[Dict, bool]:
    done = records.recorded(s.ledger, row.name, seed, options, row.path, after=row.after)
    if done is not None:  # recorded while this call waited for the lock
        return add_decodes(row, done, s), True
    commit = git_commit()  # the code this call runs (read now: the checkout may change while it trains)
    train_dir = os.path.join(s.work, f"{row.training_name()}.seed{seed}")
    # a step row's training is its parent's: the parent's record (if any) says when it is finished
    parent = records.recorded(s.ledger, row.trained_as, seed, options, row.path) if row.trained_as else None
    train_options, teacher_facts = options, None
    if row.teacher is not None:  # the first stage: the teacher's model of this seed, exported (teacher.py)
        vectors, teacher_facts = teacher.prepare(row, seed, s, train_dir, run=run, train=train)
        train_options = with_vectors(options, vectors)
    trained = train(row, seed, s, train_options, train_dir, parent["updates"] if parent else None)
    seconds, digest, files, cmd, log_path = (trained[k] for k in ("seconds", "data_digest", "file_digests",
                                                                  "command", "log"))
    last_ckpt, best_ckpt = (os.path.join(train_dir, f"checkpoint_{k}.pt") for k in ("last", "best"))
    if row.budget is not None:  # a quick row: its last checkpoint is the model
        best_ckpt = last_ckpt
    last, best = checkpoint_state(last_ckpt), checkpoint_state(best_ckpt)
    run_dir, test_ckpt, after = os.path.join(s.work, f"{row.name}.seed{seed}"), best_ckpt, None
    if row.after:  # the step, on the selected checkpoint, into this row's own directory
        os.makedirs(run_dir, exist_ok=True)
        test_ckpt = os.path.join(run_dir, "checkpoint_after.pt")
        log(f"{row.name} seed {seed}: {shlex.join(row.after)} on {best_ckpt}", "ledger")
        start = time.time()
        figures = steps.apply_step(row.after, best_ckpt, test_ckpt, row.data_bin, gpus.torch_device(s.env))
        after = {"step": row.after, "trained_in": os.path.basename(train_dir),
                 "checkpoint": os.path.basename(best_ckpt),
                 "seconds": round(time.time() - start, 1), "figures": figures}

    src_lang, tgt_lang = row.languages()
    prep = Preparation.from_data(row.data_bin, src_lang, tgt_lang)
    # the row's direction for fairseq-generate too (it would read the data directory's pair otherwise)
    direction = ["--source-lang", src_lang, "--target-lang", tgt_lang] if src_lang else []
    tests, hyps, refs = {}, {}, {}
    sets = [(s.test_name, None, s.test_ref)] + [(n, src, ref) for n, (src, ref) in sorted(s.extra_sets.items())]
    beam = row.testing_beam(s.beam)
    scale, scale_validation = None, None
    if row.scales:  # the score scale of the test beam, chosen on the validation split
        scale, scale_validation = choose_scale(row, test_ckpt, run_dir, prep, beam, direction, s)
    scaled = direction + (["--model-overrides", repr({decode_scale(options): scale})] if scale is not None else [])
    for name, src, ref in sets:
        tests[name], _, hyps[name], refs[name] = evaluate(prep, row.data_bin, test_ckpt,
                                                       os.path.join(run_dir, f"eval-{name}"), ref, src, beam,
                                                       s.lenpen, s.batch_size, extra=scaled, env=s.env)
        tests[name].update(source=src, reference_file=ref)
        tests[name]["generate"] = " ".join(shlex.quote(c) for c in tests[name]["generate"])
    as_trained = None
    if after is not None:  # the same test of the checkpoint before the step (its own record when it is a row's)
        name, _, ref = sets[0]
        before, _, before_hyps, _ = evaluate(prep, row.data_bin, best_ckpt,
                                             os.path.join(run_dir, f"eval-{name}-as-trained"), ref, None, beam,
                                             s.lenpen, s.batch_size, extra=scaled, env=s.env)
        as_trained = {name: before_hyps}
        after["as_trained"] = {name: {k: before.get(k) for k in ("sacrebleu", "tokenized_bleu")}}
        if parent is not None:  # the checkpoint the parent's record was made with (else: retrained, and said so)
            after["parent_record_matches"] = (parent["best_updates"] == best["updates"] and parent["test"].get(
                name, {}).get("sacrebleu") == before.get("sacrebleu"))
            if not after["parent_record_matches"]:
                log(f"warning: {row.name} seed {seed}: {best_ckpt} is not the model {row.trained_as}'s record was "
                    f"made with (best at update {best['updates']} vs {parent['best_updates']}, {name} "
                    f"{before.get('sacrebleu')} vs {parent['test'].get(name, {}).get('sacrebleu')}): compare the "
                    "two rows with that in mind", "ledger")
    validation = {"metric": row.validate, "reason": row.validate_reason,
                  "patience": row.stopping_patience(s.patience), "max_epoch": s.max_epoch, "best": best["best"]}
    if row.budget is not None:
        validation = {"metric": "budget", "budget": row.budget, "best": None,
                      "bleu": _valid_bleu(row, test_ckpt, run_dir, prep, beam, direction, s)}
    desc, device = machine(s.env)
    record = {
        "row": row.name, "seed": seed, "table": row.table, "method": row.method, "baseline": row.baseline,
        "row_file": _relative_to_cwd(row.path),
        "description": row.description,
        "validation": validation,
        "options": options,
        "command": " ".join(shlex.quote(c) for c in cmd),
        **({"after": after} if after is not None else {}),
        **({"teacher": teacher_facts} if teacher_facts is not None else {}),
        "preparation": prep.describe(), "data_digest": digest, "file_digests": files,
        "commit": commit, "machine": desc, "device": device,
        "epochs": last["epoch"], "updates": last["updates"], "best_epoch": best["epoch"],
        "best_updates": best["updates"], "wall_seconds": round(seconds, 1),
        "training_seconds": last["training_seconds"], "resumed": trained["resumed"],
        "tokens_per_second": finite(fairseq_runs.training_speed(log_path)),
        "curve": curve(log_path),
        "params": fairseq_runs.parameter_counts(test_ckpt, prog="ledger"),
        "decoding": {"beam": beam, "lenpen": s.lenpen, "max_len_a": 1.2, "max_len_b": 10,
                     **({"scale": scale, "scale_validation": scale_validation} if row.scales else {})},
        "lowercase": prep.lowercase,
        "test": tests,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    records.write_record(s.ledger, record, hyps, refs, as_trained)
    return add_decodes(row, record, s), False


def _valid_bleu(row: LedgerRow, ckpt: str, run_dir: str, prep: Preparation, beam: int, direction: List[str],
                s: Settings) -> Optional[float]:
    """sacreBLEU of ``ckpt`` on the data's validation split at ``beam`` against ``s.valid_ref`` (None without one)."""
    if not s.valid_ref:
        return None
    scores, _, _, _ = evaluate(prep, row.data_bin, ckpt, os.path.join(run_dir, "eval-valid"), s.valid_ref, None, beam,
                               s.lenpen, s.batch_size, subset="valid", extra=direction, env=s.env)
    return scores["sacrebleu"]


def summary(record: Dict, test_name: str) -> str:
    scores, v = record["test"].get(test_name, {}), record["validation"]
    valid = (f"validation BLEU {v.get('bleu')}" if v["metric"] == "budget"
             else f"best valid {v['metric']} {v['best']}")
    return (f"{record['row']} seed {record['seed']}: sacreBLEU {scores.get('sacrebleu')} (tokenised "
            f"{scores.get('tokenized_bleu')}), {record['epochs']} epochs, {record['updates']} updates, {valid}")

