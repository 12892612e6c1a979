#!/usr/bin/env python
"""Validation loss of every method in each training precision, against the same method in fp32.

For each method in ``--methods`` and precision in ``--precisions`` (fp32, fp16, amp, bf16, mebf16 =
--memory-efficient-bf16) one ``outlayers-train`` run of ``--max-update`` updates from the same seed, then the
validation loss that fairseq logs at the end. A precision passes when its loss is finite and within
``--tolerance`` (relative, default 2 %) of the method's fp32 loss; the table writes every figure. Runs go to
``--work-dir`` (one directory per run, its log kept as ``train.log``; an existing log is reused, so a cut-off
sweep resumes).

Every subprocess is this Python (``-c`` for outlayers-train, ``-m`` for the other tools) with the repository
put first on PYTHONPATH. So the package need not be installed, and no console script is needed.
``--jobs N`` runs N trainings at a time; on CUDA they share the GPU. The table does not depend on N.
``--run-timeout S`` stops a run after S seconds; its loss is then nan.

``--synthetic`` makes a small corpus under ``--work-dir`` (fairseq_outlayers.tools.synthetic, one joined
dictionary). It also makes random target vectors (m = 32) and a shared-private pairing from the corpus's exact
alignment, so every method runs. An explicit --data, --word-data, --vectors or --pairing is used instead.

GPU run (Multi30k, the issue's table; vectors / pairing / word-level data as scripts/demo.sh makes them):
    python scripts/bench_precision.py --device cuda --data work/multi30k/data-bin/de-en \\
        --word-data work/multi30k/data-bin/de-en-word --vectors work/multi30k/vectors.word.en.300d.vec \\
        --pairing work/multi30k/data-bin/de-en/pairs.de-en.txt --max-update 300 --jobs 4 \\
        --output docs/benchmarks/precision_gpu.md
GPU run on the synthetic corpus, every method:
    python scripts/bench_precision.py --device cuda --synthetic --max-update 300 --jobs 4 \\
        --output docs/benchmarks/precision_gpu_synthetic.md
CPU run (docs/benchmarks/precision_cpu.md; fairseq runs fp16 and --amp on CUDA only):
    python scripts/bench_precision.py --device cpu --synthetic --precisions fp32 bf16 mebf16 --max-update 40 \\
        --jobs 2 --output docs/benchmarks/precision_cpu.md
"""
import argparse
import concurrent.futures
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from fairseq_outlayers.lab.bench import benchlib  # noqa: E402

PRECISIONS = {"fp32": [], "fp16": ["--fp16"], "amp": ["--amp"], "bf16": ["--bf16"],
              "mebf16": ["--memory-efficient-bf16"]}
LS = ["--label-smoothing", "0.1"]
#: name -> (data kind, options); data kinds: data, joined, word (with --vectors), pairing (with --pairing)
METHODS = {
    "softmax": ("data", ["--output-layer", "softmax", "--criterion", "label_smoothed_cross_entropy"] + LS),
    "softmax-fused": ("data", ["--output-layer", "softmax", "--criterion", "fused_cross_entropy"] + LS),
    "tied": ("data", ["--output-layer", "tied", "--criterion", "label_smoothed_cross_entropy"] + LS),
    "tied-all": ("joined", ["--output-layer", "tied-all", "--criterion", "label_smoothed_cross_entropy"] + LS),
    "joint": ("data", ["--output-layer", "joint", "--criterion", "label_smoothed_cross_entropy"] + LS),
    "joint-fused": ("data", ["--output-layer", "joint", "--criterion", "fused_cross_entropy"] + LS),
    "fixed": ("data", ["--output-layer", "fixed", "--criterion", "label_smoothed_cross_entropy"] + LS),
    "sampled": ("data", ["--output-layer", "tied", "--criterion", "sampled_softmax", "--sample-ratio", "0.25"] + LS),
    "shared-private": ("pairing", ["--embeddings", "shared-private", "--output-layer", "tied", "--criterion",
                                   "label_smoothed_cross_entropy"] + LS),
    "vmf": ("word", ["--output-layer", "continuous", "--criterion", "vmf_nll"]),
    "cosine": ("word", ["--output-layer", "continuous", "--criterion", "cosine"]),
    "l2": ("word", ["--output-layer", "continuous", "--criterion", "l2"]),
    "max-margin": ("word", ["--output-layer", "continuous", "--criterion", "max_margin"]),
}
VALID = re.compile(r"valid on 'valid' subset \| loss (-?[\d.]+|nan|inf)")


#: ``outlayers-train`` without its console script: fairseq_outlayers.tools.wrappers has no ``__main__`` guard
TRAIN = [sys.executable, "-c", "import sys; from fairseq_outlayers.tools.wrappers import train; sys.exit(train())"]
PREPROCESS = [sys.executable, "-m", "fairseq_cli.preprocess"]
PAIRING = [sys.executable, "-m", "fairseq_outlayers.tools.pairing"]
VECTORS = [sys.executable, "-m", "fairseq_outlayers.tools.vectors"]
SYNTHETIC_DIM = 32  # size m of the synthetic random target vectors
_LIVE = set()  # the training subprocesses running now, stopped if this script is interrupted
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()  # set when the sweep is interrupted: a killed run writes no log


def child_env(threads=None):
    """The environment of every subprocess: the repository first on PYTHONPATH (an uninstalled package works);
    with ``threads``, OMP_NUM_THREADS unless the caller set it."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if threads and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_tool(cmd, what):
    """Run a data-preparation tool; on failure stop with its command and the end of its output."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env())
    if proc.returncode != 0:
        raise SystemExit(f"bench_precision.py: {what} failed (exit status {proc.returncode}): {' '.join(cmd)}\n"
                         f"{(proc.stdout + proc.stderr)[-3000:]}")


def synthetic_data(work: str) -> str:
    """A small synthetic corpus (fairseq_outlayers.tools.synthetic), binarised with one joined dictionary."""
    from fairseq_outlayers.tools.synthetic import write_corpus

    out = os.path.join(work, "data-bin")
    if not os.path.exists(os.path.join(out, "dict.en.txt")):
        raw = write_corpus(os.path.join(work, "raw"), (("train", 2000), ("valid", 200)), vocab=300)
        tmp = out + ".tmp"  # renamed when complete: a cut-off preprocess is not taken for data
        if os.path.exists(tmp):
            import shutil

            shutil.rmtree(tmp)
        run_tool(PREPROCESS + ["--source-lang", "de", "--target-lang", "en", "--trainpref", os.path.join(raw, "train"),
                               "--validpref", os.path.join(raw, "valid"), "--destdir", tmp, "--joined-dictionary",
                               "--workers", "1"], "fairseq-preprocess")
        os.replace(tmp, out)
    return out


def synthetic_vectors(work: str, data: str) -> str:
    """Random unit target vectors (m = SYNTHETIC_DIM, seed 1) for every word of the synthetic target dictionary."""
    path = os.path.join(work, f"random.en.{SYNTHETIC_DIM}d.vec")
    if not os.path.exists(path):
        run_tool(VECTORS + ["random", os.path.join(data, "dict.en.txt"), path, "--dim", str(SYNTHETIC_DIM),
                            "--seed", "1"], "outlayers-vectors random")
    return path


def synthetic_pairing(work: str, data: str) -> str:
    """The shared-private pairing of the synthetic corpus, from its exact alignment (the target is the source
    reversed), so no aligner needs to be installed."""
    from fairseq_outlayers.tools.synthetic import write_alignment

    path = os.path.join(work, "pairs.de-en.txt")
    if not os.path.exists(path):
        raw = os.path.join(work, "raw")
        align = write_alignment(raw, "train", os.path.join(work, "train.de-en.align"))
        run_tool(PAIRING + ["--src-text", os.path.join(raw, "train.de"), "--tgt-text", os.path.join(raw, "train.en"),
                            "--src-dict", os.path.join(data, "dict.de.txt"),
                            "--tgt-dict", os.path.join(data, "dict.en.txt"), "-o", path,
                            "--aligner", "pharaoh", "--alignment", align], "outlayers-pairing")
    return path


def train_command(args, name: str, precision: str, data: str, run_dir: str):
    """The outlayers-train command line of one run."""
    kind, options = METHODS[name]
    extra = list(options)
    if kind == "word":
        extra += ["--target-vectors", args.vectors]
    if kind == "pairing":
        extra += ["--pairing", args.pairing]
    return TRAIN + [data, "--arch", args.arch, "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr",
                    str(args.lr), "--lr-scheduler", "inverse_sqrt", "--warmup-updates",
                    str(min(4000, max(1, args.max_update // 4))), "--clip-norm", "1.0", "--max-tokens",
                    str(args.max_tokens), "--max-update", str(args.max_update), "--seed", "1", "--save-dir", run_dir,
                    "--no-save", "--log-format", "simple", "--log-interval", "10", "--no-progress-bar"] \
        + (["--cpu"] if args.device == "cpu" else []) + PRECISIONS[precision] + extra


def _run_logged(cmd, env, timeout):
    """(output, exit status or None when it timed out) of one training subprocess."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    with _LIVE_LOCK:
        _LIVE.add(proc)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return out, proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        return out, None
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)


def _stop_live():
    _STOPPING.set()
    with _LIVE_LOCK:
        procs = list(_LIVE)
    for proc in procs:
        proc.kill()


EXIT = re.compile(r"^# exit status (-?\d+|timed out)", re.M)


def run_one(args, name: str, precision: str, data: str) -> dict:
    """One run: ``loss`` (the final validation loss; nan when it failed or diverged), ``status`` (the exit status,
    "timed out", or None for an old log without one), ``seconds`` and ``reused`` (an existing log was read)."""
    run_dir = os.path.join(args.work_dir, f"{name}.{precision}")
    log = os.path.join(run_dir, "train.log")
    reused = os.path.exists(log)
    start = time.time()
    if not reused:
        os.makedirs(run_dir, exist_ok=True)
        cmd = train_command(args, name, precision, data, run_dir)
        out, code = _run_logged(cmd, child_env(getattr(args, "threads", None)), getattr(args, "run_timeout", None))
        if _STOPPING.is_set():  # killed because the sweep was interrupted: no log, so a rerun trains it again
            raise KeyboardInterrupt(f"{name} {precision} stopped")
        status = "timed out" if code is None else code
        text = out + f"\n# exit status {status}, {time.time() - start:.0f} s\n"
        with open(log + ".tmp", "w") as f:
            f.write(shlex.join(cmd) + "\n" + text)
        os.replace(log + ".tmp", log)
    with open(log) as f:
        text = f.read()
    found = VALID.findall(text)
    status = EXIT.findall(text)
    status = (status[-1] if status[-1] == "timed out" else int(status[-1])) if status else None
    return {"loss": float(found[-1]) if found else float("nan"), "status": status,
            "seconds": time.time() - start, "reused": reused}


def run_all(args, jobs, results=None):
    """Every (method, precision) of ``jobs`` ({(name, precision): data}), ``args.jobs`` at a time; a progress line
    per finished run. Returns {(name, precision): run_one's dict}, filled into ``results`` as runs finish (so that
    a caller still has the finished ones when a signal stops the sweep)."""
    results = {} if results is None else results
    total = len(jobs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_one, args, name, p, data): (name, p) for (name, p), data in jobs.items()}
        try:
            for future in concurrent.futures.as_completed(futures):
                key = futures[future]
                results[key] = r = future.result()
                notes = ["reused" if r["reused"] else f"{r['seconds']:.0f} s"]
                if r["status"] not in (0, None):
                    notes.append(f"exit status {r['status']}" if r["status"] != "timed out" else "timed out")
                print(f"[{len(results)}/{total}] {key[0]} {key[1]}: loss {r['loss']:.3f} ({', '.join(notes)})",
                      flush=True)
        except BaseException:
            for f in futures:
                f.cancel()
            _stop_live()
            raise
    return results


def _sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--data", help="binarised data (fairseq-preprocess output)")
    parser.add_argument("--joined-data", help="joined-dictionary data for tied-all (default: --data)")
    parser.add_argument("--word-data", help="word-level target data for the continuous methods")
    parser.add_argument("--vectors", help="target vectors for the continuous methods")
    parser.add_argument("--pairing", help="pairing file for shared-private")
    parser.add_argument("--synthetic", action="store_true",
                        help="make and use a small synthetic corpus, target vectors and pairing instead (an explicit "
                        "--data / --word-data / --vectors / --pairing still wins)")
    parser.add_argument("--methods", nargs="+", choices=sorted(METHODS), default=sorted(METHODS),
                        help="the table's rows, in this order")
    parser.add_argument("--precisions", nargs="+", choices=list(PRECISIONS), default=list(PRECISIONS))
    parser.add_argument("--arch", default="outlayers_transformer_tiny")
    parser.add_argument("--max-update", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--tolerance", type=float, default=0.02, help="relative; default 0.02")
    parser.add_argument("--jobs", type=int, default=1,
                        help="trainings run at a time (default 1); with N > 1 each gets OMP_NUM_THREADS = cores / N "
                        "unless OMP_NUM_THREADS is set")
    parser.add_argument("--run-timeout", type=float, default=None,
                        help="seconds before one run is stopped (its loss is then nan); default: no limit")
    parser.add_argument("--work-dir", default=os.path.join(REPO, "work", "precision"))
    benchlib.add_output_args(parser, os.path.join(REPO, "docs", "benchmarks", "precision.md"))
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.run_timeout is not None and args.run_timeout <= 0:
        parser.error("--run-timeout must be positive")
    benchlib.check_device(parser, args.device)
    os.makedirs(args.work_dir, exist_ok=True)  # first: --output may lie in it
    benchlib.check_output(args.output, args.force)
    if args.device == "cpu" and {"fp16", "amp"} & set(args.precisions):
        parser.error("fairseq trains --fp16 and --amp on CUDA only; on the CPU use --precisions fp32 bf16 mebf16")
    if "fp32" not in args.precisions:
        parser.error("--precisions must include fp32 (the reference)")
    args.threads = max(1, (os.cpu_count() or 1) // args.jobs) if args.jobs > 1 else None
    kinds = {METHODS[name][0] for name in args.methods}
    if args.synthetic:  # each synthetic file only where its option is not given, and only with its own data
        synthetic = synthetic_data(args.work_dir)
        own_data = args.own_synthetic = not args.data
        args.data = args.data or synthetic
        if "word" in kinds and not args.word_data and not args.vectors:
            args.word_data, args.vectors = synthetic, synthetic_vectors(args.work_dir, synthetic)
        if "pairing" in kinds and not args.pairing and own_data:
            args.pairing = synthetic_pairing(args.work_dir, synthetic)
    if not args.data:
        parser.error("give --data (or --synthetic)")
    data_of = {"data": args.data, "joined": args.joined_data or args.data, "word": args.word_data,
               "pairing": args.data}
    methods, skipped = [], []
    for name in dict.fromkeys(args.methods):  # a method named twice is one row
        kind = METHODS[name][0]
        missing = {"word": not (args.word_data and args.vectors), "pairing": not args.pairing}.get(kind, False)
        (skipped if missing else methods).append(name)
    start = time.time()
    jobs = {(name, p): data_of[METHODS[name][0]] for name in methods for p in args.precisions}
    _STOPPING.clear()
    in_main = threading.current_thread() is threading.main_thread()
    old_handler = signal.signal(signal.SIGTERM, _sigterm) if in_main else None  # SIGTERM stops the trainings too
    import torch  # before any signal: the table is written within the few seconds a stopped sweep has

    results, stopped = {}, None
    try:
        results = run_all(args, jobs, results)
    except KeyboardInterrupt as err:  # a signal or Ctrl-C: the table of what finished, then exit status 1
        stopped = str(err) or "interrupted"
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, old_handler)
    not_run = {"loss": float("nan"), "status": "not run"}
    rows = ["| method | " + " | ".join(args.precisions) + " | " + " | ".join(
        f"{p} vs fp32" for p in args.precisions if p != "fp32") + " |",
        "|---|" + "---|" * (2 * len(args.precisions) - 1)]
    failures, crashed = [], []
    for name in methods:
        done = {p: results.get((name, p), not_run) for p in args.precisions}
        losses = {p: done[p]["loss"] for p in args.precisions}
        crashed += [f"{name} {p} ({done[p]['status']})" for p in args.precisions
                    if done[p]["status"] not in (0, None, "not run")]
        ref = losses["fp32"]
        verdicts = []
        for p in args.precisions:
            if p == "fp32":
                continue
            if "not run" in (done[p]["status"], done["fp32"]["status"]):
                verdicts.append("not run")
                continue
            rel = (losses[p] - ref) / abs(ref) if math.isfinite(ref) and ref else float("nan")
            ok = math.isfinite(losses[p]) and abs(rel) <= args.tolerance
            verdicts.append(f"{rel * 100:+.1f} %" + ("" if ok else " **out**"))
            if not ok:
                failures.append(f"{name} {p}")
        rows.append(f"| {name} | " + " | ".join(f"{losses[p]:.3f}" for p in args.precisions) + " | "
                    + " | ".join(verdicts) + " |")
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else f"CPU ({os.cpu_count()} cores)"
    partial = []
    if stopped is not None:
        partial = [f"**Partial: stopped ({stopped}) with {len(results)} of {len(jobs)} runs finished (nan: not "
                   "run). The same command trains the rest: finished runs are read from --work-dir.**", ""]
    data_note = ("Data: the synthetic corpus (joined dictionary, 2000 training sentences, 300 words); random "
                 f"target vectors m = {SYNTHETIC_DIM}; pairing from the exact alignment." if getattr(args, "own_synthetic", False)
                 else f"Data: {args.data}.")
    text = "\n".join([
        "# Training precision: validation loss against fp32", "",
    ] + partial + [
        f"Command: `{benchlib.command_line('bench_precision.py', argv)}`", "",
        benchlib.stamp(args.device, start), "",
        f"Device: {device}; torch {torch.__version__}; {args.arch}, {args.max_update} updates, seed 1, "
        f"--max-tokens {args.max_tokens}, adam, lr {args.lr}; {args.jobs} run(s) at a time; "
        f"wall time {time.time() - start:.0f} s.", "",
        data_note, "",
        "Validation loss at the end of training as fairseq logs it (base 2; for the continuous methods their own "
        f"loss). vs fp32: relative difference; **out** = non-finite or beyond the tolerance of "
        f"{args.tolerance * 100:g} %. mebf16 = --memory-efficient-bf16.", "",
    ] + rows + [""] + ([f"Skipped (data not given): {', '.join(skipped)}.", ""] if skipped else [])
        + ([f"Runs that failed (exit status): {', '.join(crashed)}; see their train.log under --work-dir.", ""]
           if crashed else [])
        + [f"Outside the tolerance: {', '.join(failures) if failures else 'none'}.", ""])
    benchlib.finish(args.output, text)
    return 0 if stopped is None else 1


if __name__ == "__main__":
    sys.exit(main())
