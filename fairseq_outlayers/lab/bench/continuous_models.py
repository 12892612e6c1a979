"""Parts 2 and 3 of scripts/bench_continuous.py: a softmax and a continuous ``outlayers_transformer`` built as
fairseq-train builds them (on ``--device``, float32), timed on synthetic batches: training steps (tokens/s) and
decoding with fairseq's ``SequenceGenerator`` at a forced hypothesis length (sentences/s)."""
import math
import os
import statistics
import time
from argparse import Namespace

import torch

from fairseq_outlayers import USER_DIR

from . import benchlib
from .continuous_layer import random_unit_table



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


def build(data_dir, arch, method, extra=(), device="cpu"):
    """(task, model, criterion, args) exactly as fairseq-train builds them from its command line, on ``device``."""
    from fairseq import options, tasks

    import fairseq_outlayers.models  # noqa: F401  (fairseq skips a --user-dir already imported: register here)

    cli = [data_dir, "--user-dir", USER_DIR, "--task", "translation", "-s", "src", "-t", "tgt", "--arch", arch,
           "--optimizer", "adam", "--lr", "0.0005", "--seed", "1"] + (["--cpu"] if device == "cpu" else [])
    if method == "softmax":
        cli += ["--output-layer", "softmax", "--criterion", "cross_entropy"]
    else:
        cli += ["--output-layer", "continuous", "--criterion", "vmf_nll", "--target-vectors",
                os.path.join(data_dir, "vectors.tgt.vec")]
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, cli + list(extra))
    task = tasks.setup_task(args)
    model = task.build_model(args).to(device)
    criterion = task.build_criterion(args).to(device)
    return task, model, criterion, args


def to_device(sample, device):
    """``sample`` with every tensor moved to ``device``."""
    from fairseq import utils

    return sample if device == "cpu" else utils.apply_to_sample(lambda t: t.to(device), sample)


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
    arch, device = built["softmax"][3].arch, getattr(args, "device", "cpu")
    order = list(built)
    times = {name: [] for name in order}
    dictionary = built[order[0]][0].target_dictionary
    for rep in range(args.train_steps + 1):  # repetition 0 warms up
        sample = to_device(synthetic_batch(dictionary, args.train_sentences, args.train_len, args.train_len,
                                           seed=rep), device)
        for name in (order if rep % 2 == 0 else order[::-1]):
            benchlib.sync(device)
            t0 = time.perf_counter()
            loss = steps[name](sample)  # .item() waits for the step
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
    arch, device = built["softmax"][3].arch, getattr(args, "device", "cpu")
    dictionary = built[order[0]][0].source_dictionary
    results = {}
    for beam in args.beams:
        gens = {name: decode_generator(b[0], b[1], beam, args.decode_len) for name, b in built.items()}
        times = {name: [] for name in order}
        for rep in range(args.decode_reps + 1):
            sample = to_device(synthetic_batch(dictionary, args.decode_sentences, args.decode_len, 2,
                                               seed=100 + rep), device)
            for name in (order if rep % 2 == 0 else order[::-1]):
                benchlib.sync(device)
                t0 = time.perf_counter()
                hypos = decode_batch(built[name][0], built[name][1], gens[name], sample)
                benchlib.sync(device)
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
    device = getattr(args, "device", "cpu")
    return {name: build(data_dir, arch, name, extra, device) for name in ("softmax", "continuous")}
