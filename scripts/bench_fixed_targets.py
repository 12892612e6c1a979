#!/usr/bin/env python
"""Benchmark: the fixed random classifier against a learned softmax of the same shape, in one run.

For every vocabulary size it times the output layer plus the loss (fairseq's cross-entropy: log-softmax in float32
and a summed NLL) forward and backward on ``--tokens`` target positions of ``--dim``-dimensional decoder features
(the features require a gradient, as inside a model), measures the peak memory of that step above what was
allocated before it, and the optimiser (Adam) state each layer needs. The fixed layer has no weight gradient to
compute, store or update, so its backward should be about one matrix product cheaper.

    python scripts/bench_fixed_targets.py                   # V in {8000, 32000, 64000}, d = 512, 4096 tokens
    python scripts/bench_fixed_targets.py --device cuda     # on a GPU

CPU peak memory is the growth of the process's resident set (``VmHWM``, reset through ``/proc/self/clear_refs``)
during one step, measured in a fresh subprocess per layer; CUDA peak memory is ``torch.cuda.max_memory_allocated``.
Results are printed and written as markdown to ``--output`` (default ``docs/benchmarks/fixed_targets.md``).
"""
import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
from fairseq_outlayers.lab.bench import benchlib  # noqa: E402

from fairseq_outlayers.methods.fixed.fixed_random import FixedRandomOutput  # noqa: E402
from fairseq_outlayers.methods.baselines.softmax import LearnedSoftmaxOutput  # noqa: E402

METHODS = ("softmax", "fixed")
MiB = 2.0 ** 20


def make_layer(method, vocab, dim, device):
    torch.manual_seed(0)
    layer = LearnedSoftmaxOutput(vocab, dim) if method == "softmax" else FixedRandomOutput(vocab, dim, seed=1)
    return layer.to(device)


def make_inputs(vocab, dim, tokens, device):
    g = torch.Generator().manual_seed(0)
    features = torch.randn(tokens, dim, generator=g).to(device).requires_grad_(True)
    targets = torch.randint(0, vocab, (tokens,), generator=g).to(device)
    return features, targets


def loss_of(layer, features, targets):
    """fairseq's cross_entropy criterion on the layer's output: float32 log-softmax, summed NLL."""
    lprobs = layer.get_normalized_probs((layer(features),), log_probs=True)
    return F.nll_loss(lprobs, targets, reduction="sum")


def time_methods(vocab, dim, tokens, reps, device):
    """Median forward and backward seconds per method; the methods alternate within every repetition."""
    layers = {m: make_layer(m, vocab, dim, device) for m in METHODS}
    features, targets = make_inputs(vocab, dim, tokens, device)
    times = {m: {"fwd": [], "bwd": []} for m in METHODS}
    for rep in range(reps + 1):  # repetition 0 warms up
        for method in (METHODS if rep % 2 == 0 else METHODS[::-1]):
            layer = layers[method]
            benchlib.clear_grads(layer, features)
            benchlib.sync(device)
            t0 = time.perf_counter()
            loss = loss_of(layer, features, targets)
            benchlib.sync(device)
            t1 = time.perf_counter()
            loss.backward()
            benchlib.sync(device)
            t2 = time.perf_counter()
            if rep > 0:
                times[method]["fwd"].append(t1 - t0)
                times[method]["bwd"].append(t2 - t1)
            del loss
    return {m: {k: statistics.median(v) for k, v in times[m].items()} for m in METHODS}


def measure_memory(method, vocab, dim, tokens, device):
    """Peak bytes above the pre-step level during one forward+backward, and the layer's steady-state memory."""
    layer = make_layer(method, vocab, dim, device)
    features, targets = make_inputs(vocab, dim, tokens, device)
    loss_of(layer, features, targets).backward()  # warm-up: lazy initialisation happens outside the measurement
    benchlib.clear_grads(layer, features)
    gc.collect()
    with benchlib.peak_memory(device) as measured:
        loss_of(layer, features, targets).backward()
    peak = measured["bytes"]
    params = [p for p in layer.parameters() if p.requires_grad]
    grad_bytes = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    state_bytes = 0
    if params:
        optimizer = torch.optim.Adam(params, lr=1e-3)
        optimizer.step()
        state_bytes = sum(t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values()
                          if torch.is_tensor(t))
    param_bytes = sum(p.numel() * p.element_size() for p in layer.parameters())
    buffer_bytes = sum(b.numel() * b.element_size() for b in layer.buffers())
    return {
        "peak_step_bytes": peak,
        # what stays allocated between steps: weights (trained or fixed), weight gradients, optimiser state
        "resident_bytes": param_bytes + buffer_bytes + grad_bytes + state_bytes,
        "trained_params": sum(p.numel() for p in params),
        "fixed_buffer_bytes": buffer_bytes,
        "grad_bytes": grad_bytes,
        "adam_state_bytes": state_bytes,
    }


def memory_in_subprocess(args, method, vocab):
    cmd = [sys.executable, os.path.abspath(__file__), "--memory-probe", method, str(vocab), "--dim", str(args.dim),
           "--tokens", str(args.tokens), "--threads", str(args.threads), "--device", args.device]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def step_flops(method, tokens, dim, vocab):
    """fwd+bwd FLOP (fairseq_outlayers/lab/bench/benchlib.py): the fixed layer's matrix is frozen, so no weight gradient."""
    return benchlib.softmax_step_flops(tokens, dim, vocab, weight_grad=(method != "fixed"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[8000, 32000, 64000], help="vocabulary sizes")
    parser.add_argument("--dim", type=int, default=512, help="decoder output / classifier dimension d")
    parser.add_argument("--tokens", type=int, default=4096, help="target tokens per step")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions per layer (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: stable on a shared "
                        "machine)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    benchlib.add_output_args(parser, os.path.join(REPO, "docs", "benchmarks", "fixed_targets.md"))
    parser.add_argument("--memory-probe", nargs=2, metavar=("METHOD", "VOCAB"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    benchlib.check_device(parser, args.device)

    if args.memory_probe:  # internal: one measurement in a fresh process
        method, vocab = args.memory_probe[0], int(args.memory_probe[1])
        print(json.dumps(measure_memory(method, vocab, args.dim, args.tokens, args.device)))
        return 0

    benchlib.check_output(args.output, args.force)
    peak = benchlib.matmul_flops(args.device)
    rows = []
    for vocab in args.vocab:
        timing = time_methods(vocab, args.dim, args.tokens, args.reps, args.device)
        for method in METHODS:
            memory = (measure_memory(method, vocab, args.dim, args.tokens, args.device)
                      if args.device.startswith("cuda") else memory_in_subprocess(args, method, vocab))
            row = {"vocab": vocab, "method": method, **timing[method], **memory}
            row["total"] = row["fwd"] + row["bwd"]
            rows.append(row)
            print(f"V={vocab:>6} {method:<8} fwd {row['fwd'] * 1e3:8.1f} ms  bwd {row['bwd'] * 1e3:8.1f} ms  "
                  f"peak {row['peak_step_bytes'] / MiB:8.1f} MiB  Adam state {row['adam_state_bytes'] / MiB:7.1f} MiB",
                  flush=True)

    command = benchlib.command_line("bench_fixed_targets.py", argv)
    lines = [
        "# Benchmark: fixed random classifier vs learned softmax (output layer + loss)",
        "",
        f"Command: `{command}`  ",
        benchlib.stamp(args.device) + "  ",
        f"Machine: {args.device} ({platform.processor() or platform.machine()}, {args.threads} thread(s)); torch "
        f"{torch.__version__}",
        "",
        f"d = {args.dim}, {args.tokens} target tokens per step, float32; time = median of {args.reps} repetitions "
        "after a warm-up, the two layers alternating; the loss is fairseq's cross-entropy (float32 log-softmax, "
        "summed NLL); the decoder features require a gradient, as in a model. Peak = memory growth during one "
        "forward+backward above the level before it (CPU: resident-set high-water mark in a fresh process; "
        "CUDA: max_memory_allocated); it is dominated by the tokens x V logits and their gradients, which both "
        "layers need. Adam state = exp_avg + exp_avg_sq (+ step) of the layer's trained parameters; "
        "weights+grad+Adam = what the layer keeps allocated between steps (its weights, trained or fixed, their "
        "gradients and the optimiser state).",
        "",
        "| V | layer | forward ms | backward ms | fwd+bwd ms | peak step MiB | trained params | weight grad MiB "
        "| Adam state MiB | fixed buffers MiB | weights+grad+Adam MiB | achieved GFLOP/s |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(f"| {r['vocab']} | {r['method']} | {r['fwd'] * 1e3:.1f} | {r['bwd'] * 1e3:.1f} | "
                     f"{r['total'] * 1e3:.1f} | {r['peak_step_bytes'] / MiB:.1f} | {r['trained_params']:,} | "
                     f"{r['grad_bytes'] / MiB:.1f} | {r['adam_state_bytes'] / MiB:.1f} | "
                     f"{r['fixed_buffer_bytes'] / MiB:.1f} | {r['resident_bytes'] / MiB:.1f} | "
                     f"{benchlib.gflops(step_flops(r['method'], args.tokens, args.dim, r['vocab']) / r['total'])} |")
    lines += ["", "Ratios fixed / softmax (below 1: the fixed layer is cheaper):", "",
              "| V | forward | backward | fwd+bwd | peak step memory | Adam state | weights+grad+Adam |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for vocab in args.vocab:
        s, f = (next(r for r in rows if r["vocab"] == vocab and r["method"] == m) for m in METHODS)
        cells = [benchlib.ratio(f[k], s[k]) for k in ("fwd", "bwd", "total", "peak_step_bytes", "adam_state_bytes",
                                                      "resident_bytes")]
        lines.append(f"| {vocab} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    lines += ["", benchlib.flops_note(args.device, peak) + " Counts: 6 N d V for the learned softmax, 4 N d V for "
              "the fixed layer (its frozen V x d matrix gets no weight gradient)."]
    text = "\n".join(lines) + "\n"
    benchlib.finish(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
