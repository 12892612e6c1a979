#!/usr/bin/env python
"""Time and peak memory of the fused cross-entropy (``--criterion fused_cross_entropy``) against the plain one.

Two tables per vocabulary size V in ``--vocab``:

* **layer**: a decoder stand-in (a leaf tensor of ``--tokens`` states of size ``--dim``, Zipf-distributed target
  ids, 5 % padding) feeds the output layer (``--layers``: untied softmax with a bias, joint with d_j = d); one step
  is forward + label-smoothed loss + backward. ``plain`` = the layer's logits, ``log_softmax`` in float32 and
  fairseq's ``label_smoothed_nll_loss`` (what ``label_smoothed_cross_entropy`` does); ``torch`` / ``cce`` = the
  fused loss from the layer's ``logit_factors``;
* **model**: the same step through a whole ``outlayers_transformer`` (``--model-arch``, tied output layer) and
  the two fairseq criterions, on a synthetic batch with ``--tokens`` target tokens.

Precisions (``--dtypes``): fp32, and on CUDA bf16 / fp16 (the model and the features converted, as fairseq's
Trainer does for --bf16 / --fp16). Each configuration: ``--warmup`` untimed rounds, then the fastest of
``--repeats`` timed rounds (each round runs every implementation once, in a rotated order); peak memory = the
CUDA allocator's peak above the level before the step (CPU: the resident-set high-water mark). An out-of-memory step is reported as ``OOM``.

With ``--peers``, one table per size (``--sizes NxDxV``) and label smoothing (``--smoothing``) instead: the loss
alone (x, W and b leaves) through fairseq's plain loss, torch's ``F.linear_cross_entropy`` (reference path and
chunked path), every ``--fused-impl`` of this package at several block sizes, and on CUDA Cut Cross-Entropy and
Liger's fused linear cross-entropy where they import; time in rounds, memory, error against float64
(``fairseq_outlayers/lab/bench/fused_peers.py``). The CPU page:
    OMP_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=65536 python scripts/bench_fused_loss.py --peers --device cpu \
        --sizes 2048x256x32000 2048x256x50000 --output docs/benchmarks/fused_loss_peers_cpu.md

GPU run (H100, the issue's table):
    python scripts/bench_fused_loss.py --device cuda --output docs/benchmarks/fused_loss_gpu.md
CPU run (docs/benchmarks/fused_loss_cpu.md; a fixed malloc mmap threshold returns freed blocks to the system, so
that the resident-set peak of each step is its own):
    OMP_NUM_THREADS=2 MALLOC_MMAP_THRESHOLD_=65536 python scripts/bench_fused_loss.py --device cpu \\
        --vocab 32000 50000 --tokens 1024 --dim 256 --dtypes fp32 --impls plain torch --layers softmax joint \\
        --model-arch outlayers_transformer_tiny --repeats 3 --output docs/benchmarks/fused_loss_cpu.md
"""
import argparse
import os
import platform
import shutil
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from fairseq_outlayers import USER_DIR  # noqa: E402
from fairseq_outlayers.lab.bench import benchlib  # noqa: E402

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
#: the environment that changes the figures, written before the command in the report
ENV = "".join(f"{k}={os.environ[k]} " for k in ("OMP_NUM_THREADS", "MALLOC_MMAP_THRESHOLD_") if k in os.environ)
PAD = 1


def zipf_targets(n: int, vocab: int, generator):
    """``n`` ids in [4, vocab) with frequency ~ 1/rank, 5 % of them padding."""
    import torch

    ranks = torch.arange(1, vocab - 3, dtype=torch.float64)
    ids = torch.multinomial(1.0 / ranks, n, replacement=True, generator=generator) + 4
    ids[torch.rand(n, generator=generator) < 0.05] = PAD
    return ids


def build_layer(name: str, vocab: int, dim: int):
    import torch.nn as nn

    from fairseq_outlayers.methods.joint.joint_output import JointOutputLayer
    from fairseq_outlayers.methods.baselines.softmax import LearnedSoftmaxOutput

    embedding = nn.Embedding(vocab, dim, padding_idx=PAD)
    nn.init.normal_(embedding.weight, 0.0, dim ** -0.5)
    if name == "softmax":
        return embedding, LearnedSoftmaxOutput(vocab, dim, bias=True)
    if name == "joint":
        return embedding, JointOutputLayer(embedding, dim, joint_dim=dim)
    raise SystemExit(f"error: unknown --layers entry {name!r} (softmax, joint)")


def layer_loss(impl: str, layer, features, target, eps: float):
    import torch.nn.functional as F
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

    from fairseq_outlayers.losses.linear_cross_entropy import linear_cross_entropy

    if impl == "plain":
        lprobs = F.log_softmax(layer(features).float(), dim=-1)
        return label_smoothed_nll_loss(lprobs, target, eps, ignore_index=PAD)[0]
    return linear_cross_entropy(*layer.logit_factors(features), target, eps, ignore_index=PAD, impl=impl)[0]


def measure(steps, device, warmup: int, repeats: int):
    """{name: (best seconds, peak bytes)} of each ``steps[name]()``, or (None, None) when it runs out of memory.
    Interleaved: each round runs every step once, in an order rotated by one per round, so that the machine's
    drift touches every step alike."""
    import torch

    best = {name: float("inf") for name in steps}
    peak = {name: 0 for name in steps}
    names = list(steps)
    for r in range(warmup + repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            if best[name] is None:
                continue
            try:
                with benchlib.peak_memory(device) as mem:
                    benchlib.sync(device)
                    t0 = time.perf_counter()
                    steps[name]()
                    benchlib.sync(device)
                    dt = time.perf_counter() - t0
                if r >= warmup:
                    best[name] = min(best[name], dt)
                    peak[name] = max(peak[name], mem["bytes"])
            except torch.cuda.OutOfMemoryError:
                best[name] = peak[name] = None
            finally:
                if str(device).startswith("cuda"):
                    torch.cuda.empty_cache()
    return {name: (best[name], peak[name]) for name in names}


REFUSED = {}  # (impl, dtype name) -> why that implementation has no rows in that dtype (the page says)


def impls_for(impls, device, dtype):
    """``impls`` less Cut Cross-Entropy where it fails its check in ``dtype`` (its backward refuses float32)."""
    import torch

    from fairseq_outlayers.losses.linear_cross_entropy import check_cce

    why = check_cce(torch.device(device), dtype) if "cce" in impls else None
    if why:
        REFUSED[("cce", str(dtype).replace("torch.", ""))] = why
    return [impl for impl in impls if not (impl == "cce" and why)]


def layer_rows(args, vocab: int, device):
    import torch

    rows = []
    gen = torch.Generator().manual_seed(0)
    target = zipf_targets(args.tokens, vocab, gen).to(device)
    for name in args.layers:
        embedding, layer = build_layer(name, vocab, args.dim)
        for dtype_name in args.dtypes:
            dtype = getattr(torch, DTYPES[dtype_name])
            embedding.to(device, dtype)
            layer.to(device, dtype).train()
            features = torch.randn(args.tokens, args.dim, generator=gen).to(device, dtype).requires_grad_()
            def step_of(impl):
                def step():
                    features.grad = None
                    layer.zero_grad(set_to_none=True)
                    embedding.zero_grad(set_to_none=True)
                    layer_loss(impl, layer, features, target, args.label_smoothing).backward()
                return step

            got = measure({impl: step_of(impl) for impl in impls_for(args.impls, device, dtype)}, device,
                          args.warmup, args.repeats)
            for impl, (seconds, peak) in got.items():
                rows.append((name, dtype_name, impl, seconds, peak))
                print(f"layer V={vocab} {name} {dtype_name} {impl}: {seconds} s, {peak} B", flush=True)
        del embedding, layer
    return rows


def build_model(arch: str, vocab: int, device, dtype, extra=()):
    """An outlayers_transformer with a V-word joined dictionary (no data: dictionaries only)."""
    from fairseq import options, tasks

    import fairseq_outlayers.models  # noqa: F401  (fairseq skips a --user-dir already imported: register here)

    work = tempfile.mkdtemp(prefix="bench_fused_")
    for lang in ("de", "en"):
        with open(os.path.join(work, f"dict.{lang}.txt"), "w") as f:
            f.writelines(f"w{i} {vocab - i}\n" for i in range(vocab - 4))
    parser = options.get_training_parser()
    argv = [work, "--user-dir", USER_DIR, "--task", "translation", "--source-lang",
            "de", "--target-lang", "en", "--arch", arch, "--output-layer", "tied", "--dropout", "0.0",
            "--criterion", "label_smoothed_cross_entropy"] + list(extra)
    try:
        targs = options.parse_args_and_arch(parser, argv)
        task = tasks.setup_task(targs)
        model = task.build_model(targs).to(device, dtype).train()
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the dictionaries: read by the task, not needed after
    return task, model


def model_rows(args, vocab: int, device):
    import torch
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    from fairseq_outlayers.losses.fused_cross_entropy import FusedCrossEntropyCriterion

    rows = []
    gen = torch.Generator().manual_seed(1)
    length = 32
    batch = max(1, args.tokens // length)
    for dtype_name in args.dtypes:
        dtype = getattr(torch, DTYPES[dtype_name])
        task, model = build_model(args.model_arch, vocab, device, dtype)
        target = zipf_targets(batch * length, vocab, gen).view(batch, length).to(device)
        prev = torch.cat([torch.full((batch, 1), 2, dtype=torch.long, device=device), target[:, :-1]], dim=1)
        prev = prev.masked_fill(prev.eq(PAD), 5)
        src = zipf_targets(batch * length, vocab, gen).view(batch, length).to(device)
        src = src.masked_fill(src.eq(PAD), 5)  # no padding on the source side
        sample = {"net_input": {"src_tokens": src, "src_lengths": torch.full((batch,), length, device=device),
                                "prev_output_tokens": prev},
                  "target": target, "ntokens": int(target.ne(PAD).sum()), "id": torch.arange(batch)}
        def step_of(impl):
            if impl == "plain":
                crit = LabelSmoothedCrossEntropyCriterion(task, False, args.label_smoothing)
            else:
                crit = FusedCrossEntropyCriterion(task, False, args.label_smoothing, fused_impl=impl)

            def step():
                model.zero_grad(set_to_none=True)
                crit(model, sample)[0].backward()
            return step

        got = measure({impl: step_of(impl) for impl in impls_for(args.impls, device, dtype)}, device, args.warmup,
                      args.repeats)
        for impl, (seconds, peak) in got.items():
            rows.append(("model", dtype_name, impl, seconds, peak))
            print(f"model V={vocab} {dtype_name} {impl}: {seconds} s, {peak} B", flush=True)
        del model
    return rows


def table(rows, tokens: int, vocab: int = 0) -> str:
    """The rows as a Markdown table; its first column's head names V, for a table copied without its heading."""
    plain = {(r[0], r[1]): r for r in rows if r[2] == "plain"}
    part = f"part (V = {vocab:,})" if vocab else "part"
    out = [f"| {part} | precision | loss | ms / step | tokens/s | peak MiB | time vs plain | memory vs plain |",
           "|---|---|---|---|---|---|---|---|"]
    for part, dtype, impl, seconds, peak in rows:
        if seconds is None:
            out.append(f"| {part} | {dtype} | {impl} | OOM | OOM | OOM | | |")
            continue
        ref = plain.get((part, dtype))
        t_ratio = m_ratio = ""
        if ref is not None and ref[3] is not None and impl != "plain":
            t_ratio = f"{benchlib.ratio(seconds, ref[3]):.2f}x"
            m_ratio = f"{benchlib.ratio(peak, ref[4]):.2f}x" if ref[4] else "(plain: 0)"
        out.append(f"| {part} | {dtype} | {impl} | {seconds * 1e3:,.1f} | {tokens / seconds:,.0f} | "
                   f"{peak / 2 ** 20:,.0f} | {t_ratio} | {m_ratio} |")
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--vocab", type=int, nargs="+", default=[32000, 50000, 128000, 256000])
    parser.add_argument("--tokens", type=int, default=8192, help="target tokens per step (default: 8192)")
    parser.add_argument("--dim", type=int, default=512, help="decoder output size H of the layer table")
    parser.add_argument("--layers", nargs="+", default=["softmax", "joint"])
    parser.add_argument("--model-arch", default="outlayers_transformer",
                        help="architecture of the whole-model table; 'none' skips it")
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=None,
                        help="default: fp32 bf16 on CUDA, fp32 on the CPU")
    parser.add_argument("--impls", nargs="+", choices=["plain", "torch", "cce"], default=None,
                        help="default: plain torch cce on CUDA (cce when installed), plain torch on the CPU")
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    peers = parser.add_argument_group("--peers: the loss alone against torch's, Liger's and Cut Cross-Entropy")
    peers.add_argument("--peers", action="store_true", help="write the peer table instead of the layer/model one")
    peers.add_argument("--sizes", nargs="+", default=None, metavar="NxDxV",
                       help="tokens x width x vocabulary (default: the 16 sizes of N 2,048 and 8,192, d 256 and "
                            "512, V 32k, 50k, 128k, 256k)")
    peers.add_argument("--smoothing", nargs="+", type=float, default=[0.0, 0.1], help="label smoothing values")
    peers.add_argument("--rounds", type=int, default=3, help="timed rounds (after one untimed)")
    peers.add_argument("--blocks", nargs="+", type=int, default=[1 << 22, 1 << 24, 1 << 26],
                       help="--fused-block-elements values of the package's torch path")
    peers.add_argument("--not-run", nargs="*", default=[], metavar="NxDxV",
                       help="sizes named on the page as too large for this device in the time, with the estimate")
    peers.add_argument("--time-limit", type=float, default=None, metavar="S",
                       help="start no size after S seconds; the sizes left are named on the page as not run")
    benchlib.add_output_args(parser, os.path.join(REPO, "docs", "benchmarks", "fused_loss.md"))
    args = parser.parse_args(argv)
    if args.peers:
        return peers_main(parser, args, argv)
    import torch

    from fairseq_outlayers.losses.linear_cross_entropy import cce_available

    benchlib.check_device(parser, args.device)
    benchlib.check_output(args.output, args.force)
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    args.dtypes = args.dtypes or (["fp32", "bf16"] if cuda else ["fp32"])
    from fairseq_outlayers.losses.linear_cross_entropy import torch_op_missing

    left_out = torch_op_missing()  # torch < 2.13 has no F.linear_cross_entropy: no torch rows, and the page says why
    if args.impls is None:
        args.impls = ["plain"] + ([] if left_out else ["torch"]) + (["cce"] if cuda and cce_available() else [])
    if "torch" in args.impls and left_out:
        parser.error(f"--impls torch {left_out}; or leave torch out of --impls")
    if "cce" in args.impls and not (cuda and cce_available()):
        parser.error("--impls cce needs --device cuda and the cut-cross-entropy package")
    device = torch.device(args.device)
    start, load0 = time.time(), os.getloadavg()[0]
    sections = []
    for vocab in args.vocab:
        rows = layer_rows(args, vocab, device)
        if args.model_arch != "none":
            rows += model_rows(args, vocab, device)
        sections.append(f"## V = {vocab:,}\n\n{table(rows, args.tokens, vocab)}\n")
    name = torch.cuda.get_device_name(device) if cuda else f"{platform.machine()}, {os.cpu_count()} CPU cores"
    text = "\n".join([
        "# Fused cross-entropy against the plain one: time and peak memory", "",
        f"Command: `{ENV}{benchlib.command_line('bench_fused_loss.py', argv)}`.", "",
        benchlib.stamp(device, start), "",
        f"Device: {name}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"cut-cross-entropy {'installed' if cce_available() else 'not installed'}; total wall time "
        f"{time.time() - start:.0f} s; load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
        "(other processes on the machine make times noisy, not memory).", "",
        *([f"**Left out:** the torch rows: the op {left_out}", ""] if left_out else []),
        *[f"**Left out:** the {impl} rows in {dtype}: {why}.\n" for (impl, dtype), why in sorted(REFUSED.items())],
        f"One step = forward + label-smoothed loss (eps {args.label_smoothing}) + backward, {args.tokens} target "
        f"tokens (5 % padding), no optimizer. Layer rows: a decoder stand-in with H = {args.dim} into the output layer "
        f"(softmax: untied with bias; joint: d_j = H). Model rows: `{args.model_arch}` with a tied output layer. plain = "
        "logits + float32 log-softmax + fairseq's label_smoothed_nll_loss; torch / cce = "
        "`--criterion fused_cross_entropy --fused-impl torch / cce`. In rounds: each round runs every loss once, in "
        f"a rotated order; the fastest of {args.repeats} rounds after {args.warmup} warm-up round(s); peak memory "
        "above the level before the step.", "",
    ] + sections)
    benchlib.finish(args.output, text)


def parse_size(parser, text: str):
    try:
        n, d, v = (int(p) for p in text.lower().split("x"))
    except ValueError:
        parser.error(f"a size is NxDxV (e.g. 2048x256x50000), got {text!r}")
    return n, d, v


def peers_main(parser, args, argv):
    import torch

    from fairseq_outlayers.lab.bench import fused_peers

    benchlib.check_device(parser, args.device)
    benchlib.check_output(args.output, args.force)
    torch.set_num_threads(args.threads or 1)
    device = torch.device(args.device)
    sizes = [parse_size(parser, s) for s in args.sizes] if args.sizes else [
        (n, d, v) for n in (2048, 8192) for d in (256, 512) for v in (32000, 50000, 128000, 256000)]
    not_run = [parse_size(parser, s) for s in args.not_run]
    cuda = args.device == "cuda"
    name = (torch.cuda.get_device_name(device) if cuda
            else f"{benchlib.cpu_name()}, {os.cpu_count()} cores, 1 thread")
    start, load0 = time.time(), os.getloadavg()
    head = [
        "# The fused loss against its peers: time, memory and error", "",
        f"Command: `{ENV}{benchlib.command_line('bench_fused_loss.py', argv)}`.", "",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(start))}; commit "
        f"{benchlib.git_commit(REPO, 'fairseq_outlayers/losses/linear_cross_entropy.py')}; device {name}; "
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s).", "",
        "One step: forward and backward of the summed, label-smoothed loss, padding (5 % of the targets) ignored, "
        "float32. x (N × d), W (V × d) and b all need gradients. Each round runs every row once, in a rotated order; "
        f"{args.rounds} timed rounds after one untimed. Time: the median. Time × plain: the median of the per-round "
        "ratios. Memory: the largest peak above the level before the step ("
        + ("the CUDA allocator's peak" if cuda else "resident set; freed blocks go back to the system") + "). "
        "Errors: against the same loss in float64, the loss relative, the gradients relative to their largest "
        f"entry (worst of x, W, b). Exact: loss error at most {fused_peers.LOSS_RTOL:g} and gradient error at most "
        f"{fused_peers.GRAD_RTOL:g}.", "",
        "Peers: `torch reference` is `F.linear_cross_entropy(..., options=None)`; `torch chunked` passes "
        "`options=LinearCrossEntropyOptions()` (auto) or `chunking_method=\"aspect_ratio\"`. torch's chunked path "
        "takes no label smoothing: with eps > 0 it falls back to the reference path, so it has rows at eps 0 only. "
        "`--fused-impl torch` feeds torch's chunked path without smoothing and adds the smoothing term itself; B "
        "logits = chunks of B / V token rows (`--fused-block-elements`).", ""]
    from fairseq_outlayers.losses.linear_cross_entropy import torch_op_missing

    if torch_op_missing():  # torch < 2.13: no rows of torch's op, nor of the package's path through it
        head += [f"**Left out:** the torch rows and `--fused-impl torch`: the op {torch_op_missing()}", ""]
    sections, notes = [], []
    for n, d, v in sizes:
        if args.time_limit is not None and time.time() - start > args.time_limit:
            not_run.append((n, d, v))
            continue
        for eps in args.smoothing:
            rows = fused_peers.measure(n, d, v, eps, device, args.rounds, args.blocks,
                                       log=lambda m: print(m, flush=True))
            best = fused_peers.fastest_exact(rows)
            heading = fused_peers.heading(n, d, v, eps)
            sections.append(f"{heading}\n\n{fused_peers.table(rows, n, heading[3:])}\n\n"
                            f"Fastest exact `--fused-impl`: {best['name'] if best else 'none'}.\n")
            per_unit = rows[0]["seconds"] / (n * d * v) if rows[0]["seconds"] else None
            notes.append(per_unit)
            write_peers(args.output, head, sections, not_run, notes, start, load0)
    return write_peers(args.output, head, sections, not_run, notes, start, load0, final=True)



def write_peers(path, head, sections, not_run, notes, start, load0, final=False):
    """The page so far (rewritten after every table, so that a run cut short keeps its tables)."""
    units = [u for u in notes if u]
    tail = []
    if not_run:
        tail += ["## Not run here", "",
                 "These sizes are too large for this device in the time this run had. The estimate scales the plain "
                 "loss's measured time per N·d·V (median over the tables above); plain needs about three N × V "
                 "float32 buffers.", "",
                 "| N | d | V | plain step, estimated | plain memory, estimated |", "|---:|---:|---:|---:|---:|"]
        unit = sorted(units)[len(units) // 2] if units else None
        for n, d, v in not_run:
            est = f"{unit * n * d * v:,.0f} s" if unit else "?"
            tail.append(f"| {n:,} | {d} | {v:,} | {est} | {3 * n * v * 4 / 2 ** 30:,.1f} GiB |")
        tail.append("")
    load = os.getloadavg()
    status = (f"Wall time {time.time() - start:,.0f} s. Load average (1, 5, 15 min) {load0[0]:.1f} {load0[1]:.1f} "
              f"{load0[2]:.1f} at the start, {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
              + ("at the end" if final else "when this was written (the run goes on)")
              + f", on {os.cpu_count()} cores: other processes make the times noisy, not the memory or the errors.")
    text = "\n".join(head + [status, ""] + sections + tail)
    benchlib.write_output(path, text)
    if final:
        print(text)
        print(f"written to {path}")


if __name__ == "__main__":
    main()
