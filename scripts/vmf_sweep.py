"""The continuous-output sweep of docs/continuous-outputs.md: one word-level Multi30k model per row file and seed,
each decoded at several beam sizes, with the criterion's validation figures (κ, cos, nn_acc, κ alarms).

    python scripts/vmf_sweep.py --rows "configs/vmf-sweep/*.args" --seeds 1 2 --out work/vmf-sweep

Every row trains the same model at the same budget as the continuous rows of docs/results.md (the demo
Transformer of ``configs/demo-base.args``, 800 updates, lr 0.003) through the real ``fairseq-train``;
its last checkpoint is translated with ``fairseq-generate`` at ``--beams`` (default 1, the paper's
nearest-neighbour decoding, and 5) and scored with sacreBLEU against the raw references, exactly as
``make results`` does (``fairseq_outlayers.tools.evaluation.scoring``). A finished run (its ``meta.json``) is reused,
so the sweep resumes where it stopped; ``--jobs N`` trains N runs at once (each with ``--threads`` torch threads; on CUDA each sees one GPU, the N slots
taking the visible GPUs in turn: ``fairseq_outlayers/lab/gpus.py``). The table
(mean over seeds, then each seed) is written to ``OUT/sweep.md`` and ``OUT/sweep.json`` after every run.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import platform
import shlex
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from fairseq_outlayers import checks
from fairseq_outlayers.lab import fairseq_runs  # noqa: E402
from fairseq_outlayers.lab import compare  # noqa: E402
from fairseq_outlayers.lab import gpus  # noqa: E402
from fairseq_outlayers.tools.evaluation.scoring import score_subset  # noqa: E402

#: the validation figures read from the last "valid on" line of a training log
VALID_FIELDS = ("loss", "cos", "norm", "nn_acc", "kappa_low", "kappa_high")


def last_valid(log_path):
    """The figures of the last validation in a fairseq-train log (floats), {} if none."""
    found = fairseq_runs.validations(log_path)
    return {k: v for k, v in found[-1].items() if k in VALID_FIELDS} if found else {}


def run_one(row, seed, args, base_args, ref_path, lock, free=None):
    """One row x seed (trained, decoded and recorded unless recorded already); ``free``: the GPU slots
    (``gpus.slots``), one taken for this run's fairseq processes and given back at its end, or None."""
    gpu = free.get() if free is not None else None
    try:
        return _run_one(row, seed, args, base_args, ref_path, lock, gpus.slot_env(gpu))
    finally:
        if gpu is not None:
            free.put(gpu)


def _run_one(row, seed, args, base_args, ref_path, lock, env):
    run_dir = os.path.join(args.out, f"{row['name']}.seed{seed}")
    meta_path = os.path.join(run_dir, "meta.json")
    record = os.path.join(args.records, f"{row['name']}.seed{seed}.json")
    for done in (record, meta_path):
        if os.path.exists(done):
            meta = json.load(open(done))
            if meta.get("args") == row["args"]:
                if not os.path.exists(record):  # a run finished before records were kept
                    _write_json(record, meta)
                if not args.render_only:
                    _valid_decodes(meta, row, run_dir, args, (meta_path, record), lock, env)
                    _scaled_decodes(meta, row, run_dir, args, ref_path, (meta_path, record), lock, env)
                return meta
            raise SystemExit(f"vmf_sweep: {done} was run with other options ('{meta.get('args')}'); rename the "
                             f"row or move the record away")
    if args.render_only:
        return None
    os.makedirs(run_dir, exist_ok=True)
    log_path = os.path.join(run_dir, "train.log")
    with lock:
        fairseq_runs.log(f"{row['name']} seed {seed}: training")
    seconds = compare.train_row(row["data_bin"], run_dir, base_args, row["train_args"], seed, args.max_update,
                                log_path, env)
    ckpt = os.path.join(run_dir, "checkpoint_last.pt")
    meta = {"row": row["name"], "seed": seed, "args": row["args"], "seconds": seconds,
            "speed": fairseq_runs.training_speed(log_path), "valid": last_valid(log_path), "bleu": {},
            "params": fairseq_runs.parameter_counts(ckpt)}
    for beam in args.beams:
        scores = score_subset(row["data_bin"], ckpt, os.path.join(run_dir, f"test.beam{beam}.hyp"), ref_path, beam,
                              args.lenpen, args.batch_size, lowercase=args.lowercase, env=env)
        meta["bleu"][str(beam)], meta["signature"] = scores["sacrebleu"], scores["sacrebleu_signature"]
    meta["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=ROOT).stdout.strip()
    meta["machine"] = f"{platform.machine()}, {os.cpu_count()} CPU cores, {args.jobs} job(s) x {args.threads} thread(s)"
    for path in (meta_path, record):
        _write_json(path, meta)
    _valid_decodes(meta, row, run_dir, args, (meta_path, record), lock, env)
    _scaled_decodes(meta, row, run_dir, args, ref_path, (meta_path, record), lock, env)
    if not args.keep_checkpoints:
        for name in os.listdir(run_dir):
            if name.endswith(".pt") and name != "checkpoint_last.pt":
                os.remove(os.path.join(run_dir, name))
    with lock:
        fairseq_runs.log(f"{row['name']} seed {seed}: BLEU " + " / ".join(
            f"beam {b} {meta['bleu'][str(b)]:.2f}" for b in args.beams) + f", valid {meta['valid']}")
    return meta


def _write_json(path, meta):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(meta, f, indent=2)
    os.replace(path + ".tmp", path)


def scaled_key(beam, scale):
    """The ``bleu`` key of a decode at ``beam`` with ``--continuous-score-scale scale``: ``"5@40"``."""
    return f"{beam}@{scale:g}"


def _valid_decodes(meta, row, run_dir, args, paths, lock, env=None):
    """Add the validation BLEU at ``--valid-beams`` that a run lacks (its checkpoint must still be there): the
    figure rows are chosen by, since the test set never chooses anything."""
    ckpt = os.path.join(run_dir, "checkpoint_last.pt")
    valid = meta.setdefault("valid_bleu", {})
    missing = [b for b in args.valid_beams if str(b) not in valid]
    if not missing:
        return
    if not os.path.exists(ckpt):
        with lock:
            fairseq_runs.log(f"{row['name']} seed {meta['seed']}: no checkpoint in {run_dir}; validation decodes "
                             "skipped")
        return
    for beam in missing:
        scores = score_subset(row["data_bin"], ckpt, os.path.join(run_dir, f"valid.beam{beam}.hyp"),
                              args.valid_ref, beam, args.lenpen, args.batch_size, subset="valid",
                              lowercase=args.lowercase, env=env)
        valid[str(beam)] = scores["sacrebleu"]
        with lock:
            fairseq_runs.log(f"{row['name']} seed {meta['seed']}: validation beam {beam}: BLEU {valid[str(beam)]:.2f}")
    for path in paths:
        _write_json(path, meta)


def _scaled_decodes(meta, row, run_dir, args, ref_path, paths, lock, env=None):
    """Add the ``--scaled-decodes`` BLEU figures a run lacks (its checkpoint must still be there); the scale
    replaces κ in the beam-search scores (``--model-overrides``), chosen on validation beforehand with
    scripts/tune_continuous_decoding.py."""
    ckpt = os.path.join(run_dir, "checkpoint_last.pt")
    missing = [(b, s) for b, s in args.scaled_decodes if scaled_key(b, s) not in meta["bleu"]]
    if not missing or "--output-layer continuous" not in row["args"]:
        return
    if not os.path.exists(ckpt):
        with lock:
            fairseq_runs.log(f"{row['name']} seed {meta['seed']}: no checkpoint in {run_dir}; scaled decodes skipped")
        return
    for beam, scale in missing:
        scores = score_subset(row["data_bin"], ckpt, os.path.join(run_dir, f"test.beam{beam}.scale{scale:g}.hyp"),
                              ref_path, beam, args.lenpen, args.batch_size, lowercase=args.lowercase,
                              extra=["--model-overrides", repr({"continuous_score_scale": scale})], env=env)
        meta["bleu"][scaled_key(beam, scale)] = scores["sacrebleu"]
        with lock:
            fairseq_runs.log(f"{row['name']} seed {meta['seed']}: beam {beam}, scale {scale:g}: BLEU "
                        f"{meta['bleu'][scaled_key(beam, scale)]:.2f}")
    for path in paths:
        _write_json(path, meta)


def _parse_scaled(text):
    try:
        beam, scale = text.split(":")
        beam, scale = int(beam), float(scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not BEAM:SCALE (e.g. 5:40)") from None
    if beam < 1 or not scale > 0:
        raise argparse.ArgumentTypeError(f"'{text}': the beam must be >= 1 and the scale > 0")
    return beam, scale


def _mean(values):
    """Mean of the values known: None and NaN (e.g. the speed of a run resumed after its last update) are left out."""
    values = [v for v in values if v is not None and v == v]
    return sum(values) / len(values) if values else None


def _fmt(v, digits=2):
    return "—" if v is None else f"{v:.{digits}f}"


def table(rows, metas, seeds, beams, scaled=(), valid_beams=()):
    """Markdown table: per row the mean over the seeds that finished (and each seed's BLEU); the validation BLEU
    (``valid_beams``) first, as rows are chosen by it."""
    keys = [str(b) for b in beams] + [scaled_key(b, s) for b, s in scaled]
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


def write_report(path, rows, metas, args, base_args, ref_path):
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip() or "unknown"
    md = [f"# Continuous-output sweep ({args.max_update} updates, seeds {' '.join(map(str, args.seeds))})", "",
          f"Date {time.strftime('%Y-%m-%d')}, commit {commit}, {platform.machine()}, {os.cpu_count()} CPU cores, "
          f"{args.jobs} run(s) at a time with {args.threads} torch thread(s) each.", "",
          f"Base options: `{' '.join(base_args)}`; BLEU: sacreBLEU on detokenised output against `{ref_path}`"
          f"{' (lowercased)' if args.lowercase else ''}; validation BLEU against `{args.valid_ref}`. Validation "
          "figures (κ, cos, nn_acc, κ alarms) are the last validation of each run, averaged over seeds.", "",
          table(rows, metas, args.seeds, args.beams, args.scaled_decodes, args.valid_beams), "", "Rows:", ""]
    md += [f"- **{r['name']}**: `{r['args']}`" for r in rows]
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
    parser.add_argument("--no-lowercase", dest="lowercase", action="store_false",
                        help="the data was not lowercased (default: lowercase the references, as the recipes do)")
    parser.add_argument("--seeds", type=checks.NON_NEGATIVE_INT, nargs="+", default=[1, 2])
    parser.add_argument("--max-update", type=checks.POSITIVE_INT, default=800)
    parser.add_argument("--beams", type=checks.BEAM, nargs="+", default=[1, 5])
    parser.add_argument("--valid-beams", type=checks.BEAM, nargs="*", default=[1],
                        help="beams of the validation decodes that rows are chosen by (default: 1; none: skip)")
    parser.add_argument("--valid-prefix", default="val", help="raw validation file name without the language")
    parser.add_argument("--scaled-decodes", type=_parse_scaled, nargs="+", default=[], metavar="BEAM:SCALE",
                        help="also decode continuous rows at BEAM with --continuous-score-scale SCALE (chosen on "
                             "validation with scripts/tune_continuous_decoding.py), added to finished runs too")
    parser.add_argument("--lenpen", type=checks.FINITE, default=1.0)
    parser.add_argument("--batch-size", type=checks.POSITIVE_INT, default=128)
    parser.add_argument("--base-args", default=None, help="fairseq-train options of every row (default: the "
                        "options in configs/demo-base.args)")
    parser.add_argument("--jobs", type=checks.POSITIVE_INT, default=1, help="runs trained at the same time")
    parser.add_argument("--threads", type=checks.POSITIVE_INT, default=None, help="torch threads per run (default: cores/jobs)")
    parser.add_argument("--keep-checkpoints", action="store_true", help="keep checkpoint_best.pt as well")
    parser.add_argument("--out", default="work/vmf-sweep", help="checkpoints, logs, translations")
    parser.add_argument("--records", default=os.path.join(ROOT, "docs", "continuous-sweep"),
                        help="one small JSON record per finished run (committed: a rerun skips what is recorded)")
    parser.add_argument("--render-only", action="store_true", help="write the table from the records; train nothing")
    args = parser.parse_args(argv)

    ref_path = os.path.join(args.raw_dir, f"{args.test_prefix}.en")
    args.valid_ref = os.path.join(args.raw_dir, f"{args.valid_prefix}.en")
    for path in (ref_path, args.valid_ref) if args.valid_beams else (ref_path,):
        if not os.path.isfile(path):
            parser.error(f"reference file '{path}' does not exist; run scripts/prepare-multi30k.sh first")
    files = sorted(set(f for p in args.rows for f in (glob.glob(p) or [p])))
    rows = []
    for f in files:
        if not os.path.isfile(f):
            parser.error(f"row file '{f}' does not exist")
        name, row_args = compare.read_row(f)
        data_bin, train_args = compare.row_data_bin(row_args, args.data_bin)
        if not os.path.isdir(data_bin):
            parser.error(f"{f}: data '{data_bin}' is not a directory; run scripts/prepare-multi30k.sh "
                         "--word-target first")
        for token in train_args:
            if (token.endswith((".vec", ".txt", ".bin")) and not token.startswith("-") and not os.path.exists(token)
                    and not args.render_only):
                parser.error(f"{f}: file '{token}' does not exist")
        rows.append({"name": name, "args": " ".join(row_args), "data_bin": data_bin, "train_args": train_args})
    if len({r["name"] for r in rows}) != len(rows):
        parser.error("two row files have the same name (after the NN- prefix)")
    threads = args.threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    os.environ.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    base_args = shlex.split(args.base_args) if args.base_args else compare.demo_base_args()
    os.makedirs(args.out, exist_ok=True)
    report = os.path.join(args.out, "sweep.md")
    lock = threading.Lock()
    metas = {}
    jobs = [(row, seed) for seed in args.seeds for row in rows]  # every row with the first seed first
    free = gpus.slots(args.jobs, gpus.visible_gpus())  # one GPU per run: fairseq would train on all it sees
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, row, seed, args, base_args, ref_path, lock, free): (row["name"], seed)
                   for row, seed in jobs}
        failed = []
        for fut in concurrent.futures.as_completed(futures):
            key = futures[fut]
            try:
                result = fut.result()
                if result is not None:
                    metas[key] = result
            except (SystemExit, Exception) as exc:  # one failed row must not stop the others
                failed.append(key)
                with lock:
                    fairseq_runs.log(f"{key[0]} seed {key[1]} FAILED: {exc}")
            with lock:
                write_report(report, rows, metas, args, base_args, ref_path)
    print(table(rows, metas, args.seeds, args.beams, args.scaled_decodes, args.valid_beams))
    fairseq_runs.log(f"wrote {report}")
    if failed:
        raise SystemExit(f"vmf_sweep: {len(failed)} run(s) failed: {failed}")


if __name__ == "__main__":
    main()
