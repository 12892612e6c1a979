"""python -m fairseq_outlayers.ledger {run,render,compare}: converged runs into the ledger, tables out of it.

    python -m fairseq_outlayers.ledger run --rows "configs/ledger/multi30k-fixed/*.args" --seeds 1 2 3 \\
        [--patience 5] [--max-epoch 50] [--test-ref "work/multi30k/raw/test_2016_flickr.{tgt}"] \\
        [--test-set flickr2017=SRC_FILE,REF_FILE ...] [--ledger docs/results/runs] [--work work/ledger]
    python -m fairseq_outlayers.ledger render [--ledger docs/results/runs] [--out docs/results/ledger.md]
    python -m fairseq_outlayers.ledger compare tiny-shared-private tiny-tied [--seeds 1 2 3 | --all-seeds] \\
        [--ledger docs/results/runs]
    python -m fairseq_outlayers.ledger status [--rows "configs/ledger/*/*.args"] [--seeds 1 2 3]

``run`` trains every row with the first seed before any row with the next one (``--jobs N``: N at a time, started
in that order), skips each run already recorded (and stops, before training anything, when a record was made with
other options, or when a row's data directory now holds other data than its table's records were trained on:
``records.check_data``), and writes one record per finished run; a failed run is reported and the others go on.
On CUDA each run sees one GPU (``gpus.py``: fairseq would otherwise train one run data-parallel over all of them,
with a larger batch than the row's records), the run slots taking the visible GPUs in turn.
``render`` writes the tables from the records alone, and beside them the plots (SVG: validation per epoch, test
score against trained parameters) of each table; the tables count the protocol's seeds (``--seeds``, 1-3), and
records of further seeds go into a table of their own under each table. ``compare`` sets any two rows of a table
against each other (the tables compare each row with its own baseline only), over the protocol's seeds unless
given ``--seeds`` or ``--all-seeds``. ``status`` says for every row x seed whether it is
recorded, partly trained (its epoch and best validation so far: ``run`` resumes it) or not started.
"""
import argparse
import concurrent.futures
import dataclasses
import glob
import os
import shlex
import sys

from fairseq_outlayers.errors import OutlayersConfigError

LEDGER = "docs/results/runs"


def _run(args) -> int:
    from fairseq_outlayers.fairseq_runs import log
    from fairseq_outlayers.evaluation.scoring import parse_raw_sets
    from fairseq_outlayers import gpus
    from fairseq_outlayers.ledger import records
    from fairseq_outlayers.ledger import rows as ledger_rows
    from fairseq_outlayers.ledger import runner

    rows = [ledger_rows.read_ledger_row(f, args.data) for f in _row_files(args.rows)]
    for warning in ledger_rows.check_rows(rows):
        log(f"warning: {warning}", "ledger")
    for row in rows:
        if not args.dry_run and not os.path.isdir(row.data_bin):
            raise OutlayersConfigError(f"{row.path}: data '{row.data_bin}' is not a directory; prepare it first "
                                       "(scripts/prepare-multi30k.sh)")
    settings = runner.Settings(ledger=args.ledger, work=args.work, test_ref=args.test_ref, test_name=args.test_name,
                               extra_sets=parse_raw_sets(args.test_set), patience=args.patience,
                               max_epoch=args.max_epoch, beam=args.beam, lenpen=args.lenpen,
                               batch_size=args.batch_size)
    test_refs = {} if args.dry_run else {row.path: _test_ref(args.test_ref, row) for row in rows}
    # every row with a seed before the next seed; step rows (``# from:``) after every training row, so that with
    # --jobs N none waits on the lock of a training its parent row is still running
    runs = ([(row, seed) for seed in args.seeds for row in rows if not row.trained_as]
            + [(row, seed) for seed in args.seeds for row in rows if row.trained_as])
    if args.dry_run:
        for row, seed in runs:
            options = ledger_rows.row_options(row, seed, args.patience, args.max_epoch, args.beam)
            step = f" (in work/{row.training_name()}.seed{seed}), then {shlex.join(row.after)}" if row.after else ""
            print(f"{row.name} seed {seed}: fairseq-train {shlex.join(options)}{step}")
        return 0
    existing = records.read_records(args.ledger) if os.path.isdir(args.ledger) else []
    digests, warned = {}, set()
    for row, seed in runs:  # a record made with other options or on other data stops everything before training
        options = ledger_rows.row_options(row, seed, args.patience, args.max_epoch, args.beam)
        if records.recorded(args.ledger, row.name, seed, options, row.path, after=row.after) is None:
            digest = digests.setdefault(options[0], records.data_digest(options[0]))
            records.check_data(existing, row.table, options[0], digest, row.path)
            for warning in records.check_files(existing, row.table, row.name, records.file_digests(options), row.path):
                if warning not in warned:
                    warned.add(warning)
                    log(f"warning: {warning}", "ledger")
    failed = []
    free = gpus.slots(args.jobs, gpus.visible_gpus())  # one GPU per run: fairseq would train on all it sees

    def one(row, seed):
        gpu = free.get() if free is not None else None
        env = gpus.slot_env(gpu)
        try:
            record, skipped = runner.run(row, seed, dataclasses.replace(settings, test_ref=test_refs[row.path],
                                                                        env=env))
        except OutlayersConfigError:
            raise  # bad input: stop
        except (SystemExit, Exception) as exc:  # one failed run must not stop the others
            failed.append(f"{row.name} seed {seed}")
            log(f"{row.name} seed {seed} FAILED: {exc}", "ledger")
            return
        finally:
            if gpu is not None:
                free.put(gpu)
        log(("recorded already: " if skipped else "recorded: ") + runner.summary(record, args.test_name), "ledger")

    if args.jobs == 1:
        for row, seed in runs:
            one(row, seed)
    else:  # N runs at once, started in the same order; each is its own fairseq-train process
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for future in [pool.submit(one, row, seed) for row, seed in runs]:
                future.result()
    if failed:
        print(f"ledger: {len(failed)} run(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _row_files(patterns):
    return sorted(set(f for p in patterns for f in (glob.glob(p) or [p])))


def _status(args) -> int:
    from fairseq_outlayers.ledger import rows as ledger_rows
    from fairseq_outlayers.ledger.status import status_lines

    rows = [ledger_rows.read_ledger_row(f, args.data) for f in _row_files(args.rows)]
    ledger_rows.check_rows(rows)
    print("\n".join(status_lines(rows, args.seeds, args.ledger, args.work, args.patience, args.max_epoch,
                                 args.beam)))
    return 0


def _test_ref(template: str, row) -> str:
    """The raw test reference of a row: ``{tgt}`` in the template is the row's target language (its
    ``--target-lang``, else the target of its data directory); a plain path must end in that language."""
    from fairseq_outlayers.rawtext import data_languages

    target = row.languages()[1]
    if "{tgt}" in template:
        ref = template.replace("{tgt}", target or data_languages(row.data_bin)[1])
    else:
        ref, suffix = template, os.path.splitext(template)[1].lstrip(".")
        if target and len(suffix) == 2 and suffix != target:
            raise OutlayersConfigError(f"{row.path} translates into '{target}' but --test-ref '{ref}' reads as "
                                       f"'{suffix}'; run the rows of each direction with their own --test-ref, "
                                       "or write the language as {tgt} in it")
    if not os.path.isfile(ref):
        raise OutlayersConfigError(f"{row.path}: test reference '{ref}' does not exist; give the raw reference of "
                                   "the data's test split with --test-ref (scripts/prepare-multi30k.sh writes "
                                   "work/multi30k/raw/)")
    return ref


def _render(args) -> int:
    from fairseq_outlayers.ledger.render import render
    from fairseq_outlayers.outfiles import write_text

    figures = None if args.out == "-" else {}
    text = render(args.ledger, seeds=args.seeds, test=args.test_name, title=args.title, figures=figures)
    if args.out == "-":
        sys.stdout.write(text + "\n")
    else:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        for name, svg in sorted(figures.items()):
            write_text(os.path.join(os.path.dirname(args.out), name), svg)
            print(f"wrote {os.path.join(os.path.dirname(args.out), name)}")
        write_text(args.out, text + "\n")
        print(f"wrote {args.out}")
    return 0


def _compare(args) -> int:
    from fairseq_outlayers.ledger.render import compare_line

    print(compare_line(args.ledger, args.row, args.other, args.test_name,
                       seeds=None if args.all_seeds else args.seeds))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fairseq_outlayers.ledger",
                                     description=__doc__.strip().splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="train and record every row x seed not recorded yet")
    p.add_argument("--rows", nargs="+", required=True, help="ledger row files or glob patterns (*.args)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="every row runs with the first "
                   "seed before any row runs with the next")
    p.add_argument("--data", default=None, help="data of a row that names no --data-bin")
    p.add_argument("--test-ref", default="work/multi30k/raw/test_2016_flickr.{tgt}",
                   help="raw (untokenised) reference of the data's test split; {tgt} is each row's target "
                   "language, so rows of both directions run in one call")
    p.add_argument("--test-name", default="test2016", help="name of that test set in the records")
    p.add_argument("--test-set", nargs="*", default=[], metavar="NAME=SRC_FILE,REF_FILE",
                   help="extra raw test sets, prepared with each row's own tokeniser, case and BPE")
    p.add_argument("--patience", type=int, default=5, help="fairseq --patience: validations without improvement "
                   "(a row's '# patience: N' overrides it)")
    p.add_argument("--max-epoch", type=int, default=50, help="the ceiling on training epochs")
    p.add_argument("--beam", type=int, default=5, help="beam of validation BLEU and of the test translations")
    p.add_argument("--lenpen", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--ledger", default=LEDGER, help="where records and hypotheses are written (committed)")
    p.add_argument("--work", default="work/ledger", help="checkpoints and logs (not committed)")
    p.add_argument("--jobs", type=int, default=1, help="train N runs at once (one fairseq-train process each; "
                   "on a CPU give each OMP_NUM_THREADS=cores/N; on CUDA each run sees one GPU, the N slots taking the "
                   "visible GPUs in turn: several small runs share one GPU well)")
    p.add_argument("--dry-run", action="store_true", help="print each run's fairseq-train options; train nothing")
    p.set_defaults(func=_run)
    p = sub.add_parser("render", help="write the Markdown tables from the records alone")
    p.add_argument("--ledger", default=LEDGER)
    p.add_argument("--out", default="docs/results/ledger.md", help="Markdown file ('-': standard output, "
                   "no plots); the plots are written beside it")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="the protocol's seeds, which every row "
                   "should have and the tables count (records of other seeds get a table of their own under each "
                   "table, where every recorded seed counts)")
    p.add_argument("--test-name", default="test2016")
    p.add_argument("--title", default="Results ledger: converged runs")
    p.set_defaults(func=_render)
    p = sub.add_parser("compare", help="any two rows of a table: means, difference, paired bootstrap p-value")
    p.add_argument("row", help="a row name (e.g. tiny-shared-private)")
    p.add_argument("other", help="the row it is compared with (e.g. tiny-tied)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="the seeds counted (the tables' "
                   "protocol seeds by default)")
    p.add_argument("--all-seeds", action="store_true", help="count every recorded seed")
    p.add_argument("--ledger", default=LEDGER)
    p.add_argument("--test-name", default="test2016")
    p.set_defaults(func=_compare)
    p = sub.add_parser("status", help="every row x seed: recorded, partly trained (resumable) or not started")
    p.add_argument("--rows", nargs="+", default=["configs/ledger/*/*.args"], help="row files or glob patterns")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--data", default=None, help="data of a row that names no --data-bin")
    p.add_argument("--ledger", default=LEDGER)
    p.add_argument("--work", default="work/ledger", help="where run sets its partial runs")
    p.add_argument("--patience", type=int, default=5, help="as given to run (the options a record is checked "
                   "against)")
    p.add_argument("--max-epoch", type=int, default=50)
    p.add_argument("--beam", type=int, default=5)
    p.set_defaults(func=_status)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    for option in ("patience", "max_epoch", "beam", "jobs"):
        if getattr(args, option, 1) < 1:
            raise SystemExit(f"ledger: --{option.replace('_', '-')} must be a positive integer")
    try:
        return args.func(args)
    except OutlayersConfigError as e:
        print(f"ledger: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
