#!/usr/bin/env python
"""Decoding and training speed of every output layer, and of stock fairseq's Transformer, in one run.

    OMP_NUM_THREADS=1 python scripts/bench_decode.py --device cpu --data work/multi30k/data-bin/de-en \\
        --output docs/benchmarks/decode_cpu.md

Every model is built as fairseq-train builds it from its command line (``--arch``, the method's options; the stock
rows: ``--arch transformer`` at the same sizes, without the package's layers), with its initial weights: speed does
not depend on training when the hypothesis length is fixed. Each decodes the same source sentences (the first
``--sentences`` of the ``--split`` of ``--data``, batches of ``--batch-size``) with fairseq's ``SequenceGenerator``
(what fairseq-generate runs), every hypothesis forced to ``--length`` tokens and ``</s>``. In each round every
model decodes once, in an order rotated by one per round; one untimed round first. The table gives the median
sentences/s and the median of the per-round ratios to the softmax. Continuous rows use random unit target
vectors for every target word, with exact search and with faiss. With ``--train-rounds N``, a second table: one
training step (forward, the method's loss, backward; no optimizer) on the first ``--train-sentences`` sentences
of the train split, every model once per round, N rounds after one untimed: target tokens/s.

With ``--checkpoints NAME=PATH ...`` (trained models; one named softmax), the page starts with real decoding:
``fairseq-generate`` in a new process a run, every model at every beam, ``--generate-rounds`` rounds, and each
model's BLEU (``fairseq_outlayers/lab/bench/decode_generate.py``). ``--rounds 0`` leaves the in-process proxy out.
"""
import argparse
import os
import shlex
import statistics
import sys
import shutil
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from fairseq_outlayers import USER_DIR  # noqa: E402
from fairseq_outlayers.lab.bench import benchlib, decode_generate  # noqa: E402

#: method -> the fairseq options that build it ("{vec}": target vectors, "{pairing}": the pairing file, "{d}": d)
METHODS = {
    "softmax": ["--output-layer", "softmax"],
    "stock fairseq, softmax": ["{stock}"],
    "tied": ["--output-layer", "tied"],
    "stock fairseq, tied": ["{stock}", "--share-decoder-input-output-embed"],
    "joint d_j = d": ["--output-layer", "joint", "--joint-dim", "{d}"],
    "fixed": ["--output-layer", "fixed"],
    "shared-private": ["--embeddings", "shared-private", "--pairing", "{pairing}", "--output-layer", "tied"],
    "continuous, exact": ["--output-layer", "continuous", "--target-vectors", "{vec}", "--criterion", "vmf_nll"],
    "continuous, faiss": ["--output-layer", "continuous", "--target-vectors", "{vec}", "--criterion", "vmf_nll",
                          "--continuous-search", "faiss"],
}
STOCK = {"outlayers_transformer": ["transformer"],
         "outlayers_transformer_tiny": ["transformer"] + [
             o for side in ("encoder", "decoder") for o in (
                 f"--{side}-embed-dim", "128", f"--{side}-ffn-embed-dim", "512", f"--{side}-attention-heads", "4",
                 f"--{side}-layers", "2")]}
DIMS = {"outlayers_transformer": 512, "outlayers_transformer_tiny": 128}


def support_files(data, work, src, tgt, dim=300):
    """(target vectors, pairing file) for the continuous and shared-private rows."""
    from fairseq.data import Dictionary

    from fairseq_outlayers.lab.bench.continuous_layer import random_unit_table
    from fairseq_outlayers.methods.shared_private.word_pairs.pairs import pair_dictionaries, write_pairing

    sd, td = (Dictionary.load(os.path.join(data, f"dict.{lang}.txt")) for lang in (src, tgt))
    pairing = os.path.join(work, "pairing.txt")
    write_pairing(pairing, pair_dictionaries(sd, td, {}), overwrite=True)  # no alignment: same forms, then the rest
    words = [td[i] for i in range(td.nspecial, len(td))]
    table = random_unit_table(len(words), dim, seed=1).numpy()
    vec = os.path.join(work, "vectors.vec")
    with open(vec, "w") as f:
        f.write(f"{len(words)} {dim}\n")
        for w, row in zip(words, table):
            f.write(w + " " + " ".join(f"{x:.5f}" for x in row) + "\n")
    return vec, pairing


def build(args, method, files):
    """(task, model, criterion) as fairseq-train builds them for ``method`` (cross_entropy unless it names one)."""
    import torch
    from fairseq import options, tasks

    import fairseq_outlayers.models  # noqa: F401  (fairseq skips a --user-dir already imported: register here)

    opts = [o.replace("{vec}", files[0]).replace("{pairing}", files[1]).replace("{d}", str(DIMS.get(args.arch, 512)))
            for o in METHODS[method]]
    arch = ["--user-dir", USER_DIR, "--arch", args.arch]
    if "{stock}" in opts:
        opts.remove("{stock}")
        arch = ["--user-dir", USER_DIR, "--arch"] + STOCK[args.arch]  # the package only registers; stock model
    cli = [args.data, *arch, "--task", "translation", "-s", args.source_lang, "-t", args.target_lang,
           "--seed", "1", "--dropout", "0.1"] + (["--cpu"] if args.device == "cpu" else []) + opts
    targs = options.parse_args_and_arch(options.get_training_parser(), cli)
    task = tasks.setup_task(targs)
    torch.manual_seed(1)
    model = task.build_model(targs).to(args.device).eval()
    return task, model, task.build_criterion(targs).to(args.device)


def batches(task, args):
    from fairseq import utils

    task.load_dataset(args.split)
    ds = task.dataset(args.split)
    idx = list(range(min(args.sentences, len(ds))))
    out = []
    for i in range(0, len(idx), args.batch_size):
        sample = ds.collater([ds[j] for j in idx[i:i + args.batch_size]])
        out.append(sample if args.device == "cpu" else utils.move_to_cuda(sample))
    return out, len(idx)


def generator(task, model, beam, length):
    gen_args = argparse.Namespace(beam=beam, max_len_a=0, max_len_b=length, min_len=length, nbest=1, lenpen=1.0,
                                  unkpen=0.0, temperature=1.0, no_repeat_ngram_size=0)
    return task.build_generator([model], gen_args)


def decode(task, model, gen, samples, device, length):
    import torch

    benchlib.sync(device)
    t0 = time.perf_counter()
    with torch.no_grad():
        for sample in samples:
            hypos = task.inference_step(gen, [model], sample)
            lengths = {len(h[0]["tokens"]) for h in hypos}
            if lengths != {length + 1}:
                raise RuntimeError(f"hypothesis lengths {sorted(lengths)}, expected {length + 1} (forced)")
    benchlib.sync(device)
    return time.perf_counter() - t0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data", default=os.path.join(REPO, "work", "multi30k", "data-bin", "de-en"))
    parser.add_argument("--source-lang", default="de")
    parser.add_argument("--target-lang", default="en")
    parser.add_argument("--split", default="test", help="the split whose source sentences are decoded")
    parser.add_argument("--arch", default="outlayers_transformer_tiny", choices=sorted(STOCK))
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS), metavar="METHOD")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--length", type=int, default=20, help="forced hypothesis length (tokens before </s>)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-rounds", type=int, default=0, help="rounds of training steps (0: none)")
    parser.add_argument("--train-sentences", type=int, default=150, help="sentences of the training step's batch")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--checkpoints", nargs="+", default=[], metavar="NAME=PATH",
                        help="trained checkpoints to time through fairseq-generate (one named softmax)")
    parser.add_argument("--generate-extra", action="append", default=[], metavar="NAME=OPTIONS",
                        help="more fairseq-generate options for one checkpoint, e.g. "
                        "\"continuous, faiss=--model-overrides {'continuous_search':'faiss'}\"")
    parser.add_argument("--generate-rounds", type=int, default=3)
    parser.add_argument("--generate-batch-size", type=int, default=64)
    parser.add_argument("--reference", default=os.path.join(REPO, "work", "multi30k", "raw", "test_2016_flickr.en"),
                        help="raw references of --split, for BLEU")
    parser.add_argument("--lowercase", action="store_true", help="score BLEU case-insensitively (lowercased data)")
    benchlib.add_output_args(parser, os.path.join(REPO, "docs", "benchmarks", "decode_cpu.md"))
    args = parser.parse_args(argv)
    import torch

    benchlib.check_device(parser, args.device)
    benchlib.check_output(args.output, args.force)
    if "softmax" not in args.methods:
        parser.error("--methods needs softmax: the ratios are to it")
    try:
        models = decode_generate.parse_specs(args.checkpoints, "--checkpoints")
        extras = {m: shlex.split(o) for m, o in decode_generate.parse_specs(args.generate_extra,
                                                                             "--generate-extra").items()}
    except ValueError as e:
        parser.error(str(e))
    if models and "softmax" not in models:
        parser.error("--checkpoints needs one named softmax: the ratios are to it")
    if not models and not args.rounds:
        parser.error("nothing to run: give --checkpoints or --rounds above 0")
    torch.set_num_threads(args.threads)
    start, load0 = time.time(), os.getloadavg()
    generated = decode_generate.measure(models, extras, args) if models else None
    if generated:
        with open(args.reference, encoding="utf-8") as f:
            references = [line.rstrip("\n") for line in f]
        generated = decode_generate.report(models, extras, generated, args, references)
    if not args.rounds:
        return finish_page(args, argv, start, load0, generated, [])
    work = tempfile.mkdtemp(prefix="bench_decode.")
    files = support_files(args.data, work, args.source_lang, args.target_lang)
    try:
        built = {m: build(args, m, files) for m in args.methods}
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the support files: read by the builds, not needed after
    samples, n = batches(built["softmax"][0], args)
    params = {m: sum(p.numel() for p in b[1].parameters()) for m, b in built.items()}
    train = train_speed(args, built) if args.train_rounds else None
    results = {}
    for beam in args.beams:
        gens = {m: generator(b[0], b[1], beam, args.length) for m, b in built.items()}
        times = {m: [] for m in args.methods}
        order = list(args.methods)
        for r in range(args.rounds + 1):
            k = r % len(order)
            for m in order[k:] + order[:k]:
                dt = decode(built[m][0], built[m][1], gens[m], samples, args.device, args.length)
                if r:
                    times[m].append(dt)
            if r:
                print(f"beam {beam} round {r}: " + ", ".join(f"{m} {n / times[m][-1]:.1f}" for m in order),
                      flush=True)
        base = times["softmax"]
        results[beam] = {m: (n / statistics.median(t), [b / a for a, b in zip(t, base)]) for m, t in times.items()}
    lines = [
        "## In-process proxy: initial weights, every hypothesis forced to the same length", "",
        f"`{args.arch}` models as fairseq-train builds them, initial weights. The first {n} source sentences of "
        f"`{args.split}` in `{os.path.relpath(args.data, REPO) if args.data.startswith(REPO) else args.data}`, "
        f"batches of {args.batch_size}, fairseq's SequenceGenerator with every hypothesis forced to {args.length} "
        f"tokens and </s>. {args.rounds} timed round(s) after one untimed; each round decodes with every model once, in a "
        "rotated order. Sentences/s: the median. × softmax: the median of the per-round ratios, with their range. "
        "Stock rows: fairseq's `--arch transformer` at the same sizes. Continuous: 300-d random unit target vectors.",
        "",
        "| method | parameters | " + " | ".join(f"beam {b}: sentences/s | × softmax" for b in args.beams) + " |",
        "|---|---:|" + "---:|---:|" * len(args.beams),
    ]
    for m in args.methods:
        cells = []
        for b in args.beams:
            sent_s, ratios = results[b][m]
            cells += [f"{sent_s:,.1f}", f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"]
        lines.append(f"| {m} | {params[m]:,} | " + " | ".join(cells) + " |")
    if train:
        tokens, speed = train
        lines += ["", f"### Training steps, in-process ({tokens:,} target tokens a step)", "",
                  "| method | tokens/s | × softmax |", "|---|---:|---:|"]
        for m in args.methods:
            tok_s, ratios = speed[m]
            lines.append(f"| {m} | {tok_s:,.0f} | {statistics.median(ratios):.2f} "
                         f"({min(ratios):.2f}-{max(ratios):.2f}) |")
    lines += ["", "### The plugin against stock fairseq, in-process", ""]
    parts = [(f"decoding, beam {b}", "sentences/s", results[b]) for b in args.beams]
    if train:
        parts.insert(0, ("training", "tokens/s", train[1]))
    for ours, stock in (("softmax", "stock fairseq, softmax"), ("tied", "stock fairseq, tied")):
        if ours not in built or stock not in built:
            continue
        for what, unit, res in parts:
            ratios = [a / s for a, s in zip(res[ours][1], res[stock][1])]
            med = statistics.median(ratios)
            verdict = "met" if min(ratios) >= 0.97 else ("not met" if max(ratios) < 0.97 else
                                                          "within the run-to-run range")
            lines.append(f"- {what}: {ours} at {med:.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) the {unit} of "
                         f"{stock} (target: at least 0.97x): **{verdict}**.")
    return finish_page(args, argv, start, load0, generated, lines)


def finish_page(args, argv, start, load0, generated, proxy):
    """The page: title, command, stamp, wall time and load; the fairseq-generate section, then the proxy's."""
    import torch

    load = os.getloadavg()
    lines = [
        "# Decoding speed of every output layer, and the plugin against stock fairseq", "",
        f"Command: `OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '?')} "
        f"{benchlib.command_line('bench_decode.py', argv)}`", "",
        benchlib.stamp(args.device, start) + f" torch {torch.__version__}, {torch.get_num_threads()} thread(s).", "",
        f"Wall time {time.time() - start:,.0f} s. Load average (1, 5, 15 min) {load0[0]:.1f} {load0[1]:.1f} "
        f"{load0[2]:.1f} at the start, {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end, on {os.cpu_count()} "
        "cores.", "",
    ]
    if generated:
        lines += generated + [""]
    benchlib.finish(args.output, "\n".join(lines + proxy).rstrip("\n") + "\n")
    return 0


def train_speed(args, built):
    """(target tokens a step, {method: (median tokens/s, per-round speed ratios to the softmax)})."""
    task = built["softmax"][0]
    task.load_dataset("train")
    ds = task.dataset("train")
    sample = ds.collater([ds[j] for j in range(min(args.train_sentences, len(ds)))])
    if args.device != "cpu":
        from fairseq import utils

        sample = utils.move_to_cuda(sample)
    tokens = int(sample["ntokens"])
    order = list(args.methods)
    times = {m: [] for m in order}
    for r in range(args.train_rounds + 1):
        k = r % len(order)
        for m in order[k:] + order[:k]:
            _, model, criterion = built[m]
            model.train()
            model.zero_grad(set_to_none=True)
            torch_manual_seed(r)
            benchlib.sync(args.device)
            t0 = time.perf_counter()
            criterion(model, sample)[0].backward()
            benchlib.sync(args.device)
            if r:
                times[m].append(time.perf_counter() - t0)
        if r:
            print(f"train round {r}: " + ", ".join(f"{m} {tokens / times[m][-1]:.0f}" for m in order), flush=True)
        for m in order:
            built[m][1].zero_grad(set_to_none=True)
            built[m][1].eval()
    base = times["softmax"]
    return tokens, {m: (tokens / statistics.median(t), [b / a for a, b in zip(t, base)]) for m, t in times.items()}


def torch_manual_seed(seed):
    import torch

    torch.manual_seed(seed)  # the same dropout masks for every model of a round


if __name__ == "__main__":
    sys.exit(main())
