"""Train one model per output-layer configuration at the same budget, translate, score, and print a table.

    python -m fairseq_outlayers.lab.compare --data-bin work/multi30k/data-bin/de-en \\
        --raw-dir work/multi30k/raw --rows configs/demo/*.args --out work/demo

Each row file holds extra ``fairseq-train`` options (e.g. ``--output-layer tied``) added to one shared base
command (``--base-args``, default: the options in ``configs/demo-base.args``, the demo Transformer). For every row and seed this runs the real CLIs:
``fairseq-train --user-dir ...`` -> ``fairseq-generate`` (``--remove-bpe``) -> sacremoses detokenisation ->
sacreBLEU against the raw references. It reports BLEU (with sacreBLEU's signature), total / trained / embedding
/ output-layer parameters, training target tokens/s and wall time, prints the table as it goes and writes it to
``OUT/results.md`` (and ``OUT/results.json``). A row already finished (its checkpoint and translation exist) is
reused, so an interrupted run resumes where it stopped (all rows run with the first seed before any runs with
the second, so a run cut short still has every row). A row may name its own data with ``--data-bin PATH`` (e.g.
word-level targets for continuous outputs, next to the BPE baselines); the references are the same raw files.
"""
import argparse
import glob
import json
import os
import platform
import re
import shlex
import subprocess
import time

from fairseq_outlayers import checks
from fairseq_outlayers.lab import gpus
from fairseq_outlayers.tools.evaluation.scoring import score_subset
from fairseq_outlayers.lab.fairseq_runs import log, parameter_counts, run_training, training_speed
from fairseq_outlayers.tools.commands import executable, user_dir
from fairseq_outlayers.outfiles import write_text

#: the rows' shared options, from the repository root (a checkout: ``make install`` installs it editable)
DEMO_BASE_FILE = os.path.join("configs", "demo-base.args")
#: base options that belong to the base criterion (each takes one value)
CRITERION_OPTIONS = ("--criterion", "--label-smoothing")


def read_options(path):
    """The options of an ``.args`` file: its lines without ``#`` comments, split as the shell would."""
    with open(path, encoding="utf-8") as f:
        return shlex.split(" ".join(line.split("#", 1)[0] for line in f))


def read_row(path):
    name = re.sub(r"^\d+-", "", os.path.splitext(os.path.basename(path))[0])
    return name, read_options(path)


def demo_base_args(path=DEMO_BASE_FILE):
    """The fairseq-train options every row shares by default: ``configs/demo-base.args``, found from the working
    directory (run from the repository's root, as the Makefile does) unless ``path`` names another file."""
    if not os.path.isfile(path):
        raise SystemExit(f"compare: {path} (the rows' shared options) does not exist; run from the repository's "
                         "root or give --base-args")
    return read_options(path)


def row_data_bin(row_args, default):
    """A row's own ``--data-bin PATH`` (taken out of its fairseq-train options), else ``default``."""
    rest, data_bin = [], default
    args = iter(row_args)
    for arg in args:
        if arg == "--data-bin":
            data_bin = next(args, None)
            if data_bin is None:
                raise SystemExit("compare: --data-bin in a row file needs a path")
        elif arg.startswith("--data-bin="):
            data_bin = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return data_bin, rest


def merge_args(base_args, row_args):
    """Row options on top of the base ones; a row that picks its own ``--criterion`` drops the base criterion and
    its options (the label smoothing of the cross-entropy criterion means nothing to a continuous loss)."""
    if "--criterion" not in row_args:
        return list(base_args) + list(row_args)
    merged, skip = [], 0
    for i, arg in enumerate(base_args):
        if skip:
            skip -= 1
            continue
        if arg in CRITERION_OPTIONS:
            skip = 1
            continue
        merged.append(arg)
    return merged + list(row_args)


def train_row(data_bin, save_dir, base_args, row_args, seed, max_update, log_path, env=None):
    """One row's fairseq-train (``env``: variables for it only, e.g. its GPU: ``gpus.py``); its wall seconds."""
    cmd = [executable("fairseq-train"), data_bin, "--user-dir", user_dir(), *merge_args(base_args, row_args),
           "--seed", str(seed), "--max-update", str(max_update), "--save-dir", save_dir,
           "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "50", "--no-progress-bar"]
    return run_training(cmd, log_path, save_dir, env=env)


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


def ledger_figures(ledger, rows, base_args, test="test2016", seeds=(1, 2, 3)):
    """{quick row name: "39.13 ± 0.53 (3 seeds, tiny-softmax)"}: for each quick row of ``rows`` the results ledger's
    row trained on the same data with the same model, direction and seams, the one whose options differ least
    from the quick row's (a row with a step after training, ``# after:``, only where nothing else matches);
    mean ± sample deviation over the protocol's seeds. Rows without such a ledger row are left out ("none yet").
    Other models and data (the LSTM tables, English -> German) are not shown: the table links to them."""
    if not ledger or not os.path.isdir(ledger):
        return {}
    from fairseq_outlayers.lab.ledger.records import read_records
    from fairseq_outlayers.lab.ledger.stats import mean_sd

    by_row = {}
    for rec in read_records(ledger):
        if rec.get("seed") in seeds and test in rec.get("test", {}):
            by_row.setdefault(rec["row"], []).append(rec)
    out = {}
    for row in rows:
        options = merge_args(base_args, row["train_args"])
        want_data = os.path.normpath(row["data_bin"])
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
            _, name, recs = best
            mean, sd = mean_sd([r["test"][test]["sacrebleu"] for r in recs])
            n = len(recs)
            out[row["name"]] = (f"{mean:.2f}{'' if sd is None else f' ± {sd:.2f}'} "
                                f"({n} seed{'s' if n > 1 else ''}, {name})")
    return out


CONVERGED_NOTE = (
    "converged (results ledger): the same model, data and method trained to convergence, mean ± sd of test "
    "sacreBLEU over the seeds recorded in {ledger} (ledger row named). The quick figures come from a few hundred "
    "updates and say little about a method's quality. Other models and data (the attention LSTM, English -> German, "
    "the small Transformer): docs/results/ledger.md; the verdicts: docs/results.md.")


def write_plot(results, path):
    """BLEU (mean over seeds, bars for the spread) against trained parameters, one labelled point per row.
    Returns False (and writes nothing) when matplotlib is not installed."""
    try:
        import logging

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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--data-bin", required=True, help="binarised data (fairseq-preprocess output)")
    parser.add_argument("--raw-dir", required=True, help="raw (untokenised) text with test references")
    parser.add_argument("--test-prefix", default="test_2016_flickr", help="raw reference file prefix")
    parser.add_argument("--src", default="de")
    parser.add_argument("--tgt", default="en")
    parser.add_argument("--lowercase", action="store_true", help="the data was lowercased: lowercase references")
    parser.add_argument("--rows", nargs="+", required=True, help="row files (*.args), one configuration each")
    parser.add_argument("--out", required=True, help="output directory (checkpoints, logs, results.md)")
    parser.add_argument("--max-update", type=checks.POSITIVE_INT, default=1200)
    parser.add_argument("--seeds", type=checks.NON_NEGATIVE_INT, nargs="+", default=[1])
    parser.add_argument("--base-args", default=None, help="fairseq-train options shared by every row "
                        f"(default: the options in {DEMO_BASE_FILE})")
    parser.add_argument("--beam", type=checks.BEAM, default=5)
    parser.add_argument("--lenpen", type=checks.FINITE, default=1.0)
    parser.add_argument("--batch-size", type=checks.POSITIVE_INT, default=128)
    parser.add_argument("--title", default="Output-layer comparison")
    parser.add_argument("--ledger", default=None, help="results ledger (e.g. docs/results/runs): add a column with "
                        "its converged figure for each row's method (python -m fairseq_outlayers.lab.ledger)")
    args = parser.parse_args(argv)

    if not os.path.isdir(args.data_bin):
        parser.error(f"--data-bin '{args.data_bin}' is not a directory; run scripts/prepare-multi30k.sh first")
    ref_path = os.path.join(args.raw_dir, f"{args.test_prefix}.{args.tgt}")
    if not os.path.isfile(ref_path):
        parser.error(f"reference file '{ref_path}' does not exist; check --raw-dir/--test-prefix/--tgt")
    base_args = shlex.split(args.base_args) if args.base_args else demo_base_args()
    row_files = sorted(set(f for pattern in args.rows for f in (glob.glob(pattern) or [pattern])))
    for f in row_files:
        if not os.path.isfile(f):
            parser.error(f"row file '{f}' does not exist")
    os.makedirs(args.out, exist_ok=True)

    rows = []
    for row_file in row_files:
        name, row_args = read_row(row_file)
        data_bin, train_args = row_data_bin(row_args, args.data_bin)
        if not os.path.isdir(data_bin):
            parser.error(f"{row_file}: --data-bin '{data_bin}' is not a directory; prepare that data first")
        rows.append({"name": name, "args": " ".join(row_args), "data_bin": data_bin, "train_args": train_args,
                     "bleu": [], "speed": [], "time": [], "params": None})
    names = [r["name"] for r in rows]
    if len(set(names)) != len(names):
        parser.error(f"two row files have the same name (after the NN- prefix): {names}")

    converged = None if args.ledger is None else ledger_figures(args.ledger, rows, base_args)
    started = time.time()
    env = gpus.first_gpu_env()  # one run at a time, on one GPU: fairseq would train on every GPU it sees
    for seed in args.seeds:
        for n, row in enumerate(rows, start=1):
            name = row["name"]
            run_dir = os.path.join(args.out, f"{name}.seed{seed}")
            os.makedirs(run_dir, exist_ok=True)
            ckpt = os.path.join(run_dir, "checkpoint_last.pt")
            hyp_path = os.path.join(run_dir, "test.hyp")
            log_path = os.path.join(run_dir, "train.log")
            log(f"[{n}/{len(rows)}] {name} (seed {seed})")
            meta_path = os.path.join(run_dir, "meta.json")
            if os.path.exists(meta_path) and os.path.exists(hyp_path):
                meta = json.load(open(meta_path))
                log("  already done; reusing")
            else:
                seconds = train_row(row["data_bin"], run_dir, base_args, row["train_args"], seed, args.max_update,
                                    log_path, env)
                # the hypotheses fairseq-generate writes (RUN_DIR/test.generate/), scored by the package's one
                # evaluation path; the tokenised hypotheses go to RUN_DIR/test.hyp
                scores = score_subset(row["data_bin"], ckpt, hyp_path, ref_path, args.beam, args.lenpen,
                                      args.batch_size, lowercase=True if args.lowercase else None, src=args.src,
                                      tgt=args.tgt, env=env)
                meta = {"bleu": scores["sacrebleu"], "signature": scores["sacrebleu_signature"],
                        "tokenized_bleu": scores["tokenized_bleu"], "seconds": seconds,
                        "speed": training_speed(log_path), "params": parameter_counts(ckpt)}
                write_text(meta_path, json.dumps(meta, indent=2))
            log(f"  BLEU {meta['bleu']:.2f}  trained params {meta['params']['trained']:,}  "
                f"{meta['speed']:,.0f} tok/s")
            row["bleu"].append(meta["bleu"])
            row["speed"].append(meta["speed"])
            row["time"].append(meta["seconds"])
            row["params"] = meta["params"]
            row["signature"] = meta["signature"]
        if seed != args.seeds[-1]:  # the table so far; the last seed's is the final one, printed once below
            print(format_table([r for r in rows if r["bleu"]], converged), flush=True)
    results = [{k: v for k, v in r.items() if k != "train_args"} for r in rows]

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "unknown"
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
          f"Data: `{args.data_bin}`; {args.max_update} updates per run; seeds {args.seeds}; beam {args.beam}.",
          f"Base options: `{' '.join(base_args)}`", "", table, "",
          f"BLEU: sacreBLEU on detokenised output against `{ref_path}`"
          f"{' (lowercased)' if args.lowercase else ''}; signature `{results[0].get('signature', '')}`.", "",
          "Rows:", ""] + [f"- **{r['name']}**: `{r['args']}`" for r in results]
    if converged is not None:
        md += ["", CONVERGED_NOTE.format(ledger=args.ledger)]
    if write_plot(results, os.path.join(args.out, "results.png")):
        md += ["", "![BLEU against trained parameters](results.png)"]
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    json.dump(results, open(os.path.join(args.out, "results.json"), "w"), indent=2)
    print("\n" + table)
    if converged is not None:
        print("\n" + CONVERGED_NOTE.format(ledger=args.ledger))
    log(f"wrote {os.path.join(args.out, 'results.md')}")


if __name__ == "__main__":
    main()
