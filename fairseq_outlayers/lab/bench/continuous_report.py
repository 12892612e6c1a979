"""The results file of scripts/bench_continuous.py: the machine and commit measured, and the text around each
part's tables (what was measured and how)."""
import datetime
import os

import torch

from . import benchlib
from .continuous_layer import default_vmf_variant
from .continuous_tables import layer_tables, loss_tables, model_tables, target_verdicts

#: the checkout the package was run from (its git commit is recorded with the results)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def environment():
    """The CPU, the commit (marked when the script or its modules differ from it), torch and the date."""
    commit = benchlib.git_commit(REPO, "scripts/bench_continuous.py", "fairseq_outlayers/lab/bench/continuous_*.py")
    return {"cpu": benchlib.cpu_name(), "cores": os.cpu_count(), "commit": commit, "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def render(args, command, env, layer_rows, train, decode, elapsed, loads, loss_rows=None):
    lines = [
        "# Benchmark: continuous outputs vs softmax (Kumar & Tsvetkov 2019)",
        "",
        f"Command: `{command}`.",
        "",
        f"Date: {env['date']}; git commit {env['commit']}; device {benchlib.device_name(args.device) if str(args.device).startswith('cuda') else args.device}; CPU: {env['cpu']} "
        f"({env['cores']} cores, torch using {args.threads} thread(s)); torch {env['torch']}; "
        f"whole run {elapsed / 60:.1f} min; load average (1 min) at start / end: {loads[0]:.2f} / {loads[1]:.2f} "
        "(other jobs shared the machine; the alternation below spreads their effect over both sides).",
        "",
    ]
    if loss_rows is not None:
        lines += [
            "## 0. The vMF loss against the cosine loss",
            "",
            f"One forward + backward of each per-token loss (`fairseq_outlayers/methods/continuous/vmf_losses.py`), summed. "
            f"The losses take the `vmf_nll` criterion's defaults and no output layer. Inputs: {args.tokens} x "
            f"{args.continuous_dim} float32 predictions that require a gradient, and unit targets. aten ops: every `aten::` event of "
            "torch's profiler in that step (nested calls included; views and scalar wraps count, so it bounds "
            "the kernels from above); on CUDA also the kernels launched. Time: median of "
            f"{args.loss_reps} steps per loss after two warm-up rounds, the losses alternating (order reversed "
            "every other round). Mixed precision does not change this step: the criterions cast ê to float32 "
            f"before the loss. The last two columns time the same step on {args.dispatch_tokens} rows, where the "
            "arithmetic is negligible and the time is that of dispatching the operations: the regime of a GPU "
            "that waits for its host (median of at least 200 steps). `--vmf-compile` rows: the loss as one "
            "torch.compile graph; their aten ops are the compiled call's (its fused kernels are not aten ops).",
            "",
        ]
        lines += loss_tables(loss_rows, args.tokens, args.continuous_dim, args.device, args.dispatch_tokens) + [""]
    if layer_rows is not None:
        lines += [
            "## 1. Output layer + loss, forward and backward",
            "",
            f"{args.tokens} target tokens per step, float32. The H-dimensional decoder features require a "
            f"gradient. softmax = a learned V x H matrix with fairseq's `cross_entropy` criterion (float32 "
            f"log-softmax, summed NLL). continuous = `ContinuousOutput` (H -> m = {args.continuous_dim}, bias; "
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
        lines += ["", "Targets:", ""] + target_verdicts(layer_rows, args.vocab, args.dims) + [""]
    if train is not None:
        lines += [
            "## 2. Whole-model training speed, and 3. decoding speed",
            "",
            "Architectures: " + "; ".join(f"`--arch {a}` ({t['softmax']['desc']})" for a, t in train.items())
            + f". Word-level source and target dictionaries of {args.model_vocab} entries. The models are built "
            "by fairseq's option parsing, `tasks.setup_task` and `task.build_model` (as fairseq-train does) with "
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
        lines += [benchlib.flops_note(args.device, benchlib.matmul_flops(args.device)) + " Training count: 6 x target "
                  "tokens x trained parameters taking part in a matmul (input embedding lookups excluded; "
                  "attention scores and the source side's shorter/longer length ignored). The decoding table has "
                  "no FLOP column (beam search's cost is not a fixed matmul count).", ""]
        lines += model_tables(train, decode, args)
    return "\n".join(lines).rstrip() + "\n"
