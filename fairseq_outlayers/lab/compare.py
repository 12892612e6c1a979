"""The demo table: every row trained at the same short budget, translated, scored, set in one table.

    python -m fairseq_outlayers.lab.compare --data-bin work/multi30k/data-bin/de-en \\
        --raw-dir work/multi30k/raw --rows configs/demo/*.args --out work/demo

Each row file is a row of the results ledger's format (``ledger/rows.py``); here every row is a quick row of
``--max-update`` updates (no early stopping, the last checkpoint tested) and a row without ``# base: FILE`` takes
its shared options from ``--base-args`` (default: ``configs/demo-base.args``, the demo Transformer). The runs are the
ledger's own (``ledger/runner.py``: ``fairseq-train --user-dir ...`` -> ``fairseq-generate`` -> sacremoses
detokenisation -> sacreBLEU against the raw references), recorded in ``OUT/records`` with their checkpoints in
``OUT/ROW.seedN``: a finished run is reused, so an interrupted demo resumes where it stopped (every row with the
first seed before any with the second). ``--jobs N`` runs N at once (``slots.py``: on a CPU each with the cores / N
threads, on CUDA one GPU each; by default one per GPU, else one per core), the longest rows first (``start_order``);
the table keeps the rows' order and figures whichever run ends first, and a failed run is named under it while the
others finish. The table gives BLEU (sacreBLEU, with its signature), total / trained /
embedding / output-layer parameters, training target tokens/s and wall time; it is printed and written to
``OUT/results.md`` (and ``OUT/results.json``). ``python -m fairseq_outlayers.lab.ledger render --ledger OUT/records
--out -`` gives the same runs with the ledger's statistics.
"""
import argparse
import dataclasses
import glob
import json
import logging
import os
import platform
import shlex
import time

from fairseq_outlayers import value_checks
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.lab import slots
from fairseq_outlayers.lab.fairseq_runs import log
from fairseq_outlayers.lab.ledger import runner
from fairseq_outlayers.lab.ledger.records import read_records
from fairseq_outlayers.lab.ledger.rows import read_ledger_row, read_options
from fairseq_outlayers.outfiles import check_output_path, write_text

#: the rows' shared options, from the repository root (a checkout: ``make install`` installs it editable)
DEMO_BASE_FILE = os.path.join("configs", "demo-base.args")


def demo_base_args(path=DEMO_BASE_FILE):
    """The fairseq-train options every row shares by default: ``configs/demo-base.args``, found from the working
    directory (run from the repository's root, as the Makefile does) unless ``path`` names another file."""
    if not os.path.isfile(path):
        raise SystemExit(f"compare: {path} (the rows' shared options) does not exist; run from the repository's "
                         "root or give --base-args")
    return read_options(path)


def quick_rows(row_files, data_bin, budget, base_args=None):
    """The ``LedgerRow`` of each row file as a quick row of ``budget`` updates; ``base_args`` (a list) replaces
    every row's base, else a row without ``# base:`` takes ``configs/demo-base.args``."""
    rows = []
    for path in row_files:
        row = read_ledger_row(path, data_bin, budget=budget)
        if base_args is not None:
            row.base_args = list(base_args)
        elif not row.base_args:
            row.base_args = demo_base_args()
        rows.append(row)
    return rows


def format_table(rows, converged=None):
    """The table; with ``converged`` ({row name: figure}, from the results ledger: ``ledger_figures``) a last column
    gives, beside each quick row, the ledger's converged figure for the same model, data and method, or "none yet"."""
    head = ("| method | seeds | BLEU | total params | trained params | embedding | output layer | "
            "train tok/s | train time (s) |")
    columns = 9
    if converged is not None:
        head += " converged (results ledger) |"
        columns += 1
    lines = [head, "|" + "---|" * columns]
    for r in rows:
        bleus = r["bleu"]
        mean = sum(bleus) / len(bleus)
        spread = f" ± {(max(bleus) - min(bleus)) / 2:.2f}" if len(bleus) > 1 else ""
        p = r["params"]
        line = (
            f"| {r['name']} | {len(bleus)} | {mean:.2f}{spread} | {p['total']:,} | {p['trained']:,} | "
            f"{p['embedding']:,} | {p.get('output', 0):,} | {sum(r['speed']) / len(r['speed']):,.0f} | "
            f"{sum(r['time']) / len(r['time']):.0f} |"
        )
        if converged is not None:
            line += f" {converged.get(r['name']) or 'none yet'} |"
        lines.append(line)
    return "\n".join(lines)


def _option_pairs(tokens):
    """{flag: value or None} of a fairseq-train option list (the first token, the data directory, left out)."""
    out = {}
    items = list(tokens)
    for i, tok in enumerate(items):
        if tok.startswith("--"):
            nxt = items[i + 1] if i + 1 < len(items) else None
            out[tok] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def _setting(options):
    """What must be equal for a converged figure to stand beside a quick row: the data, the direction, the model
    and the method's seams (the defaults filled in)."""
    pairs = _option_pairs(options)
    return (pairs.get("--source-lang"), pairs.get("--target-lang"), pairs.get("--arch"),
            pairs.get("--output-layer") or "softmax", pairs.get("--embeddings") or "standard")


def ledger_matches(ledger, rows, test="test2016", seeds=(1, 2, 3)):
    """{quick row name: (ledger row name, its records)}: for each quick row of ``rows`` the results ledger's row
    trained on the same data with the same model, direction and seams, the one whose options differ least from the
    quick row's (a row with a step after training, ``# after:``, only where nothing else matches), with its records
    of the protocol's seeds. Rows without such a ledger row are left out."""
    if not ledger or not os.path.isdir(ledger):
        return {}
    by_row = {}
    for rec in read_records(ledger):
        if rec.get("seed") in seeds and test in rec.get("test", {}):
            by_row.setdefault(rec["row"], []).append(rec)
    out = {}
    for row in rows:
        options = row.options()
        want_data = os.path.normpath(row.data_bin)
        want = _setting(options)
        mine = set(_option_pairs(options).items())
        best = None
        for name, recs in by_row.items():
            first = recs[0]
            if os.path.normpath(first["options"][0]) != want_data or _setting(first["options"][1:]) != want:
                continue
            theirs = {(k, v) for k, v in _option_pairs(first["options"][1:]).items() if k != "--seed"}
            key = (bool(first.get("after")), len(mine ^ theirs), name)
            if best is None or key < best[0]:
                best = (key, name, recs)
        if best is not None:
            out[row.name] = best[1:]
    return out


def ledger_figures(ledger, rows, test="test2016", seeds=(1, 2, 3)):
    """{quick row name: "39.13 ± 0.53 (3 seeds, tiny-softmax)"}: the converged figure of each quick row's ledger row
    (``ledger_matches``), mean ± sample deviation over the protocol's seeds. Rows without such a ledger row are left
    out ("none yet"). Other models and data (the LSTM tables, English -> German) are not shown: the table links to
    them."""
    from fairseq_outlayers.lab.ledger.stats import mean_sd

    out = {}
    for row_name, (name, recs) in ledger_matches(ledger, rows, test, seeds).items():
        mean, sd = mean_sd([r["test"][test]["sacrebleu"] for r in recs])
        n = len(recs)
        out[row_name] = (f"{mean:.2f}{'' if sd is None else f' ± {sd:.2f}'} "
                         f"({n} seed{'s' if n > 1 else ''}, {name})")
    return out


def start_order(rows, ledger=None, test="test2016"):
    """The rows in the order their runs start: the longest first, so that N runs at once end close together. A
    row's length is its ledger row's training seconds per update (``ledger_matches``, mean over its records); a row
    without one counts as the mean of the others; without a ledger, the table's order. Ties keep the table's order.
    Only the start order changes: the table keeps the rows' order."""
    per_update = {}
    for row_name, (_, recs) in ledger_matches(ledger, rows, test).items():
        speeds = [r["training_seconds"] / r["updates"] for r in recs if r.get("updates") and r.get("training_seconds")]
        if speeds:
            per_update[row_name] = sum(speeds) / len(speeds)
    if not per_update:
        return list(rows)
    unknown = sum(per_update.values()) / len(per_update)
    return sorted(rows, key=lambda r: -per_update.get(r.name, unknown))


CONVERGED_NOTE = (
    "converged (results ledger): the same model, data and method trained to convergence, mean ± sd of test "
    "sacreBLEU over the seeds recorded in {ledger} (ledger row named). The quick figures come from a few hundred "
    "updates and say little about a method's quality. Other models and data (the attention LSTM, English -> German, "
    "the small Transformer): docs/results/ledger.md; the verdicts: docs/results.md.")


def write_plot(results, path):
    """BLEU (mean over seeds, bars for the spread) against trained parameters, one labelled point per row.
    Returns False (and writes nothing) when matplotlib is not installed."""
    try:

        logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq's root logger would print font scans
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        bleus = r["bleu"]
        mean = sum(bleus) / len(bleus)
        half = (max(bleus) - min(bleus)) / 2
        x = r["params"]["trained"] / 1e6
        ax.errorbar([x], [mean], yerr=[half] if half else None, fmt="o", capsize=3)
        ax.annotate(r["name"], (x, mean), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel("trained parameters (millions)")
    ax.set_ylabel("BLEU")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def table_rows(rows, records, test):
    """The table's rows: per row its seeds' BLEU on ``test``, speed and time and its parameters, from the runs'
    records."""
    out = []
    for row in rows:
        runs = records.get(row.name, [])
        if not runs:
            continue
        first = runs[0]
        out.append({"name": row.name, "args": " ".join(shlex.quote(a) for a in row.train_args),
                    "bleu": [r["test"][test]["sacrebleu"] for r in runs],
                    "speed": [r.get("tokens_per_second") or 0.0 for r in runs],
                    "time": [r["training_seconds"] for r in runs], "params": first["params"],
                    "signature": first["test"][test]["sacrebleu_signature"]})
    return out


def gathered(rows, seeds, finished):
    """{row name: [record of each seed, in the order of ``seeds``]} of the finished runs (``finished``: {(row name,
    seed): record}): the same whichever run ended first."""
    out = {}
    for row in rows:
        runs = [finished[row.name, seed] for seed in seeds if (row.name, seed) in finished]
        if runs:
            out[row.name] = runs
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--data-bin", required=True, help="binarised data (fairseq-preprocess output)")
    parser.add_argument("--raw-dir", required=True, help="raw (untokenised) text with test references")
    parser.add_argument("--test-prefix", default="test_2016_flickr", help="raw reference file prefix")
    parser.add_argument("--test-name", default="test2016", help="name of the test split in the records (the "
                        "ledger's)")
    parser.add_argument("--tgt", default="en", help="target language: the reference is RAW_DIR/TEST_PREFIX.TGT")
    parser.add_argument("--rows", nargs="+", required=True, help="row files (*.args), one configuration each")
    parser.add_argument("--out", required=True, help="output directory (records, checkpoints, logs, results.md)")
    parser.add_argument("--max-update", type=value_checks.POSITIVE_INT, default=1200, help="every row's budget")
    parser.add_argument("--seeds", type=value_checks.NON_NEGATIVE_INT, nargs="+", default=[1])
    parser.add_argument("--base-args", default=None, help="fairseq-train options shared by every row "
                        f"(default: a row's '# base: FILE', else the options in {DEMO_BASE_FILE})")
    parser.add_argument("--beam", type=value_checks.BEAM, default=5, help="beam of a row without '# beam: N'")
    parser.add_argument("--lenpen", type=value_checks.FINITE, default=1.0)
    parser.add_argument("--batch-size", type=value_checks.POSITIVE_INT, default=128)
    parser.add_argument("--title", default="Output-layer comparison")
    parser.add_argument("--jobs", type=value_checks.POSITIVE_INT, default=None, help="runs at once (each its own "
                        "fairseq-train; on a CPU each gets cores/N threads unless OMP_NUM_THREADS is set, on CUDA one "
                        "GPU each, the visible GPUs in turn; default: one per GPU, else one per CPU core)")
    parser.add_argument("--ledger", default=None, help="results ledger (e.g. docs/results/runs): add a column with "
                        "its converged figure for each row's method (python -m fairseq_outlayers.lab.ledger)")
    args = parser.parse_args(argv)

    if not os.path.isdir(args.data_bin):
        parser.error(f"--data-bin '{args.data_bin}' is not a directory; run scripts/prepare-multi30k.sh first")
    ref_path = os.path.join(args.raw_dir, f"{args.test_prefix}.{args.tgt}")
    if not os.path.isfile(ref_path):
        parser.error(f"reference file '{ref_path}' does not exist; check --raw-dir/--test-prefix/--tgt")
    row_files = sorted(set(f for pattern in args.rows for f in (glob.glob(pattern) or [pattern])))
    for f in row_files:
        if not os.path.isfile(f):
            parser.error(f"row file '{f}' does not exist")
    try:
        rows = quick_rows(row_files, args.data_bin, args.max_update,
                          shlex.split(args.base_args) if args.base_args else None)
    except OutlayersConfigError as e:
        parser.error(str(e))
    for row in rows:
        if not os.path.isdir(row.data_bin):
            parser.error(f"{row.path}: --data-bin '{row.data_bin}' is not a directory; prepare that data first")
    names = [r.name for r in rows]
    if len(set(names)) != len(names):
        parser.error(f"two row files have the same name (after the NN- prefix): {names}")
    inputs = [args.data_bin, ref_path, args.ledger] + row_files + [r.data_bin for r in rows]
    os.makedirs(args.out, exist_ok=True)
    try:  # its own tables are rewritten at every run; nothing it reads ever is
        for name in ("results.md", "results.json", "results.png"):
            check_output_path(os.path.join(args.out, name), True, inputs, option="--out")
    except OutlayersConfigError as e:
        parser.error(str(e))

    converged = None if args.ledger is None else ledger_figures(args.ledger, rows)
    started = time.time()
    # every row with a seed before any with the next, the longest rows first; the table keeps the rows' order
    runs = [(row, seed) for seed in args.seeds for row in start_order(rows, args.ledger, args.test_name)]
    jobs = args.jobs or slots.default_jobs(len(runs))
    # each run's processes get their slot's environment (slots.py): on CUDA one GPU (fairseq would train on every
    # GPU it sees), on a CPU with N runs at once the cores / N threads
    settings = runner.Settings(ledger=os.path.join(args.out, "records"), work=args.out, test_ref=ref_path,
                               test_name=args.test_name, beam=args.beam, lenpen=args.lenpen, batch_size=args.batch_size)
    try:  # a record made with other options or on other data: one line, before anything trains
        for warning in runner.check_before_training(runs, settings):
            log(f"warning: {warning}")
    except OutlayersConfigError as e:
        raise SystemExit(f"compare: error: {e}") from None
    order = {run: n for n, run in enumerate(((row.name, seed) for row, seed in runs), start=1)}

    def one(run, env):
        row, seed = run
        threads = f", {env['OMP_NUM_THREADS']} thread(s)" if "OMP_NUM_THREADS" in env else ""
        log(f"[{order[row.name, seed]}/{len(runs)}] {row.name} (seed {seed}){threads}")
        return runner.run(row, seed, dataclasses.replace(settings, env=env))

    if jobs > 1:
        log(f"{len(runs)} runs, {jobs} at once")
    finished, failed = {}, []
    left = {seed: len(rows) for seed in args.seeds}
    shown = 0  # seeds whose table so far is printed
    try:
        for i, outcome, exc in slots.run_in_slots(runs, one, jobs, stop=(OutlayersConfigError,)):
            row, seed = runs[i]
            left[seed] -= 1
            if exc is not None:  # one failed run must not stop the others: reported here and at the end
                failed.append(f"{row.name} seed {seed}")
                log(f"  {row.name} (seed {seed}) FAILED: {exc}")
            else:
                record, reused = outcome
                finished[row.name, seed] = record
                log(f"  {row.name} (seed {seed}): {'already done; reused. ' if reused else ''}BLEU "
                    f"{record['test'][args.test_name]['sacrebleu']:.2f}  trained params "
                    f"{record['params']['trained']:,}  {record.get('tokens_per_second') or 0:,.0f} tok/s")
            # the table so far once every run of a seed has ended; the last seed's is the final one, printed below
            while shown < len(args.seeds) - 1 and left[args.seeds[shown]] == 0:
                shown += 1
                print(format_table(table_rows(rows, gathered(rows, args.seeds[:shown], finished), args.test_name),
                                   converged), flush=True)
    except OutlayersConfigError as e:
        raise SystemExit(f"compare: error: {e}") from None
    results = table_rows(rows, gathered(rows, args.seeds, finished), args.test_name)
    if not results:
        raise SystemExit(f"compare: every run failed ({', '.join(failed)}); see each run's train.log in {args.out}")

    commit = runner.git_commit()
    table = format_table(results, converged)
    hardware = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores"
    try:
        import torch

        if torch.cuda.is_available():
            hardware = torch.cuda.get_device_name(0)
    except Exception:  # pragma: no cover
        pass
    md = [f"# {args.title}", "",
          f"Date {time.strftime('%Y-%m-%d')}, commit {commit}, hardware: {hardware}, total wall time "
          f"{time.time() - started:.0f} s.", "",
          f"Data: `{args.data_bin}`; {args.max_update} updates per run; seeds {args.seeds}; beam {args.beam}; "
          f"{slots.describe(jobs)}.",
          (f"Base options: `{' '.join(rows[0].base_args)}`" if all(r.base_args == rows[0].base_args for r in rows)
           else "Base options: each row's own (its `# base:` file)"), "", table, "",
          f"BLEU: sacreBLEU on detokenised output against `{ref_path}`; signature "
          f"`{results[0].get('signature', '')}`. Records: `{settings.ledger}`.", "",
          "Rows:", ""] + [f"- **{r['name']}**: `{r['args']}`" for r in results]
    if failed:
        md += ["", f"Failed (not in the table; see each run's train.log in `{args.out}`): {', '.join(failed)}."]
    if converged is not None:
        md += ["", CONVERGED_NOTE.format(ledger=args.ledger)]
    if write_plot(results, os.path.join(args.out, "results.png")):
        md += ["", "![BLEU against trained parameters](results.png)"]
    write_text(os.path.join(args.out, "results.md"), "\n".join(md) + "\n")
    write_text(os.path.join(args.out, "results.json"), json.dumps(results, indent=2) + "\n")
    print("\n" + table)
    if converged is not None:
        print("\n" + CONVERGED_NOTE.format(ledger=args.ledger))
    log(f"wrote {os.path.join(args.out, 'results.md')}")
    if failed:
        raise SystemExit(f"compare: {len(failed)} run(s) failed: {', '.join(failed)}; the others are in the table "
                         f"(run again to retry them: finished runs are reused)")


if __name__ == "__main__":
    main()
