#!/usr/bin/env python
"""Training and scoring speed of shared-private embeddings vs the vanilla Transformer and decoder weight tying.

Liu et al. (2019, Sec. 2.2) state that assembling the embedding matrices from their shared and private blocks
does not change training or decoding speed. This script measures it in one run: three Transformers of the same
shape -- vanilla (untied softmax), decoder WT (``--output-layer tied``) and shared-private (``--embeddings
shared-private --output-layer tied``) -- each take the same random batch through forward, backward and an Adam
step; the models are timed in interleaved rounds (so a busy machine slows all of them alike) and the median time
per step is reported with its ratio to vanilla and to decoder WT. Scoring (a teacher-forced forward pass in eval mode
without gradients, where the assembled matrices stay cached as in fairseq-generate) is timed the same way.

Dictionaries and pairing: ``--data DIR --pairing FILE`` uses real ones (e.g. Multi30k's, see
docs/shared-private.md); without them a synthetic pair of dictionaries of ``--vocab`` words is made, with
85 % of the words paired by meaning, 1 % by form and the rest unrelated.

Example (the run in docs/benchmarks/shared-private.md):
    python scripts/bench_shared_private.py --data /tmp/m30k/bin2 --pairing /tmp/m30k/pairs.forward.txt
On a GPU (``--device cuda``; the paper's Transformer base, d = 512, 6+6 layers, a 32k synthetic vocabulary):
    python scripts/bench_shared_private.py --device cuda --vocab 32000 --dim 512 --layers 6 --sentences 128 \
        --length 32 --output docs/benchmarks/shared_private_cuda.md
"""
import argparse
import os
import platform
import statistics
import shutil
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def synthetic_data(tmp: str, vocab: int):
    """Two dictionaries of ``vocab`` words and a pairing file for them; returns (src_dict, tgt_dict, pairing)."""
    from fairseq.data import Dictionary

    from fairseq_outlayers.methods.shared_private.word_pairs import pair_dictionaries, write_pairing

    shared = [str(i) for i in range(max(1, vocab // 100))]  # same word form on both sides, like numbers
    dicts = []
    for prefix in ("s", "t"):
        d = Dictionary()
        for k, w in enumerate(shared + [f"{prefix}{i}" for i in range(vocab - len(shared))]):
            d.add_symbol(w, n=vocab - k)
        dicts.append(d)
    src, tgt = dicts
    n_lm = int(0.85 * vocab)
    probs = {f"s{i}": {f"t{i}": 0.9} for i in range(n_lm)}
    pairing = pair_dictionaries(src, tgt, probs)
    path = os.path.join(tmp, "pairs.txt")
    write_pairing(path, pairing)
    return src, tgt, path


def build_models(src_dict, tgt_dict, pairing: str, dim: int, layers: int, lambdas: str, device: str = "cpu"):
    from fairseq import options
    from fairseq.tasks.translation import TranslationTask

    arch = ["--arch", "outlayers_transformer", "--encoder-layers", str(layers), "--decoder-layers", str(layers),
            "--encoder-embed-dim", str(dim), "--decoder-embed-dim", str(dim), "--encoder-ffn-embed-dim",
            str(4 * dim), "--decoder-ffn-embed-dim", str(4 * dim), "--encoder-attention-heads", "4",
            "--decoder-attention-heads", "4", "--dropout", "0.1"] + (["--cpu"] if device == "cpu" else [])
    variants = {
        "vanilla": ["--output-layer", "softmax"],
        "decoder WT": ["--output-layer", "tied"],
        "shared-private": ["--output-layer", "tied", "--embeddings", "shared-private", "--pairing", pairing,
                           "--shared-private-lambdas", lambdas],
    }
    models = {}
    for name, extra in variants.items():
        args = options.parse_args_and_arch(options.get_training_parser(), ["unused"] + arch + extra)
        task = TranslationTask(args, src_dict, tgt_dict)
        models[name] = task.build_model(args).to(device)
    return models


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--data", help="data-bin directory with dict.SRC.txt and dict.TGT.txt (with --pairing)")
    p.add_argument("--src", default="de")
    p.add_argument("--tgt", default="en")
    p.add_argument("--pairing", help="pairing file made for those dictionaries")
    p.add_argument("--vocab", type=int, default=10000, help="synthetic vocabulary size (without --data)")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--lambdas", default="0.9,0.7,0.5")
    p.add_argument("--sentences", type=int, default=32)
    p.add_argument("--length", type=int, default=20)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=3, help="steps per model per round")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    from fairseq_outlayers.lab.bench import benchlib

    benchlib.add_output_args(p, os.path.join(REPO, "docs", "benchmarks", "shared-private.md"))
    args = p.parse_args(argv)

    import torch
    import torch.nn.functional as F

    import fairseq_outlayers.models  # noqa: F401
    from fairseq_outlayers.methods.shared_private.word_pairs import load_dictionary, read_pairing
    from fairseq_outlayers.parameter_counts import parameter_report

    torch.set_num_threads(args.threads)
    benchlib.check_device(p, args.device)
    benchlib.check_output(args.output, args.force)
    device = args.device
    peak = benchlib.matmul_flops(device)
    torch.manual_seed(0)
    tmp = tempfile.mkdtemp(prefix="bench-sp-")
    if args.data:
        if not args.pairing:
            p.error("--data needs --pairing")
        src_dict = load_dictionary(os.path.join(args.data, f"dict.{args.src}.txt"))
        tgt_dict = load_dictionary(os.path.join(args.data, f"dict.{args.tgt}.txt"))
        pairing, source = args.pairing, f"dictionaries of {args.data}, pairing {args.pairing}"
    else:
        src_dict, tgt_dict, pairing = synthetic_data(tmp, args.vocab)
        source = f"synthetic dictionaries of {args.vocab} words"
    try:
        counts = read_pairing(pairing).counts()
        models = build_models(src_dict, tgt_dict, pairing, args.dim, args.layers, args.lambdas, device)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the synthetic pairing file: read, not needed after

    B, L = args.sentences, args.length
    src = torch.randint(4, len(src_dict), (B, L))
    src[:, -1] = src_dict.eos()
    tgt = torch.randint(4, len(tgt_dict), (B, L))
    tgt[:, -1] = tgt_dict.eos()
    prev = torch.cat([torch.full((B, 1), tgt_dict.eos()), tgt[:, :-1]], dim=1)
    lengths = torch.full((B,), L)
    src, tgt, prev, lengths = (x.to(device) for x in (src, tgt, prev, lengths))
    optims = {n: torch.optim.Adam(m.parameters(), lr=1e-4) for n, m in models.items()}

    def train_step(name):
        model = models[name]
        logits = model(src, lengths, prev)[0]
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))
        loss.backward()
        optims[name].step()
        optims[name].zero_grad()

    def score_step(name):
        model = models[name]
        with torch.no_grad():
            model(src, lengths, prev)

    times = {(n, kind): [] for n in models for kind in ("train", "score")}
    # training phase, then a scoring phase in eval mode (set once, as fairseq-generate does)
    for kind, fn, mode in (("train", train_step, True), ("score", score_step, False)):
        for n in models:
            models[n].train(mode)
            fn(n)  # warm-up
        for _ in range(args.rounds):
            for n in models:
                benchlib.sync(device)
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    fn(n)
                benchlib.sync(device)
                times[(n, kind)].append((time.perf_counter() - t0) / args.steps)
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}

    lines = [
        "# Shared-private embeddings: speed against vanilla and decoder WT (same run)",
        "",
        f"Command: `{benchlib.command_line('bench_shared_private.py', argv)}`",
        "",
        benchlib.stamp(device),
        "",
        (f"Machine: {torch.cuda.get_device_name(torch.device(device))}, CUDA {torch.version.cuda}, torch "
         f"{torch.__version__}, float32 (the models are timed in interleaved rounds)." if device.startswith("cuda") else
         f"Machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s), "
         f"CPU; {os.cpu_count()} cores (shared with other jobs: the models are timed in interleaved rounds)."),
        f"Data: {source}; {len(src_dict)} source / {len(tgt_dict)} target symbols; pairs lm/wf/ur = "
        f"{counts['lm']}/{counts['wf']}/{counts['ur']}; lambdas {args.lambdas}.",
        f"Model: Transformer, {args.layers}+{args.layers} layers, d = {args.dim}, FFN {4 * args.dim}; batch "
        f"{B} x {L} tokens per side; median of {args.rounds} rounds x {args.steps} steps.",
        "",
        "| model | embedding params | train ms/step | vs vanilla | vs decoder WT | score ms/batch | vs vanilla "
        "| vs decoder WT | train GFLOP/s | score GFLOP/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for n, m in models.items():
        rep = parameter_report(m)
        emb = rep["embedding"] + (rep.get("output", 0) if n == "vanilla" else 0)
        # matmul parameters: everything but the embedding tables, plus the V x d output matrix (tied or not)
        matmul = sum(q.numel() for q in m.parameters()) - emb + len(tgt_dict) * args.dim
        flops = benchlib.model_step_flops(B * L, matmul)
        lines.append(
            f"| {n} | {emb:,d} | {med[(n, 'train')]:.1f} | {med[(n, 'train')] / med[('vanilla', 'train')]:.3f} | "
            f"{med[(n, 'train')] / med[('decoder WT', 'train')]:.3f} | {med[(n, 'score')]:.1f} | "
            f"{med[(n, 'score')] / med[('vanilla', 'score')]:.3f} | {med[(n, 'score')] / med[('decoder WT', 'score')]:.3f} | "
            f"{benchlib.gflops(flops / (med[(n, 'train')] / 1000))} | "
            f"{benchlib.gflops(flops / 3 / (med[(n, 'score')] / 1000))} |"
        )
    lines += ["", "Embedding parameters count the source, target and output matrices (the output matrix is the "
              "target embedding when tied), as the paper's 'Emb.' column.", "",
              benchlib.flops_note(device, peak) + " Count: 6 x target tokens x (parameters outside the embedding "
              "tables + the V x d output matrix) for a training step, a third of it for scoring (forward only); "
              "the source side has as many tokens as the target here, attention scores are left out."]
    text = "\n".join(lines) + "\n"
    benchlib.finish(args.output, text)


if __name__ == "__main__":
    main()
