#!/usr/bin/env python
"""Validation loss of every method in each training precision, against the same method in fp32.

For each method in ``--methods`` and precision in ``--precisions`` (fp32, fp16, amp, bf16, mebf16 =
--memory-efficient-bf16) one ``outlayers-train`` run of ``--max-update`` updates from the same seed, then the
validation loss that fairseq logs at the end. A precision passes when its loss is finite and within
``--tolerance`` (relative, default 2 %) of the method's fp32 loss; the table writes every figure. Runs go to
``--work-dir`` (one directory per run, its log kept as ``train.log``; an existing log is reused, so a cut-off
sweep resumes).

GPU run (Multi30k, the issue's table; vectors / pairing / word-level data as scripts/demo.sh makes them):
    python scripts/bench_precision.py --device cuda --data work/multi30k/data-bin/de-en \\
        --word-data work/multi30k/data-bin/de-en-word --vectors work/multi30k/vectors.word.en.300d.vec \\
        --pairing work/multi30k/data-bin/de-en/pairs.de-en.txt --max-update 300 \\
        --output docs/benchmarks/precision_gpu.md
CPU run (docs/benchmarks/precision_cpu.md; fairseq runs fp16 and --amp on CUDA only):
    python scripts/bench_precision.py --device cpu --synthetic --precisions fp32 bf16 mebf16 --max-update 40 \\
        --methods softmax softmax-fused tied tied-all joint joint-fused fixed sampled \\
        --output docs/benchmarks/precision_cpu.md
"""
import argparse
import math
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts", "lib"))
sys.path.insert(0, REPO)
import benchlib  # noqa: E402

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


def synthetic_data(work: str) -> str:
    """A small synthetic corpus (fairseq_outlayers.tools.synthetic), binarised with one joined dictionary."""
    from fairseq_outlayers.tools.synthetic import write_corpus

    out = os.path.join(work, "data-bin")
    if not os.path.exists(os.path.join(out, "dict.en.txt")):
        raw = write_corpus(os.path.join(work, "raw"), (("train", 2000), ("valid", 200)), vocab=300)
        subprocess.run([os.path.join(os.path.dirname(sys.executable), "fairseq-preprocess"), "--source-lang", "de",
                        "--target-lang", "en", "--trainpref", os.path.join(raw, "train"), "--validpref",
                        os.path.join(raw, "valid"), "--destdir", out, "--joined-dictionary", "--workers", "1"],
                       check=True, capture_output=True)
    return out


def run_one(args, name: str, precision: str, data: str) -> float:
    """The final validation loss of one run (nan when it failed or diverged)."""
    kind, options = METHODS[name]
    run_dir = os.path.join(args.work_dir, f"{name}.{precision}")
    log = os.path.join(run_dir, "train.log")
    if not os.path.exists(log):
        os.makedirs(run_dir, exist_ok=True)
        extra = list(options)
        if kind == "word":
            extra += ["--target-vectors", args.vectors]
        if kind == "pairing":
            extra += ["--pairing", args.pairing]
        cmd = [os.path.join(os.path.dirname(sys.executable), "outlayers-train"), data, "--arch", args.arch,
               "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", str(args.lr), "--lr-scheduler",
               "inverse_sqrt", "--warmup-updates", str(min(4000, max(1, args.max_update // 4))), "--clip-norm", "1.0",
               "--max-tokens", str(args.max_tokens), "--max-update", str(args.max_update), "--seed", "1",
               "--save-dir", run_dir, "--no-save", "--log-format", "simple", "--log-interval", "10",
               "--no-progress-bar"] + (["--cpu"] if args.device == "cpu" else []) + PRECISIONS[precision] + extra
        start = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        text = proc.stdout + proc.stderr + f"\n# exit status {proc.returncode}, {time.time() - start:.0f} s\n"
        with open(log + ".tmp", "w") as f:
            f.write(" ".join(cmd) + "\n" + text)
        os.replace(log + ".tmp", log)
    with open(log) as f:
        found = VALID.findall(f.read())
    return float(found[-1]) if found else float("nan")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--data", help="binarised data (fairseq-preprocess output)")
    parser.add_argument("--joined-data", help="joined-dictionary data for tied-all (default: --data)")
    parser.add_argument("--word-data", help="word-level target data for the continuous methods")
    parser.add_argument("--vectors", help="target vectors for the continuous methods")
    parser.add_argument("--pairing", help="pairing file for shared-private")
    parser.add_argument("--synthetic", action="store_true", help="make and use a small synthetic corpus instead")
    parser.add_argument("--methods", nargs="+", choices=sorted(METHODS), default=sorted(METHODS))
    parser.add_argument("--precisions", nargs="+", choices=list(PRECISIONS), default=list(PRECISIONS))
    parser.add_argument("--arch", default="outlayers_transformer_tiny")
    parser.add_argument("--max-update", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--tolerance", type=float, default=0.02, help="relative; default 0.02")
    parser.add_argument("--work-dir", default=os.path.join(REPO, "work", "precision"))
    benchlib.add_output_args(parser, os.path.join(REPO, "docs", "benchmarks", "precision.md"))
    args = parser.parse_args(argv)
    benchlib.check_device(parser, args.device)
    benchlib.check_output(args.output, args.force)
    if args.device == "cpu" and {"fp16", "amp"} & set(args.precisions):
        parser.error("fairseq trains --fp16 and --amp on CUDA only; on the CPU use --precisions fp32 bf16 mebf16")
    if "fp32" not in args.precisions:
        parser.error("--precisions must include fp32 (the reference)")
    os.makedirs(args.work_dir, exist_ok=True)
    if args.synthetic:
        args.data = args.joined_data = synthetic_data(args.work_dir)
    if not args.data:
        parser.error("give --data (or --synthetic)")
    data_of = {"data": args.data, "joined": args.joined_data or args.data, "word": args.word_data,
               "pairing": args.data}
    methods, skipped = [], []
    for name in args.methods:
        kind = METHODS[name][0]
        missing = {"word": not (args.word_data and args.vectors), "pairing": not args.pairing}.get(kind, False)
        (skipped if missing else methods).append(name)
    start = time.time()
    rows = ["| method | " + " | ".join(args.precisions) + " | " + " | ".join(
        f"{p} vs fp32" for p in args.precisions if p != "fp32") + " |",
        "|---|" + "---|" * (2 * len(args.precisions) - 1)]
    failures = []
    for name in methods:
        losses = {p: run_one(args, name, p, data_of[METHODS[name][0]]) for p in args.precisions}
        print(name, losses, flush=True)
        ref = losses["fp32"]
        verdicts = []
        for p in args.precisions:
            if p == "fp32":
                continue
            rel = (losses[p] - ref) / abs(ref) if math.isfinite(ref) and ref else float("nan")
            ok = math.isfinite(losses[p]) and abs(rel) <= args.tolerance
            verdicts.append(f"{rel * 100:+.1f} %" + ("" if ok else " **out**"))
            if not ok:
                failures.append(f"{name} {p}")
        rows.append(f"| {name} | " + " | ".join(f"{losses[p]:.3f}" for p in args.precisions) + " | "
                    + " | ".join(verdicts) + " |")
    import torch

    device = torch.cuda.get_device_name(0) if args.device == "cuda" else f"CPU ({os.cpu_count()} cores)"
    text = "\n".join([
        "# Training precision: validation loss against fp32", "",
        f"Command: `{benchlib.command_line('bench_precision.py', argv)}`", "",
        f"Device: {device}; torch {torch.__version__}; {args.arch}, {args.max_update} updates, seed 1, "
        f"--max-tokens {args.max_tokens}, adam, lr {args.lr}; wall time {time.time() - start:.0f} s.", "",
        "Validation loss at the end of training as fairseq logs it (base 2; for the continuous methods their own "
        f"loss). vs fp32: relative difference; **out** = non-finite or beyond the tolerance of "
        f"{args.tolerance * 100:g} %. mebf16 = --memory-efficient-bf16.", "",
    ] + rows + [""] + ([f"Skipped (data not given): {', '.join(skipped)}.", ""] if skipped else [])
        + [f"Outside the tolerance: {', '.join(failures) if failures else 'none'}.", ""])
    benchlib.finish(args.output, text)


if __name__ == "__main__":
    main()
