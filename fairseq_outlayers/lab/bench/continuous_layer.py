"""Part 1 of scripts/bench_continuous.py inside one process: the output layer under test on a stub fairseq model,
the registered criterion, one forward + backward (in token chunks), the softmax's peak-memory model and the chunking
it implies, and one whole measurement (``layer_probe``, run in a fresh process by ``continuous_probes``)."""
import gc
import math
import time
from argparse import Namespace

import torch
import torch.nn as nn

from . import benchlib

LAYER_METHODS = ("softmax", "vmf_nll", "cosine")
MiB = 2.0 ** 20
GiB = 2.0 ** 30


def default_vmf_variant():
    from fairseq_outlayers.methods.continuous.criterions import VMFNLLConfig

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
    from fairseq_outlayers.methods.continuous.continuous_output import ContinuousOutput
    from fairseq_outlayers.methods.baselines.softmax import LearnedSoftmaxOutput

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

    from fairseq_outlayers.methods.continuous.criterions import CosineCriterion, VMFNLLConfig, VMFNLLCriterion

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
