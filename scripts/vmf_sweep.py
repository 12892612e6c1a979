"""The continuous-output sweep of docs/continuous-outputs.md: quick rows trained by the results ledger's runner and
set in one table with the continuous criterions' validation figures (κ, cos, nn_acc, κ alarms).

    python scripts/vmf_sweep.py --rows "configs/vmf-sweep/*.args" --seeds 1 2 3 [--jobs 2 --threads 1]
    python scripts/vmf_sweep.py --render-only --rows "configs/vmf-sweep/*.args" --seeds 1 2 3

A row file is a row of the ledger's format (``fairseq_outlayers/lab/ledger/rows.py``): ``# base:
configs/demo-base.args`` (the demo Transformer), ``# budget: 800`` updates, ``# beam: 1`` (nearest-neighbour
decoding) and ``# decodes: 5 5@40`` (beam 5, and beam 5 with score scale 40 for continuous rows). Each run is the
ledger's (``ledger/runner.py``): ``fairseq-train``, the last checkpoint translated on the test split at the row's
beam and its decodes and on the validation split at the row's beam (the figure rows are chosen by), scored with
sacreBLEU against the raw references, recorded in ``--records``/runs. For rows without records of the first
format (below), ``python -m fairseq_outlayers.lab.ledger run --rows ... --ledger docs/continuous-sweep/runs --work
work/vmf-sweep`` makes the same runs; it does not read those first records, so it would train their rows again.

The sweep's first records (``--records``/ROW.seedN.json, one JSON object per run, from before the sweep ran on the
ledger's runner) are read as they are: a row x seed with one is not run again. ``--jobs N`` trains N runs at once
(``--threads`` torch threads each; on CUDA each sees one GPU: ``fairseq_outlayers/lab/gpus.py``). The table (mean
over seeds, then each seed) is written to ``OUT/sweep.md`` and ``OUT/sweep.json`` after every run.
"""
import argparse
import concurrent.futures
import dataclasses
import glob
import json
import os
import platform
import shlex
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from fairseq_outlayers import value_checks  # noqa: E402
from fairseq_outlayers.errors import OutlayersConfigError  # noqa: E402
from fairseq_outlayers.lab import compare, fairseq_runs, gpus  # noqa: E402
from fairseq_outlayers.lab.ledger import records, runner  # noqa: E402
from fairseq_outlayers.lab.ledger.rows import decode_key, read_row  # noqa: E402

#: the validation figures read from the last validation of a run
VALID_FIELDS = ("loss", "cos", "norm", "nn_acc", "kappa_low", "kappa_high")
#: the name of the test split in the records
TEST = "test2016"
#: the budget of every run of the sweep's first records
LEGACY_BUDGET = 800


def legacy_record(records_dir, row, seed):
    """The sweep's first-format record of ``row`` x ``seed`` (its options the row file's own, trained
    ``LEGACY_BUDGET`` updates), or None."""
    path = os.path.join(records_dir, f"{row.name}.seed{seed}.json")
    if not os.path.exists(path) or row.budget != LEGACY_BUDGET:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:  # unreadable, not UTF-8, not JSON
        raise SystemExit(f"vmf_sweep: {path} cannot be read as a sweep record ({e}); restore it from git") from None
    own = " ".join(read_row(row.path)[1])
    if meta.get("args") != own:
        raise SystemExit(f"vmf_sweep: {path} was run with other options ('{meta.get('args')}') than {row.path} "
                         f"gives ('{own}'); rename the row or move the record away")
    return meta


def sweep_figures(record):
    """A ledger record as the table reads a run: {"bleu": {decode: sacreBLEU}, "valid": {last validation's
    figures}, "valid_bleu": {beam: sacreBLEU}, "speed": tokens/s}."""
    beam = str(record["decoding"]["beam"])
    bleu = {beam: record["test"][TEST]["sacrebleu"], **(record.get("decodes") or {}).get(TEST, {})}
    last = (record.get("curve") or [{}])[-1]
    valid_bleu = record["validation"].get("bleu")
    return {"row": record["row"], "seed": record["seed"], "bleu": bleu,
            "valid": {k: last[k] for k in VALID_FIELDS if last.get(k) is not None},
            "valid_bleu": {} if valid_bleu is None else {beam: valid_bleu},
            "speed": record.get("tokens_per_second")}


def run_one(row, seed, settings, free=None):
    """One row x seed through the ledger's runner; ``free``: the GPU slots (``gpus.slots``), one taken for this
    run's fairseq processes and given back at its end, or None."""
    gpu = free.get() if free is not None else None
    try:
        record, _ = runner.run(row, seed, dataclasses.replace(settings, env=gpus.slot_env(gpu)))
        return sweep_figures(record)
    finally:
        if gpu is not None:
            free.put(gpu)


def _mean(values):
    """Mean of the values known: None and NaN (e.g. the speed of a run resumed after its last update) are left out."""
    values = [v for v in values if v is not None and v == v]
    return sum(values) / len(values) if values else None


def _fmt(v, digits=2):
    return "—" if v is None else f"{v:.{digits}f}"


def table(rows, metas, seeds, beams, scaled=(), valid_beams=()):
    """Markdown table: per row the mean over the seeds that finished (and each seed's BLEU); the validation BLEU
    (``valid_beams``) first, as rows are chosen by it."""
    keys = [str(b) for b in beams] + [decode_key(b, s) for b, s in scaled]
    names = [f"beam {b}" for b in beams] + [f"beam {b}, scale {s:g}" for b, s in scaled]
    head = (["row"] + [f"valid BLEU beam {b} (mean)" for b in valid_beams] + [f"BLEU {n} (mean)" for n in names]
            + [f"{n} per seed" for n in names]
            + ["κ (mean ‖ê‖)", "cos", "nn_acc %", "κ low %", "κ high %", "train tok/s"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        runs = [metas.get((row["name"], s)) for s in seeds]
        done = [r for r in runs if r]
        cells = [row["name"]]
        for b in valid_beams:
            cells.append(_fmt(_mean([r.get("valid_bleu", {}).get(str(b)) for r in done])))
        for k in keys:
            cells.append(_fmt(_mean([r["bleu"].get(k) for r in done])))
        for k in keys:
            cells.append(" / ".join(_fmt(r["bleu"].get(k)) if r else "missing" for r in runs))
        for key, digits in (("norm", 1), ("cos", 3), ("nn_acc", 1), ("kappa_low", 1), ("kappa_high", 1)):
            cells.append(_fmt(_mean([r["valid"].get(key) for r in done]), digits))
        cells.append(_fmt(_mean([r["speed"] for r in done]), 0))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(path, rows, metas, args, beams, scaled, valid_beams):
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip() or "unknown"
    md = [f"# Continuous-output sweep (seeds {' '.join(map(str, args.seeds))})", "",
          f"Date {time.strftime('%Y-%m-%d')}, commit {commit}, {platform.machine()}, {os.cpu_count()} CPU cores, "
          f"{args.jobs} run(s) at a time with {args.threads} torch thread(s) each.", "",
          f"BLEU: sacreBLEU on detokenised output against `{args.test_ref}`; validation BLEU against "
          f"`{args.valid_ref}`. Validation figures (κ, cos, nn_acc, κ alarms) are the last validation of each run, "
          f"averaged over seeds. Records: `{args.ledger}` (and the sweep's first records in `{args.records}`).", "",
          table(rows, metas, args.seeds, beams, scaled, valid_beams), "", "Rows:", ""]
    md += [f"- **{r['name']}**: `{r['args']}` ({r['budget']} updates)" for r in rows]
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    os.replace(tmp, path)
    json_path = os.path.splitext(path)[0] + ".json"
    with open(json_path + ".tmp", "w") as f:
        json.dump([m for m in metas.values()], f, indent=2)
    os.replace(json_path + ".tmp", json_path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--rows", nargs="+", required=True, help="row files or glob patterns (*.args)")
    parser.add_argument("--data-bin", default="work/multi30k/data-bin/de-en-word",
                        help="default data of a row that names none")
    parser.add_argument("--raw-dir", default="work/multi30k/raw")
    parser.add_argument("--test-prefix", default="test_2016_flickr")
    parser.add_argument("--valid-prefix", default="val", help="raw validation file name without the language")
    parser.add_argument("--seeds", type=value_checks.NON_NEGATIVE_INT, nargs="+", default=[1, 2])
    parser.add_argument("--max-update", type=value_checks.POSITIVE_INT, default=None,
                        help="every row's budget (default: each row's '# budget: N')")
    parser.add_argument("--lenpen", type=value_checks.FINITE, default=1.0)
    parser.add_argument("--batch-size", type=value_checks.POSITIVE_INT, default=128)
    parser.add_argument("--base-args", default=None, help="fairseq-train options of every row (default: a row's "
                        "'# base: FILE', else configs/demo-base.args)")
    parser.add_argument("--jobs", type=value_checks.POSITIVE_INT, default=1, help="runs trained at the same time")
    parser.add_argument("--threads", type=value_checks.POSITIVE_INT, default=None, help="torch threads per run (default: "
                        "cores/jobs)")
    parser.add_argument("--out", default="work/vmf-sweep", help="checkpoints, logs, translations, sweep.md")
    parser.add_argument("--records", default=os.path.join(ROOT, "docs", "continuous-sweep"),
                        help="the sweep's records: the first ones in it, the ledger records in its runs/ "
                             "(committed: a rerun skips what is recorded)")
    parser.add_argument("--render-only", action="store_true", help="write the table from the records; train nothing")
    args = parser.parse_args(argv)

    args.test_ref = os.path.join(args.raw_dir, f"{args.test_prefix}.en")
    args.valid_ref = os.path.join(args.raw_dir, f"{args.valid_prefix}.en")
    args.ledger = os.path.join(args.records, "runs")
    if not args.render_only:
        for path in (args.test_ref, args.valid_ref):
            if not os.path.isfile(path):
                parser.error(f"reference file '{path}' does not exist; run scripts/prepare-multi30k.sh first")
    files = sorted(set(f for p in args.rows for f in (glob.glob(p) or [p])))
    for f in files:
        if not os.path.isfile(f):
            parser.error(f"row file '{f}' does not exist")
    try:
        rows = compare.quick_rows(files, args.data_bin, args.max_update,
                                  shlex.split(args.base_args) if args.base_args else None)
    except OutlayersConfigError as e:
        parser.error(str(e))
    for row in rows:
        if row.budget is None:
            parser.error(f"{row.path}: a sweep row needs '# budget: N' (or give --max-update)")
        if row.beam is None:
            row.beam = 1  # the paper's nearest-neighbour decoding
    for row in rows:
        if not args.render_only and not os.path.isdir(row.data_bin):
            parser.error(f"{row.path}: data '{row.data_bin}' is not a directory; run scripts/prepare-multi30k.sh "
                         "--word-target first")
    if len({r.name for r in rows}) != len(rows):
        parser.error("two row files have the same name (after the NN- prefix)")
    threads = args.threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    os.environ.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    os.makedirs(args.out, exist_ok=True)
    settings = runner.Settings(ledger=args.ledger, work=args.out, test_ref=args.test_ref, test_name=TEST,
                               lenpen=args.lenpen, batch_size=args.batch_size, valid_ref=args.valid_ref)
    beams = sorted({r.decoding_beam(1) for r in rows} | {b for r in rows for b, sc in r.decodes if sc is None})
    scaled = sorted({(b, sc) for r in rows for b, sc in r.decodes if sc is not None})
    valid_beams = sorted({r.decoding_beam(1) for r in rows})
    shown = [{"name": r.name, "args": " ".join(read_row(r.path)[1]), "budget": r.budget} for r in rows]
    report = os.path.join(args.out, "sweep.md")
    metas, jobs = {}, []
    for seed in args.seeds:  # every row with the first seed first
        for row in rows:
            old = legacy_record(args.records, row, seed)
            if old is not None:
                metas[(row.name, seed)] = old
            elif args.render_only:
                path = os.path.join(args.ledger, f"{row.name}.seed{seed}.json")
                if os.path.exists(path):
                    try:
                        metas[(row.name, seed)] = sweep_figures(records.load_record(path))
                    except OutlayersConfigError as e:
                        raise SystemExit(f"vmf_sweep: error: {e}") from None
            else:
                jobs.append((row, seed))
    if jobs:  # a record made with other options or on other data: one line, before anything trains
        try:
            for warning in runner.check_before_training(jobs, settings):
                fairseq_runs.log(f"warning: {warning}")
        except OutlayersConfigError as e:
            raise SystemExit(f"vmf_sweep: error: {e}") from None
    free = gpus.slots(args.jobs, gpus.visible_gpus())  # one GPU per run: fairseq would train on all it sees
    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, row, seed, settings, free): (row.name, seed) for row, seed in jobs}
        for fut in concurrent.futures.as_completed(futures):  # results are gathered in this thread only
            key = futures[fut]
            try:
                metas[key] = fut.result()
            except (SystemExit, Exception) as exc:  # one failed row must not stop the others
                failed.append(key)
                fairseq_runs.log(f"{key[0]} seed {key[1]} FAILED: {exc}")
            write_report(report, shown, metas, args, beams, scaled, valid_beams)
    write_report(report, shown, metas, args, beams, scaled, valid_beams)
    print(table(shown, metas, args.seeds, beams, scaled, valid_beams))
    fairseq_runs.log(f"wrote {report}")
    if failed:
        raise SystemExit(f"vmf_sweep: {len(failed)} run(s) failed: {failed}")


if __name__ == "__main__":
    main()
