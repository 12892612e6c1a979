#!/usr/bin/env python
"""Training speed and peak memory of the joint output layer vs tied and untied softmax, full and sampled.

A mirror of Pappas et al. (2018), Table 4, in one run: target tokens processed per second during training for

* NMT (untied softmax), NMT-tied, and NMT-joint with each d_j in ``--joint-dims``,
* at each vocabulary size in ``--vocab`` (paper: |V| ~ 32K and ~128K),
* with the full softmax and with negative sampling at each ratio in ``--ratios`` (paper: 50 %, 25 %, 5 %),

plus the peak memory of each configuration. Only the output side is measured: a *decoder stand-in* feeds a
fixed batch of ``--tokens`` decoder states (a leaf tensor that receives gradients, like a decoder's output) into
the output layer, computes the loss (``F.cross_entropy`` for the full softmax, the ``sampled_softmax``
criterion's functions for sampling), runs backward and an Adam step over the output layer and the target
embedding. Target ids follow a Zipf law (frequency ~ 1/rank) so that the number of distinct targets per batch,
which V' must contain, is realistic.

Speed: all configurations of one vocabulary size live in one process and their steps are interleaved round by
round; the fastest round counts. Memory: each (model, vocabulary) pair runs again in its own process, ratios from
the smallest to the full softmax, so that the process's peak resident memory after each ratio is that ratio's
peak (CPU); on CUDA the allocator's peak is reset per configuration. Results: a markdown table with tokens/s, ratios to the tied model and to the same
model's full softmax, and peak memory, written to ``--output``.

Batches are realistic by default: 4096 target tokens (at a few hundred tokens, computing g_out(E) over the whole
vocabulary once per step dominates and the joint layer looks slower than it is in training); on a GPU use the
paper's d = 512 (the default). Each table has an achieved-GFLOP/s column, counted as in
fairseq_outlayers/lab/bench/benchlib.py (6 N H V for a softmax step, 6 (N d_j V + V d d_j + N H d_j) for the joint layer, with |V'| for sampling), next
to the device's measured float32 matmul FLOP/s.

Example (the CPU run in docs/benchmarks/joint_output.md):
    OMP_NUM_THREADS=1 python scripts/bench_joint_output.py --dim 128 --joint-dims 128 --vocab 32000 --threads 1
"""
import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from fairseq_outlayers.lab.bench import benchlib  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def max_rss_mib() -> float:
    """This process's resident high-water mark (VmHWM; unlike ru_maxrss it does not carry the parent's peak
    across fork + exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build_layer(model: str, vocab: int, dim: int, joint_dim: int, device):
    import torch.nn as nn

    from fairseq_outlayers.methods.joint.joint_output import JointOutputLayer
    from fairseq_outlayers.methods.baselines.softmax import LearnedSoftmaxOutput, TiedSoftmaxOutput

    embedding = nn.Embedding(vocab, dim, padding_idx=1)
    nn.init.normal_(embedding.weight, 0.0, dim ** -0.5)
    if model == "untied":
        layer = LearnedSoftmaxOutput(vocab, dim, bias=True)
    elif model == "tied":
        layer = TiedSoftmaxOutput(embedding, dim, bias=True)
    else:
        layer = JointOutputLayer(embedding, dim, joint_dim=joint_dim)
    return embedding.to(device), layer.to(device)


class Config:
    """One model at one vocabulary size: its layer, target embedding, optimizer and a fixed batch."""

    def __init__(self, label, model, joint_dim, vocab, dim, tokens, device):
        import torch

        torch.manual_seed(0)
        self.label, self.vocab, self.tokens, self.device = label, vocab, tokens, device
        self.embedding, self.layer = build_layer(model, vocab, dim, joint_dim, device)
        params = list({id(p): p for p in list(self.embedding.parameters()) + list(self.layer.parameters())}.values())
        self.optimizer = torch.optim.Adam(params, lr=1e-4)
        zipf = 1.0 / torch.arange(1, vocab - 3, dtype=torch.float)
        self.targets = (torch.multinomial(zipf, tokens, replacement=True) + 4).to(device)  # no special symbol
        self.features = torch.randn(tokens, dim, device=device, requires_grad=True)
        self.gen = torch.Generator(device=device)

    def step(self, ratio: float, seed: int) -> int:
        """One training step of the output side; returns |V'|."""
        import torch
        import torch.nn.functional as F

        from fairseq_outlayers.losses.negative_sampling import sample_vocabulary

        self.optimizer.zero_grad(set_to_none=False)
        self.features.grad = None
        if ratio >= 1.0:
            loss = F.cross_entropy(self.layer(self.features), self.targets, reduction="sum")
            v_sampled = self.vocab
        else:
            self.gen.manual_seed(seed)
            ids, remapped = sample_vocabulary(self.targets, self.vocab, ratio, pad=1, generator=self.gen)
            # the sampled-softmax criterion's loss at label smoothing 0: cross-entropy over V'
            loss = F.cross_entropy(self.layer.sampled_logits(self.features, ids).float(), remapped, reduction="sum")
            v_sampled = ids.numel()
        loss.backward()
        self.optimizer.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return v_sampled


def time_configs(models, vocab: int, args) -> list:
    """Interleaved timing: every round runs one step of every (model, ratio), so that a busy period of a shared
    machine slows all configurations alike; reports the fastest round of each (and the median)."""
    import torch

    device = torch.device(args.device)
    configs = [Config(label, model, dj, vocab, args.dim, args.tokens, device) for label, model, dj in models]
    times = {(c.label, r): [] for c in configs for r in args.ratios}
    sizes = {}
    for rnd in range(args.warmup + args.steps):
        for c in configs:
            for r in args.ratios:
                t0 = time.perf_counter()
                sizes[r] = c.step(r, seed=rnd)
                if rnd >= args.warmup:
                    times[(c.label, r)].append(time.perf_counter() - t0)
    results = []
    for (label, r), ts in times.items():
        model, dj = next((m, d) for lab, m, d in models if lab == label)
        flops = (benchlib.joint_step_flops(args.tokens, args.dim, args.dim, dj, sizes[r]) if model == "joint"
                 else benchlib.softmax_step_flops(args.tokens, args.dim, sizes[r]))
        results.append({"model": label, "vocab": vocab, "ratio": r, "tokens_per_s": args.tokens / min(ts),
                        "gflops": flops / min(ts) / 1e9,
                        "tokens_per_s_median": args.tokens / statistics.median(ts), "step_s": min(ts),
                        "sampled_vocab": sizes[r]})
    del configs
    return results


def memory_worker(spec: dict) -> dict:
    """Peak memory of one (model, vocabulary) pair at each ratio, smallest ratio first (so that the process's
    high-water mark after a ratio is that ratio's peak on the CPU)."""
    import torch

    # every module a step needs, imported before the baseline (pure torch: no fairseq)
    import fairseq_outlayers.methods.joint.joint_output  # noqa: F401
    import fairseq_outlayers.losses.negative_sampling  # noqa: F401
    import fairseq_outlayers.methods.baselines.softmax  # noqa: F401

    device = torch.device(spec["device"])
    cuda = device.type == "cuda"
    base_rss = rss_mib()
    c = Config(spec["label"], spec["model"], spec["joint_dim"], spec["vocab"], spec["dim"], spec["tokens"], device)
    peaks = {}
    for r in sorted(spec["ratios"]):
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        c.step(r, seed=0)
        peaks[str(r)] = (torch.cuda.max_memory_allocated(device) / 2 ** 20) if cuda else (max_rss_mib() - base_rss)
    return peaks


def run_worker_process(spec: dict) -> dict:
    env = dict(os.environ)
    env.setdefault("PYTHONWARNINGS", "ignore")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--threads", str(spec["threads"]),
                           "--worker", json.dumps(spec)], capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"worker failed for {spec}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fmt_ratio(r: float) -> str:
    return "full" if r >= 1.0 else f"{100 * r:g} %"


def report(results: list, args, wall: float) -> str:
    import torch

    by = {(r["model"], r["vocab"], r["ratio"]): r for r in results}
    models = []
    for r in results:
        if r["model"] not in models:
            models.append(r["model"])
    ratios = sorted(set(args.ratios), reverse=True)
    mem_unit = "MiB (CUDA allocator peak)" if args.device.startswith("cuda") else \
        "MiB (peak resident memory above the process's baseline after imports)"
    lines = [
        "# Joint input-output output layer: training speed and memory (mirror of Pappas et al. 2018, Table 4)",
        "",
        f"Command: `{benchlib.command_line('bench_joint_output.py', args.argv)}`",
        "",
        benchlib.stamp(args.device),
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device `{args.device}`; "
        f"total wall time {wall:.0f} s.",
        "",
        f"Decoder stand-in: {args.tokens} target tokens per batch (Zipf-distributed ids), d = d_h = {args.dim}; "
        "each step is output layer forward + loss + backward + Adam step over the output layer and the target "
        f"embedding. Speed = tokens / the fastest of {args.steps} timed steps (after {args.warmup} warm-up "
        "round(s)); the steps of all configurations are interleaved round by round, so that load from other "
        "processes on a shared machine hits them alike (the median is in the console log). "
        "Joint layers: full structure (eq. 15), tanh. Untied and tied softmax have a per-word bias, as the joint "
        "layer does.",
        "",
    ]
    if args.dim != 512:
        lines += [f"The paper's models use d = 512 and d_j in 512/2048/4096. This run scales every width by "
                  f"{args.dim}/512 so that it fits a small CPU in a few minutes; the ratios d_j/d are the paper's.",
                  ""]
    for vocab in args.vocab:
        heads = (["model"] + [f"{fmt_ratio(r)} tok/s" for r in ratios]
                 + [f"{fmt_ratio(r)} vs full" for r in ratios if r < 1] + ["full vs tied"]
                 + [f"{fmt_ratio(r)} peak MiB" for r in ratios] + [f"{fmt_ratio(r)} GFLOP/s" for r in ratios])
        lines += [f"## |V| = {vocab:,}", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        for m in models:
            row = [by.get((m, vocab, r)) for r in ratios]
            if any(x is None for x in row):
                continue
            full = by.get((m, vocab, 1.0))
            tied_full = by.get(("tied", vocab, 1.0))
            cells = [f"{x['tokens_per_s']:,.0f}" for x in row]
            cells += [f"{x['tokens_per_s'] / full['tokens_per_s']:.2f}x" for x in row if x["ratio"] < 1]
            cells.append(f"{full['tokens_per_s'] / tied_full['tokens_per_s']:.2f}" if tied_full else "-")
            cells += [f"{x['peak_mib']:,.0f}" for x in row]
            cells += [f"{x['gflops']:,.1f}" for x in row]
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        sizes = [by[(models[0], vocab, r)]["sampled_vocab"] for r in ratios]
        lines += ["", "Sampled vocabulary |V'| per step: "
                  + ", ".join(f"{fmt_ratio(r)}: {s:,}" for r, s in zip(ratios, sizes)), ""]
    # the targets
    lines += ["## Targets", ""]
    first_joint = f"joint-{args.joint_dims[0]}"
    for vocab in args.vocab:
        for r in ratios:
            j, t = by.get((first_joint, vocab, r)), by.get(("tied", vocab, r))
            if j and t:
                q = j["tokens_per_s"] / t["tokens_per_s"]
                lines.append(f"- |V| = {vocab:,}, {fmt_ratio(r)}: {first_joint} / tied speed = {q:.2f} "
                             f"({'within' if q >= 0.9 else 'NOT within'} 10 %)")
    big = max(args.vocab)
    if 0.25 in ratios:
        for m in models:
            s, f = by.get((m, big, 0.25)), by.get((m, big, 1.0))
            if s and f:
                q = s["tokens_per_s"] / f["tokens_per_s"]
                lines.append(f"- |V| = {big:,}, {m}: 25 % sampling / full softmax speed = {q:.2f}x "
                             f"({'meets' if q >= 2 else 'does NOT meet'} the 2x target)")
    lines += ["", benchlib.flops_note(args.device, args.matmul_flops) + " Counts: 6 N d V (untied, tied), "
              "6 (N d_j V + V d d_j + N d d_j) (joint), V = |V'| with sampling.", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dim", type=int, default=512, help="d = d_h (default: 512, the paper's)")
    parser.add_argument("--joint-dims", type=int, nargs="+", default=[512, 2048, 4096],
                        help="joint sizes d_j (default: 512 2048 4096)")
    parser.add_argument("--vocab", type=int, nargs="+", default=[32000, 128000], help="vocabulary sizes")
    parser.add_argument("--ratios", type=float, nargs="+", default=[1.0, 0.5, 0.25, 0.05],
                        help="sampling ratios, 1 = full softmax (default: 1 0.5 0.25 0.05)")
    parser.add_argument("--tokens", type=int, default=4096, help="target tokens per batch (default: 4096)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per configuration (default: 3)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up steps per configuration (default: 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    benchlib.add_output_args(parser, os.path.join(REPO, "docs", "benchmarks", "joint_output.md"))
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads (default: torch's choice; 1 is steadier on a busy machine)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = argv
    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(memory_worker(json.loads(args.worker))))
        return
    if any(not 0 < r <= 1 for r in args.ratios):
        raise SystemExit("--ratios must lie in (0, 1]")
    if 1.0 not in args.ratios:
        args.ratios.append(1.0)
    models = [("untied", "untied", 0), ("tied", "tied", 0)] + [(f"joint-{dj}", "joint", dj) for dj in args.joint_dims]
    args.ratios = sorted(set(args.ratios), reverse=True)
    benchlib.check_output(args.output, args.force)
    start = time.time()
    args.matmul_flops = benchlib.matmul_flops(args.device)
    results = []
    for vocab in args.vocab:
        rows = time_configs(models, vocab, args)
        for label, model, dj in models:
            spec = {"label": label, "model": model, "joint_dim": dj, "vocab": vocab, "dim": args.dim,
                    "tokens": args.tokens, "ratios": args.ratios, "device": args.device,
                    "threads": torch.get_num_threads()}
            peaks = run_worker_process(spec)
            for r in rows:
                if r["model"] == label:
                    r["peak_mib"] = peaks[str(r["ratio"])]
        for r in rows:
            print(f"{r['model']:>11} |V|={vocab:>7} {fmt_ratio(r['ratio']):>6}: {r['tokens_per_s']:>10,.0f} tok/s "
                  f"(best {r['step_s'] * 1000:.0f} ms/step, median {r['tokens_per_s_median']:,.0f} tok/s, "
                  f"|V'|={r['sampled_vocab']:,}, peak {r['peak_mib']:,.0f} MiB)", flush=True)
        results += rows
    text = report(results, args, time.time() - start)
    benchlib.finish(args.output, text)


if __name__ == "__main__":
    main()
