#!/usr/bin/env python
"""Benchmark: continuous outputs (Kumar & Tsvetkov 2019) against the learned softmax, in one run.

Three measurements, each against the softmax baseline in the same run, reported as ratios:

1. **Output layer + loss**, forward and backward, on ``--tokens`` target positions of H-dimensional decoder
   features (the features require a gradient, as inside a model): the continuous layer (H -> m = 300, frozen
   V x m unit target table) with the package's ``vmf_nll`` criterion (its defaults, exact log C_m) and
   with its ``cosine`` criterion, against a learned V x H softmax with fairseq's ``cross_entropy`` criterion
   (float32 log-softmax, summed NLL). The criterions are the registered fairseq classes themselves, called on a
   stub model whose decoder output layer is the layer under test. Time (median) and peak memory of the step.
2. **Whole-model training speed** (target tokens/s) of an ``outlayers_transformer`` built by fairseq's own
   option parsing and ``task.build_model`` with ``--output-layer softmax --criterion cross_entropy`` against
   ``--output-layer continuous --criterion vmf_nll``, on synthetic batches with a word-level target dictionary
   of ``--model-vocab`` words: ``task.train_step`` (forward, loss, backward) + fairseq's Adam step.
0. **The vMF loss against the cosine loss** (in-process, no layer): one forward + backward of every ``vmf_nll``
   variant's per-token loss (``modules/vmf_losses.py``, the criterion's defaults) on ``--tokens`` x m float32
   predictions, against ``cosine_loss``: the aten operations that torch's profiler counts (on CUDA also the
   kernels launched) and the median time, both as ratios to cosine. ``--compile-log-cm`` adds the released
   loss with ``OUTLAYERS_COMPILE_LOG_CM=1`` (log C_m through torch.compile).
3. **Decoding speed** (sentences/s) of the same two models with fairseq's ``SequenceGenerator`` built by
   ``task.build_generator`` and run by ``task.inference_step`` (the fairseq-generate path), beam 1 and 5. The
   models are untrained, so every hypothesis is forced to the same length (``min_len = max_len_b``): both models
   then run exactly the same number of decoder steps and the per-step cost is what is compared.

    python scripts/bench_continuous.py                     # the issue's sizes (about 20 minutes on 1 CPU thread)
    python scripts/bench_continuous.py --device cuda       # on a GPU

Peak memory (part 1) is measured in a fresh subprocess per measurement: on CPU the growth of the resident set
(``VmHWM``, reset through ``/proc/self/clear_refs``) during one forward+backward, on CUDA
``torch.cuda.max_memory_allocated``. A softmax whose step would not fit under ``--max-memory-gb`` is run in
token chunks with gradient accumulation (same FLOPs, same loss and gradients), and the results file says so
and gives the full-batch peak from the peak model checked on the sizes that were measured unchunked.

Load changes on a shared machine hit both sides: the methods alternate within every repetition (order reversed
every other repetition) and medians are reported. Results are printed and written as markdown to ``--output``
(default ``docs/benchmarks/continuous_output.md``).
"""
import argparse
import datetime
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from argparse import Namespace

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
USER_DIR = os.path.join(REPO, "fairseq_outlayers")
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(HERE, "lib"))
import benchlib  # noqa: E402

LAYER_METHODS = ("softmax", "vmf_nll", "cosine")
CONTINUOUS_METHODS = LAYER_METHODS[1:]
MiB = 2.0 ** 20
GiB = 2.0 ** 30
# issue 6 targets
TARGET_SPEEDUP = {50000: 100.0, 300000: 500.0}  # vmf_nll fwd+bwd, softmax time / continuous time
TARGET_MEMORY_300K = 0.05  # continuous peak / softmax peak at V = 300k
TARGET_TRAIN_SPEEDUP = 2.0  # whole-model training tokens/s, continuous / softmax


# ------------------------------------------------------------------------------------------------------------
# part 1: output layer + loss
# ------------------------------------------------------------------------------------------------------------

def default_vmf_variant():
    from fairseq_outlayers.criterions.continuous_losses import VMFNLLConfig

    return VMFNLLConfig().vmf_variant


def make_dictionary(vocab):
    """A fairseq Dictionary of exactly ``vocab`` entries (the 4 specials + words w4, w5, ...)."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(d.nspecial, vocab):
        d.add_symbol(f"w{i}")
    assert len(d) == vocab
    return d


def random_unit_table(vocab, dim, pad=None, seed=0):
    """(V, m) random unit rows (zero row for padding), like an aligned target table."""
    g = torch.Generator().manual_seed(seed)
    table = torch.nn.functional.normalize(torch.randn(vocab, dim, generator=g), dim=-1)
    if pad is not None:
        table[pad] = 0
    return table


class LayerModel(nn.Module):
    """The least of a fairseq model that the real criterions need: ``model(features)`` returns the output layer's
    net output, ``decoder.output_projection`` is the layer, ``get_targets`` and ``get_normalized_probs`` answer as
    ``OutputLayerModelMixin`` does."""

    def __init__(self, layer):
        super().__init__()
        self.decoder = nn.Module()
        self.decoder.output_projection = layer

    def forward(self, features):
        return self.decoder.output_projection(features), None

    def get_targets(self, sample, net_output):
        return sample["target"]

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return self.decoder.output_projection.get_normalized_probs(net_output, log_probs)


def make_layer(method, vocab, dim, m, dictionary, device):
    from fairseq_outlayers.modules.continuous_output import ContinuousOutput
    from fairseq_outlayers.modules.softmax import LearnedSoftmaxOutput

    torch.manual_seed(0)
    if method == "softmax":
        layer = LearnedSoftmaxOutput(vocab, dim)
    else:
        table = random_unit_table(vocab, m, dictionary.pad())
        decodable = torch.ones(vocab, dtype=torch.bool)
        decodable[[dictionary.pad(), dictionary.bos()]] = False
        layer = ContinuousOutput(table, decodable, dim)
    return LayerModel(layer).to(device)


def make_criterion(method, dictionary):
    """The registered criterion: fairseq's cross_entropy, or the package's vmf_nll (defaults) / cosine."""
    from fairseq.criterions.cross_entropy import CrossEntropyCriterion

    from fairseq_outlayers.criterions.continuous_losses import CosineCriterion, VMFNLLConfig, VMFNLLCriterion

    task = Namespace(target_dictionary=dictionary)
    if method == "softmax":
        return CrossEntropyCriterion(task, sentence_avg=False)
    if method == "vmf_nll":
        cfg = VMFNLLConfig()  # the defaults fairseq-train gives --criterion vmf_nll
        return VMFNLLCriterion(task, False, cfg.vmf_variant, cfg.vmf_lambda1, cfg.vmf_lambda2,
                               cfg.vmf_released_lambda, cfg.vmf_log_cm)
    if method == "cosine":
        return CosineCriterion(task, sentence_avg=False)
    raise ValueError(method)


def make_sample(vocab, dim, tokens, dictionary, device):
    g = torch.Generator().manual_seed(0)
    features = torch.randn(tokens, dim, generator=g).to(device).requires_grad_(True)
    target = torch.randint(dictionary.nspecial, vocab, (tokens,), generator=g).to(device)
    return features, target


def sub_sample(features, target, lo, hi):
    return {"net_input": {"features": features[lo:hi]}, "target": target[lo:hi], "ntokens": hi - lo}


def layer_step(model, criterion, features, target, chunks=1, device="cpu"):
    """One forward + backward of the criterion on all tokens (in ``chunks`` token chunks, gradients accumulated).
    Returns (summed loss, forward seconds, backward seconds)."""
    n = target.numel()
    bounds = [round(i * n / chunks) for i in range(chunks + 1)]
    total, fwd, bwd = 0.0, 0.0, 0.0
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        benchlib.sync(device)
        t0 = time.perf_counter()
        loss, _, _ = criterion(model, sub_sample(features, target, lo, hi))
        benchlib.sync(device)
        t1 = time.perf_counter()
        loss.backward()
        benchlib.sync(device)
        t2 = time.perf_counter()
        total += loss.item()
        fwd, bwd = fwd + t1 - t0, bwd + t2 - t1
        del loss
    return total, fwd, bwd


def softmax_peak_model(tokens, vocab, dim, chunks=1, bytes_per=4):
    """Peak bytes of one softmax+CE forward/backward above the level before it: the log-softmax backward holds the
    log-probabilities, their gradient and the logits' gradient (3 x tokens x V); with chunks, the weight gradient
    (V x H) already exists from the first chunk on. Checked against the measured unchunked peaks."""
    n = math.ceil(tokens / chunks)
    acts = 3 * n * vocab * bytes_per
    return acts + (vocab * dim * bytes_per if chunks > 1 else 0)


def choose_chunks(tokens, vocab, dim, max_bytes):
    """Smallest power-of-two token chunking whose whole softmax process (weights + step peak + ~0.5 GiB of
    runtime) stays under ``max_bytes``."""
    chunks = 1
    while chunks < tokens:
        need = vocab * dim * 4 + softmax_peak_model(tokens, vocab, dim, chunks) + 0.5 * GiB
        if need <= max_bytes:
            return chunks
        chunks *= 2
    return chunks


def layer_probe(method, vocab, dim, tokens, m=300, chunks=1, steps=1, device="cpu"):
    """One measurement (meant for a fresh process): a small warm-up (64 tokens; lazy initialisation), one
    full step whose peak memory and time are measured, then ``steps - 1`` more timed steps.

    Returns peak step bytes, the list of per-step (forward, backward) seconds, the loss of the measured step, and
    what the layer keeps between steps (weights, frozen buffers, gradients, Adam state = 2 x trained bytes)."""
    dictionary = make_dictionary(vocab)
    model = make_layer(method, vocab, dim, m, dictionary, device)
    criterion = make_criterion(method, dictionary)
    model.train()
    features, target = make_sample(vocab, dim, tokens, dictionary, device)
    warm = min(64, tokens)
    layer_step(model, criterion, features[:warm].detach().requires_grad_(True), target[:warm], 1, device)
    benchlib.clear_grads(model, features)
    gc.collect()
    with benchlib.peak_memory(device) as measured:
        loss, fwd, bwd = layer_step(model, criterion, features, target, chunks, device)
    peak = measured["bytes"]
    times = [(fwd, bwd)]
    trained = [p for p in model.parameters() if p.requires_grad]
    grad_bytes = sum(p.grad.numel() * p.grad.element_size() for p in trained if p.grad is not None)
    for _ in range(steps - 1):
        benchlib.clear_grads(model, features)
        _, fwd, bwd = layer_step(model, criterion, features, target, chunks, device)
        times.append((fwd, bwd))
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    buffer_bytes = sum(b.numel() * b.element_size() for b in model.buffers())
    trained_bytes = sum(p.numel() * p.element_size() for p in trained)
    return {
        "method": method, "vocab": vocab, "dim": dim, "tokens": tokens, "chunks": chunks, "loss": loss,
        "peak_step_bytes": peak, "times": times, "trained_params": sum(p.numel() for p in trained),
        "param_bytes": param_bytes, "buffer_bytes": buffer_bytes, "grad_bytes": grad_bytes,
        "adam_state_bytes": 2 * trained_bytes,
    }


def probe_in_subprocess(args, method, vocab, dim, chunks, steps):
    cmd = [sys.executable, os.path.abspath(__file__), "--layer-probe", method, str(vocab), str(dim), str(chunks),
           str(steps), "--tokens", str(args.tokens), "--continuous-dim", str(args.continuous_dim),
           "--threads", str(args.threads), "--device", args.device]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"method": method, "vocab": vocab, "dim": dim, "chunks": chunks,
                "error": (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarise_layer(probes, method, vocab, dim):
    """Median forward/backward/total seconds over every timed step of a method's probes (for the continuous
    layers the first, memory-measured step of each probe is left out: it is the first full-size step of a fresh
    process), the median peak, and the layer's memory."""
    mine = [p for p in probes if p["method"] == method and p["vocab"] == vocab and p["dim"] == dim]
    ok = [p for p in mine if "error" not in p]
    if not ok:
        return {"method": method, "vocab": vocab, "dim": dim, "error": mine[0]["error"] if mine else "not run"}
    steps = [t for p in ok for t in (p["times"][1:] if len(p["times"]) > 1 else p["times"])]
    first = ok[0]
    row = {k: first[k] for k in ("method", "vocab", "dim", "tokens", "chunks", "loss", "trained_params",
                                 "param_bytes", "buffer_bytes", "grad_bytes", "adam_state_bytes")}
    row.update({
        "fwd": statistics.median(t[0] for t in steps), "bwd": statistics.median(t[1] for t in steps),
        "total": statistics.median(t[0] + t[1] for t in steps), "n_steps": len(steps), "n_probes": len(ok),
        "peak_step_bytes": statistics.median(p["peak_step_bytes"] for p in ok),
    })
    # everything the layer needs at the step's peak: weights and frozen table, Adam state, the step's growth
    row["peak_total_bytes"] = row["param_bytes"] + row["buffer_bytes"] + row["adam_state_bytes"] + row[
        "peak_step_bytes"]
    return row


def run_layer_benchmark(args, log=print):
    """Part 1: alternate softmax / vmf_nll / cosine probes, one fresh process each, for every (V, H)."""
    rows = []
    avail = _mem_available()
    max_bytes = args.max_memory_gb * GiB if avail is None else min(args.max_memory_gb * GiB, avail - 2 * GiB)
    for vocab in args.vocab:
        for dim in args.dims:
            chunks = choose_chunks(args.tokens, vocab, dim, max_bytes)
            reps = args.reps if vocab < args.large_vocab else args.reps_large
            probes = []
            for rep in range(reps):
                order = LAYER_METHODS if rep % 2 == 0 else LAYER_METHODS[::-1]
                for method in order:
                    soft = method == "softmax"
                    p = probe_in_subprocess(args, method, vocab, dim, chunks if soft else 1,
                                            1 if soft else args.continuous_steps)
                    probes.append(p)
                    if "error" in p:
                        log(f"V={vocab} H={dim} {method}: FAILED ({p['error']})")
                    else:
                        tot = [f + b for f, b in p["times"]]
                        log(f"V={vocab:>6} H={dim:>4} rep {rep + 1}/{reps} {method:<8} step {statistics.median(tot) * 1e3:9.1f} ms  "
                            f"peak {p['peak_step_bytes'] / MiB:9.1f} MiB" + (f"  ({chunks} chunks)" if soft and chunks > 1 else ""),
                            flush=True)
            for method in LAYER_METHODS:
                rows.append(summarise_layer(probes, method, vocab, dim))
    return rows


def _mem_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# ------------------------------------------------------------------------------------------------------------
# part 0: the vMF loss against the cosine loss (operations and time, no layer)
# ------------------------------------------------------------------------------------------------------------

TARGET_LOSS_OPS = 2.0  # aten operations of a vMF variant's fwd+bwd / cosine_loss's
TARGET_LOSS_TIME = 1.5  # time of a vMF variant's fwd+bwd / cosine_loss's


def loss_variants(compile_log_cm=False):
    """(name, per-token loss function) for cosine and every vmf_nll variant at the criterion's defaults."""
    from fairseq_outlayers.criterions.continuous_losses import VMFNLLConfig
    from fairseq_outlayers.modules import vmf_losses as vl

    cfg = VMFNLLConfig()
    lam, l1, l2 = cfg.vmf_released_lambda, cfg.vmf_lambda1, cfg.vmf_lambda2
    variants = [
        ("cosine", vl.cosine_loss),
        ("vmf released (default)", lambda e, t: vl.vmf_released_loss(e, t, lam)),
        ("vmf plain", lambda e, t: vl.vmf_nll_loss(e, t)),
        ("vmf reg1", lambda e, t: vl.vmf_nll_loss(e, t, l1, 1.0)),
        ("vmf reg2", lambda e, t: vl.vmf_nll_loss(e, t, 0.0, l2)),
        ("vmf reg1+reg2 (λ1 0.02)", lambda e, t: vl.vmf_nll_loss(e, t, 0.02, l2)),
        ("vmf released, --vmf-log-cm approx", lambda e, t: vl.vmf_released_loss(e, t, lam, approximate=True)),
    ]
    if compile_log_cm:
        def compiled(e, t):
            old = os.environ.get("OUTLAYERS_COMPILE_LOG_CM")
            os.environ["OUTLAYERS_COMPILE_LOG_CM"] = "1"
            try:
                return vl.vmf_released_loss(e, t, lam)
            finally:
                if old is None:
                    del os.environ["OUTLAYERS_COMPILE_LOG_CM"]
                else:
                    os.environ["OUTLAYERS_COMPILE_LOG_CM"] = old
        variants.append(("vmf released, log C_m compiled", compiled))
    return variants


def count_loss_ops(loss_fn, e_hat, target):
    """(aten operations, CUDA kernels or None) of one forward + backward of ``loss_fn``, from torch's profiler
    (nested aten calls counted as it lists them; kernels: its CUDA kernel events)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = e_hat.device.type == "cuda"
    loss_fn(e_hat, target).sum().backward()  # lazy set-up is not counted
    e_hat.grad = None
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        loss_fn(e_hat, target).sum().backward()
        benchlib.sync(e_hat.device)
    events = prof.events()
    ops = sum(1 for ev in events if ev.name.startswith("aten::"))
    kernels = None
    if cuda:
        kernels = sum(1 for ev in events if str(getattr(ev, "device_type", "")).endswith("CUDA"))
    e_hat.grad = None
    return ops, kernels


def run_loss_benchmark(args, log=print):
    """Part 0: operations and median fwd+bwd time of each loss on the same (tokens, m) batch, alternating."""
    device = args.device
    g = torch.Generator().manual_seed(0)
    e_hat = (torch.randn(args.tokens, args.continuous_dim, generator=g) * 0.6).to(device).requires_grad_(True)
    target = torch.nn.functional.normalize(torch.randn(args.tokens, args.continuous_dim, generator=g), dim=-1)
    target = target.to(device)
    variants = loss_variants(args.compile_log_cm)
    rows = {}
    for name, fn in variants:
        ops, kernels = count_loss_ops(fn, e_hat, target)
        rows[name] = {"ops": ops, "kernels": kernels, "times": []}
    for rep in range(args.loss_reps + 2):  # two warm-up repetitions
        for name, fn in (variants if rep % 2 == 0 else variants[::-1]):
            e_hat.grad = None
            benchlib.sync(device)
            t0 = time.perf_counter()
            fn(e_hat, target).sum().backward()
            benchlib.sync(device)
            if rep >= 2:
                rows[name]["times"].append(time.perf_counter() - t0)
    for name, r in rows.items():
        r["time"] = statistics.median(r["times"])
        log(f"loss {name:<36} {r['ops']:4d} aten ops" + (f" {r['kernels']:4d} kernels" if r["kernels"] else "")
            + f"  {r['time'] * 1e3:8.3f} ms", flush=True)
    return rows


def loss_tables(rows, tokens, m, device):
    """Markdown lines of part 0, with the verdicts of the two targets."""
    cos = rows["cosine"]
    cuda = cos["kernels"] is not None
    lines = ["| loss | aten ops (fwd+bwd) | ratio to cosine |" + (" CUDA kernels | ratio to cosine |" if cuda else "")
             + " fwd+bwd ms (median) | ratio to cosine |",
             "| --- | ---: | ---: |" + (" ---: | ---: |" if cuda else "") + " ---: | ---: |"]
    for name, r in rows.items():
        kern = (f" {r['kernels']} | {benchlib.ratio(r['kernels'], cos['kernels']):.2f}x |" if cuda else "")
        lines.append(f"| {name} | {r['ops']} | {benchlib.ratio(r['ops'], cos['ops']):.2f}x |{kern} "
                     f"{r['time'] * 1e3:.3f} | {benchlib.ratio(r['time'], cos['time']):.2f}x |")
    vmf = [(n, r) for n, r in rows.items() if n != "cosine"]
    worst_ops = max(vmf, key=lambda x: x[1]["ops"])
    worst_time = max(vmf, key=lambda x: x[1]["time"])
    ops_x = benchlib.ratio(worst_ops[1]["ops"], cos["ops"])
    time_x = benchlib.ratio(worst_time[1]["time"], cos["time"])
    default = benchlib.ratio(rows["vmf released (default)"]["time"], cos["time"])
    lines += ["", f"Targets ({tokens} x {m}, float32, `{device}`):", "",
              f"- every vMF variant <= {TARGET_LOSS_OPS:g}x the cosine loss's aten operations: worst "
              f"{worst_ops[0]}, {ops_x:.2f}x -> {met(ops_x <= TARGET_LOSS_OPS)}",
              f"- vMF fwd+bwd <= {TARGET_LOSS_TIME:g}x the cosine loss's time: released default {default:.2f}x; "
              f"worst {worst_time[0]}, {time_x:.2f}x -> {met(time_x <= TARGET_LOSS_TIME)}"]
    return lines


# ------------------------------------------------------------------------------------------------------------
# parts 2 and 3: whole models built by fairseq
# ------------------------------------------------------------------------------------------------------------

def write_model_data(directory, vocab, dim):
    """A data directory with word-level dictionaries of ``vocab`` entries (source and target) and a ``dim``-d
    target-vector text file covering every target word."""
    n_words = vocab - 4
    for lang in ("src", "tgt"):
        with open(os.path.join(directory, f"dict.{lang}.txt"), "w") as f:
            f.writelines(f"w{i} {n_words + 10 - i}\n" for i in range(4, vocab))
    table = random_unit_table(n_words, dim, seed=1)
    path = os.path.join(directory, "vectors.tgt.vec")
    with open(path, "w") as f:
        f.write(f"{n_words} {dim}\n")
        rows = table.numpy()
        for i in range(n_words):
            f.write(f"w{i + 4} " + " ".join(f"{x:.5f}" for x in rows[i]) + "\n")
    return path


def build(data_dir, arch, method, extra=()):
    """(task, model, criterion, args) exactly as fairseq-train builds them from its command line."""
    from fairseq import options, tasks

    cli = [data_dir, "--user-dir", USER_DIR, "--task", "translation", "-s", "src", "-t", "tgt", "--arch", arch,
           "--optimizer", "adam", "--lr", "0.0005", "--cpu", "--seed", "1"]
    if method == "softmax":
        cli += ["--output-layer", "softmax", "--criterion", "cross_entropy"]
    else:
        cli += ["--output-layer", "continuous", "--criterion", "vmf_nll", "--target-vectors",
                os.path.join(data_dir, "vectors.tgt.vec")]
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, cli + list(extra))
    task = tasks.setup_task(args)
    model = task.build_model(args)
    criterion = task.build_criterion(args)
    return task, model, criterion, args


def synthetic_batch(dictionary, sentences, src_len, tgt_len, seed):
    """A translation batch as fairseq's LanguagePairDataset collates it: random words, </s> at the end of every
    sentence, ``prev_output_tokens`` = the target shifted right behind </s>."""
    g = torch.Generator().manual_seed(seed)
    n = len(dictionary)
    src = torch.randint(dictionary.nspecial, n, (sentences, src_len), generator=g)
    src[:, -1] = dictionary.eos()
    tgt = torch.randint(dictionary.nspecial, n, (sentences, tgt_len), generator=g)
    tgt[:, -1] = dictionary.eos()
    prev = torch.cat([torch.full((sentences, 1), dictionary.eos()), tgt[:, :-1]], dim=1)
    return {
        "id": torch.arange(sentences), "nsentences": sentences, "ntokens": sentences * tgt_len,
        "net_input": {"src_tokens": src, "src_lengths": torch.full((sentences,), src_len),
                      "prev_output_tokens": prev},
        "target": tgt,
    }


def train_step_fn(task, model, criterion, args):
    from fairseq import optim
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    cfg = convert_namespace_to_omegaconf(args)  # as fairseq-train does with legacy options
    optimizer = optim.build_optimizer(cfg.optimizer, [p for p in model.parameters() if p.requires_grad])
    state = {"update": 0}

    def step(sample):
        optimizer.zero_grad()
        loss, sample_size, _ = task.train_step(sample, model, criterion, optimizer, state["update"])
        optimizer.multiply_grads(1.0 / sample_size)  # what fairseq's trainer does before the update
        optimizer.step()
        state["update"] += 1
        return loss.item()

    return step


def model_params(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def matmul_params(model):
    """Trained parameters that take part in a matmul: all but the input embedding tables (lookups); a tied
    output matrix counts once, as the output layer."""
    skip = {id(model.encoder.embed_tokens.weight)}
    out = getattr(model.decoder, "output_projection", None)
    tied = out is not None and any(p is model.decoder.embed_tokens.weight for p in out.parameters())
    if not tied:
        skip.add(id(model.decoder.embed_tokens.weight))
    return sum(p.numel() for p in model.parameters() if p.requires_grad and id(p) not in skip)


def run_model_benchmark(args, built, log=print):
    """Part 2: alternate full training steps of the two models; median step seconds -> target tokens/s."""
    steps = {name: train_step_fn(*b) for name, b in built.items()}
    arch = built["softmax"][3].arch
    order = list(built)
    times = {name: [] for name in order}
    dictionary = built[order[0]][0].target_dictionary
    for rep in range(args.train_steps + 1):  # repetition 0 warms up
        sample = synthetic_batch(dictionary, args.train_sentences, args.train_len, args.train_len, seed=rep)
        for name in (order if rep % 2 == 0 else order[::-1]):
            t0 = time.perf_counter()
            loss = steps[name](sample)
            dt = time.perf_counter() - t0
            if not math.isfinite(loss):
                raise RuntimeError(f"{name}: non-finite training loss {loss}")
            if rep > 0:
                times[name].append(dt)
                log(f"train {arch} {name:<10} step {rep}/{args.train_steps} {dt * 1e3:8.1f} ms  "
                    f"{sample['ntokens'] / dt:8.0f} tok/s", flush=True)
    ntokens = args.train_sentences * args.train_len
    a = built["softmax"][3]
    desc = (f"{a.encoder_layers}+{a.decoder_layers} layers, d = {a.decoder_embed_dim}, FFN "
            f"{a.decoder_ffn_embed_dim}, {a.decoder_attention_heads} heads, dropout {a.dropout}")
    return {name: {"step": statistics.median(t), "tok_s": ntokens / statistics.median(t), "n": len(t),
                   "params": model_params(built[name][1]), "desc": desc,
                   "flops": benchlib.model_step_flops(ntokens, matmul_params(built[name][1]))}
            for name, t in times.items()}


def decode_generator(task, model, beam, length):
    """fairseq-generate's generator with the hypothesis length forced to ``length`` tokens + </s>."""
    gen_args = Namespace(beam=beam, max_len_a=0, max_len_b=length, min_len=length, nbest=1, lenpen=1.0,
                         unkpen=0.0, temperature=1.0, no_repeat_ngram_size=0)
    return task.build_generator([model], gen_args)


def decode_batch(task, model, generator, sample):
    model.eval()
    return task.inference_step(generator, [model], sample)


def run_decode_benchmark(args, built, log=print):
    """Part 3: alternate decoding of the same source batch by the two models; median seconds -> sentences/s."""
    order = list(built)
    arch = built["softmax"][3].arch
    dictionary = built[order[0]][0].source_dictionary
    results = {}
    for beam in args.beams:
        gens = {name: decode_generator(b[0], b[1], beam, args.decode_len) for name, b in built.items()}
        times = {name: [] for name in order}
        for rep in range(args.decode_reps + 1):
            sample = synthetic_batch(dictionary, args.decode_sentences, args.decode_len, 2, seed=100 + rep)
            for name in (order if rep % 2 == 0 else order[::-1]):
                t0 = time.perf_counter()
                hypos = decode_batch(built[name][0], built[name][1], gens[name], sample)
                dt = time.perf_counter() - t0
                lengths = {len(h[0]["tokens"]) for h in hypos}
                if lengths != {args.decode_len + 1}:
                    raise RuntimeError(f"{name} beam {beam}: hypothesis lengths {sorted(lengths)}, expected "
                                       f"{args.decode_len + 1} (forced)")
                if rep > 0:
                    times[name].append(dt)
                    log(f"decode {arch} beam {beam} {name:<10} rep {rep}/{args.decode_reps} {dt * 1e3:8.1f} ms  "
                        f"{args.decode_sentences / dt:7.1f} sent/s", flush=True)
        results[beam] = {name: {"batch": statistics.median(t), "sent_s": args.decode_sentences / statistics.median(t),
                                "n": len(t)} for name, t in times.items()}
    return results


def build_models(args, data_dir, arch):
    extra = ["--dropout", str(args.model_dropout)] if args.model_dropout is not None else []
    return {name: build(data_dir, arch, name, extra) for name in ("softmax", "continuous")}


# ------------------------------------------------------------------------------------------------------------
# results file
# ------------------------------------------------------------------------------------------------------------

def met(ok):
    return "**met**" if ok else "**not met**"


def _find(rows, method, vocab, dim):
    return next((r for r in rows if r["method"] == method and r["vocab"] == vocab and r["dim"] == dim), None)


def step_flops(method, tokens, vocab, dim, m=300):
    """FLOP of one fwd+bwd of part 1 (scripts/lib/benchlib.py): 6 N H V softmax, 6 N H m continuous."""
    if method == "softmax":
        return benchlib.softmax_step_flops(tokens, dim, vocab)
    return benchlib.continuous_step_flops(tokens, dim, m)


def layer_tables(rows, vocabs, dims, tokens, m=300):
    """Markdown lines: per-layer measurements and the ratio table of part 1, with the targets' verdicts."""
    lines = ["| V | H | layer + loss | token chunks | forward ms | backward ms | fwd+bwd ms | steps timed "
             "| peak step MiB | peak step MiB, model | trained params | weights+frozen+Adam MiB | peak total MiB "
             "| achieved GFLOP/s |",
             "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for vocab in vocabs:
        for dim in dims:
            for method in LAYER_METHODS:
                r = _find(rows, method, vocab, dim)
                name = {"softmax": "softmax + cross_entropy", "vmf_nll": "continuous + vmf_nll",
                        "cosine": "continuous + cosine"}[method]
                if r is None or "error" in r:
                    why = "not run" if r is None else r["error"]
                    lines.append(f"| {vocab} | {dim} | {name} | | failed: {why} | | | | | | | | | |")
                    continue
                model = (f"{softmax_peak_model(tokens, vocab, dim, r['chunks']) / MiB:.1f}"
                         if method == "softmax" else "")
                kept = r["param_bytes"] + r["buffer_bytes"] + r["adam_state_bytes"]
                lines.append(f"| {vocab} | {dim} | {name} | {r['chunks']} | {r['fwd'] * 1e3:.1f} | "
                             f"{r['bwd'] * 1e3:.1f} | {r['total'] * 1e3:.1f} | {r['n_steps']} | "
                             f"{r['peak_step_bytes'] / MiB:.1f} | {model} | {r['trained_params']:,} | "
                             f"{kept / MiB:.1f} | {r['peak_total_bytes'] / MiB:.1f} | "
                             f"{benchlib.gflops(step_flops(method, tokens, vocab, dim, m) / r['total'])} |")
    lines += ["", "Ratios (time: softmax / continuous, above 1 = continuous faster; memory: continuous / softmax, "
              "below 1 = continuous smaller). Where the softmax ran in token chunks, \"full\" compares with the "
              "full-batch softmax peak from the peak model (3 x tokens x V x 4 bytes).", "",
              "| V | H | vmf_nll speed-up | cosine speed-up | vmf_nll peak step memory | vmf_nll peak total memory "
              "| cosine peak step memory | vmf_nll time / cosine time |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for vocab in vocabs:
        for dim in dims:
            s, v, c = (_find(rows, m, vocab, dim) for m in LAYER_METHODS)
            if any(r is None or "error" in r for r in (s, v, c)):
                lines.append(f"| {vocab} | {dim} | n/a | n/a | n/a | n/a | n/a | n/a |")
                continue
            step_mem = benchlib.ratio(v["peak_step_bytes"], s["peak_step_bytes"])
            total_mem = benchlib.ratio(v["peak_total_bytes"], s["peak_total_bytes"])
            cos_mem = benchlib.ratio(c["peak_step_bytes"], s["peak_step_bytes"])
            if s["chunks"] > 1:
                full = softmax_peak_model(tokens, vocab, dim, 1)
                full_total = s["param_bytes"] + s["adam_state_bytes"] + full
                step_txt = (f"{step_mem:.4f} (chunked); {benchlib.ratio(v['peak_step_bytes'], full):.4f} (full)")
                total_txt = (f"{total_mem:.4f} (chunked); "
                             f"{benchlib.ratio(v['peak_total_bytes'], full_total):.4f} (full)")
                cos_txt = f"{cos_mem:.4f} (chunked); {benchlib.ratio(c['peak_step_bytes'], full):.4f} (full)"
            else:
                step_txt, total_txt, cos_txt = f"{step_mem:.4f}", f"{total_mem:.4f}", f"{cos_mem:.4f}"
            lines.append(f"| {vocab} | {dim} | {benchlib.ratio(s['total'], v['total']):.1f}x | "
                         f"{benchlib.ratio(s['total'], c['total']):.1f}x | {step_txt} | {total_txt} | {cos_txt} | "
                         f"{benchlib.ratio(v['total'], c['total']):.2f}x |")
    return lines


def target_verdicts(rows, vocabs, dims):
    """Markdown bullet lines: each issue-6 target of part 1 and whether every measured H meets it."""
    lines = []
    for vocab, target in sorted(TARGET_SPEEDUP.items()):
        if vocab not in vocabs:
            continue
        got = []
        for dim in dims:
            s, v = _find(rows, "softmax", vocab, dim), _find(rows, "vmf_nll", vocab, dim)
            if s and v and "error" not in s and "error" not in v:
                got.append((dim, benchlib.ratio(s["total"], v["total"])))
        if got:
            txt = ", ".join(f"{x:.1f}x at H = {d}" for d, x in got)
            lines.append(f"- vmf_nll fwd+bwd speed-up >= {target:.0f}x at V = {vocab}: {txt} -> "
                         f"{met(all(x >= target for _, x in got))}")
    if 300000 in vocabs:
        got = []
        for dim in dims:
            s, v = _find(rows, "softmax", 300000, dim), _find(rows, "vmf_nll", 300000, dim)
            if s and v and "error" not in s and "error" not in v:
                got.append((dim, benchlib.ratio(v["peak_total_bytes"], s["peak_total_bytes"]),
                            benchlib.ratio(v["peak_step_bytes"], s["peak_step_bytes"])))
        if got:
            txt = ", ".join(f"{t:.4f} total / {st:.4f} step at H = {d}" for d, t, st in got)
            lines.append(f"- vmf_nll peak memory <= {TARGET_MEMORY_300K}x softmax at V = 300000 (against the "
                         f"softmax as measured, chunked where it had to be): {txt} -> "
                         f"{met(all(t <= TARGET_MEMORY_300K and st <= TARGET_MEMORY_300K for _, t, st in got))}")
    return lines


def model_tables(train, decode, args):
    """Markdown lines of parts 2 and 3: one row per (architecture, model), ratios to the softmax model."""
    lines = ["| arch | model | trained params | step ms (median) | target tokens/s | ratio continuous / softmax "
             "| achieved GFLOP/s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    verdicts = []
    for arch, t in train.items():
        s = t["softmax"]
        for name in ("softmax", "continuous"):
            r = t[name]
            achieved = benchlib.gflops(r["flops"] / r["step"]) if "flops" in r else ""
            lines.append(f"| {arch} | {name} | {r['params']:,} | {r['step'] * 1e3:.1f} | {r['tok_s']:.0f} | "
                         f"{benchlib.ratio(r['tok_s'], s['tok_s']):.2f} | {achieved} |")
        x = benchlib.ratio(t["continuous"]["tok_s"], s["tok_s"])
        verdicts.append(f"- {arch}: whole-model training tokens/s >= {TARGET_TRAIN_SPEEDUP:.0f}x softmax: "
                        f"{x:.2f}x -> {met(x >= TARGET_TRAIN_SPEEDUP)}")
    lines += ["", "Target of issue 6:", ""] + verdicts + [""]
    if decode:
        lines += ["Decoding (part 3):", "",
                  "| arch | beam | model | batch seconds (median) | sentences/s | ratio continuous / softmax |",
                  "| --- | ---: | --- | ---: | ---: | ---: |"]
        for arch, by_beam in decode.items():
            for beam in sorted(by_beam):
                d = by_beam[beam]
                for name in ("softmax", "continuous"):
                    lines.append(f"| {arch} | {beam} | {name} | {d[name]['batch']:.3f} | {d[name]['sent_s']:.1f} | "
                                 f"{benchlib.ratio(d[name]['sent_s'], d['softmax']['sent_s']):.2f} |")
    return lines


def environment():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "scripts/bench_continuous.py"],
                               capture_output=True, text=True).stdout.strip()
        if dirty:
            commit += " (bench_continuous.py modified)"
    except OSError:
        commit = "unknown"
    return {"cpu": cpu, "cores": os.cpu_count(), "commit": commit or "unknown", "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def render(args, command, env, layer_rows, train, decode, elapsed, loads, loss_rows=None):
    lines = [
        "# Benchmark: continuous outputs vs softmax (Kumar & Tsvetkov 2019)",
        "",
        f"Command: `{command}`  ",
        f"Date: {env['date']}; git commit {env['commit']}; device {args.device}; CPU: {env['cpu']} "
        f"({env['cores']} cores, torch using {args.threads} thread(s)); torch {env['torch']}; "
        f"whole run {elapsed / 60:.1f} min; load average (1 min) at start / end: {loads[0]:.2f} / {loads[1]:.2f} "
        "(other jobs shared the machine; the alternation below spreads their effect over both sides).",
        "",
    ]
    if loss_rows is not None:
        lines += [
            "## 0. The vMF loss against the cosine loss",
            "",
            f"One forward + backward of each per-token loss (`fairseq_outlayers/modules/vmf_losses.py`; the "
            f"`vmf_nll` criterion's defaults; no output layer) on {args.tokens} x {args.continuous_dim} float32 "
            "predictions that require a gradient and unit targets, summed. aten ops: every `aten::` event of "
            "torch's profiler in that step (nested calls included; views and scalar wraps count, so it bounds "
            "the kernels from above); on CUDA also the kernels launched. Time: median of "
            f"{args.loss_reps} steps per loss after two warm-up rounds, the losses alternating (order reversed "
            "every other round). Mixed precision does not change this step: the criterions cast ê to float32 "
            "before the loss.",
            "",
        ]
        lines += loss_tables(loss_rows, args.tokens, args.continuous_dim, args.device) + [""]
    if layer_rows is not None:
        lines += [
            "## 1. Output layer + loss, forward and backward",
            "",
            f"{args.tokens} target tokens per step, float32, H-dimensional decoder features that require a "
            f"gradient. softmax = a learned V x H matrix with fairseq's `cross_entropy` criterion (float32 "
            f"log-softmax, summed NLL); continuous = `ContinuousOutput` (H -> m = {args.continuous_dim}, bias; "
            f"frozen V x m unit table) with the package's `vmf_nll` criterion at its defaults (variant "
            f"{default_vmf_variant()}, exact log C_m and its Bessel-ratio gradient) and with its `cosine` "
            "criterion. "
            "The criterions are the registered fairseq classes, called on a stub model whose decoder output "
            "layer is the layer under test (so the continuous rows include the criterions' no-grad cos/norm "
            "metrics). Every measurement runs in a fresh process: a 64-token warm-up, then one full step whose "
            "peak memory is measured (CPU: growth of the resident-set high-water mark; CUDA: "
            "max_memory_allocated), then (continuous only) "
            f"{args.continuous_steps - 1} more steps. Softmax time = median over {args.reps} processes "
            f"({args.reps_large} at V >= {args.large_vocab}) of that one step; continuous time = median of all "
            "steps after the first. Within a repetition the three processes run back to back, the order "
            "reversed every other repetition. Peak total = weights + frozen table + Adam state (2 x trained "
            "bytes) + the step's peak growth (which holds the weight gradients).",
            "",
            f"Memory cap: a softmax whose process would exceed {args.max_memory_gb:g} GiB (or the machine's "
            "available memory less 2 GiB) runs in token chunks with gradient accumulation (same FLOPs, loss and "
            "gradients; `token chunks` column). Its full-batch peak then comes from the peak model "
            "(`peak step MiB, model`: 3 x tokens x V x 4 bytes, + V x H x 4 when chunked). The unchunked rows "
            "show how well that model agrees with the measured peaks.",
            "",
        ]
        lines += [benchlib.flops_note(args.device, benchlib.matmul_flops(args.device)) + " Counts: 6 N H V for "
                  f"the softmax, 6 N H m for the continuous layer (m = {args.continuous_dim}; the loss is O(N m)).",
                  ""]
        lines += layer_tables(layer_rows, args.vocab, args.dims, args.tokens, args.continuous_dim)
        lines += ["", "Targets of issue 6:", ""] + target_verdicts(layer_rows, args.vocab, args.dims) + [""]
    if train is not None:
        lines += [
            "## 2. Whole-model training speed, and 3. decoding speed",
            "",
            "Architectures: " + "; ".join(f"`--arch {a}` ({t['softmax']['desc']})" for a, t in train.items())
            + f"; word-level source and target dictionaries of {args.model_vocab} entries, built by "
            "fairseq's option parsing, `tasks.setup_task` and `task.build_model` (as fairseq-train does) with "
            "`--output-layer softmax --criterion cross_entropy` (a learned, untied output matrix) and with "
            f"`--output-layer continuous --criterion vmf_nll --target-vectors` (a {args.continuous_dim}-d "
            "vector file covering the whole target dictionary, read through the package's loader). Training: "
            f"synthetic batches of {args.train_sentences} sentences x {args.train_len} tokens on both sides "
            f"({args.train_sentences * args.train_len} target tokens); one step = `task.train_step` (forward, "
            "loss, backward), gradient scaling by the sample size, fairseq's Adam step; median of "
            f"{args.train_steps} steps per model after one warm-up step, the two models alternating step by "
            "step (order reversed every other step), both on the same batch.",
            "",
            f"Decoding: `task.build_generator` + `task.inference_step` (fairseq-generate's `SequenceGenerator`), "
            f"batches of {args.decode_sentences} source sentences of {args.decode_len} tokens; the models are "
            f"untrained, so `min_len = max_len_b = {args.decode_len}` forces every hypothesis to "
            f"{args.decode_len} tokens + </s> (checked). Both models run the same number of decoder steps, so "
            "the comparison is of the per-step cost (decoder + output layer + log-softmax over V + beam "
            f"search). Median of {args.decode_reps} batches per model after a warm-up, alternating. Unlike "
            "training, decoding scores every word at every step in both models: V x d multiply-adds per "
            f"hypothesis for the softmax, d x m + V x m for the continuous layer (m = {args.continuous_dim}), "
            "so the continuous model cannot decode faster when m >= d.",
            "",
        ]
        lines += [benchlib.flops_note("cpu", benchlib.matmul_flops("cpu")) + " Training count: 6 x target "
                  "tokens x trained parameters taking part in a matmul (input embedding lookups excluded; "
                  "attention scores and the source side's shorter/longer length ignored). The decoding table has "
                  "no FLOP column (beam search's cost is not a fixed matmul count).", ""]
        lines += model_tables(train, decode, args)
    return "\n".join(lines).rstrip() + "\n"


def _loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[50000, 300000], help="vocabulary sizes (part 1)")
    parser.add_argument("--dims", type=int, nargs="+", default=[512, 1024], help="decoder dimensions H (part 1)")
    parser.add_argument("--tokens", type=int, default=4096, help="target tokens per step (part 1)")
    parser.add_argument("--continuous-dim", type=int, default=300, help="m, the target-vector dimension")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (fresh processes) per layer (part 1)")
    parser.add_argument("--reps-large", type=int, default=2, help="repetitions at V >= --large-vocab (part 1)")
    parser.add_argument("--large-vocab", type=int, default=200000, help="vocabulary size from which --reps-large "
                        "applies")
    parser.add_argument("--continuous-steps", type=int, default=11, help="steps per continuous-layer process "
                        "(the first is the memory-measured one)")
    parser.add_argument("--max-memory-gb", type=float, default=11.0, help="softmax processes larger than this "
                        "(GiB, estimated) run in token chunks")
    parser.add_argument("--model-arch", nargs="+", default=["outlayers_transformer_tiny", "outlayers_transformer_small"],
                        help="architectures (parts 2, 3)")
    parser.add_argument("--model-dropout", type=float, default=None, help="override the preset's dropout")
    parser.add_argument("--model-vocab", type=int, default=50000, help="dictionary size (parts 2, 3)")
    parser.add_argument("--train-sentences", type=int, default=64, help="sentences per training batch")
    parser.add_argument("--train-len", type=int, default=32, help="source and target length of training batches")
    parser.add_argument("--train-steps", type=int, default=6, help="timed training steps per model")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5], help="beam sizes (part 3)")
    parser.add_argument("--decode-sentences", type=int, default=32, help="sentences per decoding batch")
    parser.add_argument("--decode-len", type=int, default=24, help="source length = forced hypothesis length")
    parser.add_argument("--decode-reps", type=int, default=4, help="timed decoding batches per model and beam")
    parser.add_argument("--skip", choices=["loss", "layer", "model"], action="append", default=[],
                        help="leave out part 0 (loss), part 1 (layer) or parts 2+3 (model)")
    parser.add_argument("--loss-reps", type=int, default=30, help="timed steps per loss (part 0)")
    parser.add_argument("--compile-log-cm", action="store_true", help="part 0: also the released loss with "
                        "log C_m through torch.compile (OUTLAYERS_COMPILE_LOG_CM=1)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: steadier on a "
                        "shared machine)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (part 1; parts 2 and 3 run on the "
                        "CPU, as built with --cpu)")
    benchlib.add_output_args(parser, os.path.join(REPO, "docs", "benchmarks", "continuous_output.md"))
    parser.add_argument("--layer-probe", nargs=5, metavar=("METHOD", "V", "H", "CHUNKS", "STEPS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    benchlib.check_device(parser, args.device)

    if args.layer_probe:  # internal: one measurement in a fresh process
        method, vocab, dim, chunks, steps = args.layer_probe
        print(json.dumps(layer_probe(method, int(vocab), int(dim), args.tokens, args.continuous_dim, int(chunks),
                                     int(steps), args.device)))
        return 0

    benchlib.check_output(args.output, args.force)
    start, load0, env = time.time(), _loadavg(), environment()  # the commit measured is the one at the start
    layer_rows = train = decode = loss_rows = None
    if "loss" not in args.skip:
        loss_rows = run_loss_benchmark(args)
    if "layer" not in args.skip:
        layer_rows = run_layer_benchmark(args)
    if "model" not in args.skip:
        import logging
        logging.getLogger("fairseq_outlayers").setLevel(logging.WARNING)
        train, decode = {}, {}
        with tempfile.TemporaryDirectory() as tmp:
            write_model_data(tmp, args.model_vocab, args.continuous_dim)
            for arch in args.model_arch:
                built = build_models(args, tmp, arch)
                train[arch] = run_model_benchmark(args, built)
                decode[arch] = run_decode_benchmark(args, built)
                del built
                gc.collect()

    command = benchlib.command_line("bench_continuous.py", argv)
    text = render(args, command, env, layer_rows, train, decode, time.time() - start,
                  (load0, _loadavg()), loss_rows)
    benchlib.finish(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
