"""A per-word output bias fitted on a frozen trained model: the frequency prior a layer trained without one (or
with sampled negatives) lacks, learned after training from training data alone.

``fit_output_bias`` freezes a checkpoint, learns one bias value per target word (initialised to 0, Adam on the
cross-entropy of the first ``train_sentences`` training sentences, teacher-forced, dropout off) on top of its output
layer, and writes a copy of the checkpoint whose output layer carries that bias (``put_bias``). It is the ledger's
``# after: fit-output-bias`` step and the core of ``scripts/probe_output_bias.py`` (docs/joint-output.md: +1.39 test
BLEU for the joint layer trained with 25 % negative sampling, +1.16 for tying, three seeds each). It runs on the
``device`` given (the CPU by default; ``default_device()`` is the GPU when there is one, as fairseq-train picks) and
keeps the decoder features of the fitting sentences in that device's memory (114,596 target tokens x d for 10,000
Multi30k sentences); the logits are computed ``CHUNK`` tokens at a time.
"""
import math
from typing import Dict, Optional

import torch
import torch.nn.functional as F

import fairseq_outlayers.models  # noqa: F401  (registers the plugin: fairseq skips a --user-dir already imported)
from fairseq_outlayers.core.checkpoint_safety import read
from fairseq_outlayers.tools.checkpoints import load_model_ensemble_and_task
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.core.registry import OUTPUT_LAYER_REGISTRY
from fairseq_outlayers.outfiles import atomic_write

CHUNK = 8192
BIAS_KEY = "decoder.output_projection.bias"


def default_device() -> str:
    """``cuda`` when a CUDA device is visible (the device fairseq-train would train on), else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def load(checkpoint: str, data: Optional[str] = None):
    """(model in eval mode and in float32, task, cfg) of a checkpoint, its data directory replaced by ``data`` when
    given (a model saved in half precision, e.g. by ``--memory-efficient-fp16``, is fitted in float32;
    ``put_bias`` stores the bias in the checkpoint's own precision)."""
    overrides = {"data": data} if data else {}
    models, cfg, task = load_model_ensemble_and_task([checkpoint], arg_overrides=overrides)
    return models[0].float().eval(), task, cfg


@torch.no_grad()
def features(model, task, split: str, max_tokens: int, max_sentences: Optional[int] = None):
    """(decoder features of every target token, target ids) of a split, teacher-forced, dropout off, on the model's
    device; with ``max_sentences``, of the first batches holding at least that many sentences (in the data's length
    order)."""
    from fairseq import utils

    device = next(model.parameters()).device
    task.load_dataset(split)
    dataset = task.dataset(split)
    itr = task.get_batch_iterator(dataset, max_tokens=max_tokens, ignore_invalid_inputs=False,
                                  seed=1).next_epoch_itr(shuffle=False)
    pad = task.target_dictionary.pad()
    feats, targets, seen = [], [], 0
    for batch in itr:
        batch = utils.apply_to_sample(lambda t: t.to(device), batch)
        net = batch["net_input"]
        encoder_out = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"])
        x, _ = model.decoder(net["prev_output_tokens"], encoder_out=encoder_out, features_only=True)
        mask = batch["target"].ne(pad)
        feats.append(x[mask].float())
        targets.append(batch["target"][mask])
        seen += batch["nsentences"]
        if max_sentences and seen >= max_sentences:
            break
    return torch.cat(feats), torch.cat(targets)


def nll_bits(layer, feats, targets, bias=None, scale=None) -> float:
    """Mean negative log-likelihood of the targets in bits, the output layer's logits (times ``scale``) plus
    ``bias``."""
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(targets), CHUNK):
            logits = layer(feats[i:i + CHUNK]).float()
            if scale is not None:
                logits = logits * scale
            if bias is not None:
                logits = logits + bias
            total += F.cross_entropy(logits, targets[i:i + CHUNK], reduction="sum").item()
    return total / len(targets) / math.log(2)


def fit_on_logits(layer, feats, targets, init, apply, epochs: int, lr: float, seed: int = 1):
    """Parameters ``init`` of ``apply(logits, param)`` over the frozen layer's logits, Adam on the training tokens'
    cross-entropy, chunks of ``CHUNK`` tokens in a seeded random order (the layer's logits are computed chunk by
    chunk, never all kept)."""
    param = init.to(feats.device).clone().requires_grad_(True)
    opt = torch.optim.Adam([param], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    chunks = range(0, len(targets), CHUNK)
    for _ in range(epochs):
        for j in torch.randperm(len(chunks), generator=gen).tolist():
            with torch.no_grad():
                logits = layer(feats[chunks[j]:chunks[j] + CHUNK]).float()
            opt.zero_grad()
            F.cross_entropy(apply(logits, param), targets[chunks[j]:chunks[j] + CHUNK]).backward()
            opt.step()
    return param.detach()


def fit_bias(layer, feats, targets, vocab: int, epochs: int, lr: float, seed: int = 1):
    """A bias over the frozen layer's logits."""
    return fit_on_logits(layer, feats, targets, torch.zeros(vocab), lambda z, b: z + b, epochs, lr, seed)


def fit_scale(layer, feats, targets, epochs: int, lr: float, seed: int = 1):
    """One scale on the frozen layer's logits (fitted as its logarithm, from 0)."""
    return fit_on_logits(layer, feats, targets, torch.zeros(()), lambda z, s: z * s.exp(), epochs, lr, seed).exp()


def takes_bias() -> str:
    """The registered output layers that take ``--output-bias``, for a message: "a, b"."""
    return ", ".join(sorted(name for name, spec in OUTPUT_LAYER_REGISTRY.items() if spec.output_bias))


def accepts_bias(model, task, cfg) -> bool:
    """Whether a fitted bias can go into this model's output layer: it has a per-word bias (its own, or one trained
    with ``--output-bias``) or its kind takes ``--output-bias`` (``OutputLayerSpec.output_bias``)."""
    layer = model.decoder.output_projection
    own = dict(layer.named_buffers(recurse=False), **dict(layer.named_parameters(recurse=False)))
    spec = OUTPUT_LAYER_REGISTRY.get(getattr(cfg.model, "output_layer", None))
    return getattr(own.get("bias"), "shape", None) == (len(task.target_dictionary),) or bool(
        spec and spec.output_bias)


def put_bias(state: Dict, bias, accepts_bias: bool):
    """Put the fitted ``bias`` into a checkpoint's ``state`` (in place): added to the output layer's own bias, or
    stored as a new one with ``output_bias`` switched on in the saved configuration when the layer was trained
    without one and its kind takes ``--output-bias`` (``accepts_bias``). Raises ValueError otherwise."""
    weights = state["model"]
    if BIAS_KEY in weights:
        weights[BIAS_KEY] = weights[BIAS_KEY] + bias.to(weights[BIAS_KEY].dtype)
        return
    if not accepts_bias:
        raise ValueError("a fitted bias needs an output layer with a per-word bias or one that takes "
                         f"--output-bias ({takes_bias()})")
    dtype = next(v.dtype for v in weights.values() if torch.is_floating_point(v))
    weights[BIAS_KEY] = bias.to(dtype)
    from omegaconf import DictConfig, open_dict

    for config in (state.get("args"), (state.get("cfg") or {}).get("model")):
        if isinstance(config, DictConfig):
            with open_dict(config):
                config.output_bias = True
        elif config is not None:
            config.output_bias = True


def write_checkpoint(checkpoint: str, out_checkpoint: str, bias, accepts: bool, model=None):
    """A copy of ``checkpoint`` with ``bias`` in its output layer, written atomically. The checkpoint is read again
    with the safe (weights-only) loader; with ``model``, the weights read must be the ones the bias was fitted on,
    so a file replaced while the fit ran is refused rather than written with a bias that is not its own."""
    state = read(checkpoint)
    if model is not None and not same_weights(model, state["model"]):
        raise OutlayersConfigError(f"checkpoint '{checkpoint}' changed while the bias was fitted (its weights are no "
                                   f"longer the ones loaded); nothing was written to '{out_checkpoint}': run again")
    put_bias(state, bias, accepts)
    with atomic_write(out_checkpoint, "wb") as f:
        torch.save(state, f)


def same_weights(model, weights: Dict) -> bool:
    """Whether every parameter of ``model`` is in ``weights`` (a checkpoint's ``model`` state) with the same values
    (compared in the model's float32 copy of them)."""
    for name, param in model.named_parameters():
        saved = weights.get(name)
        if not torch.is_tensor(saved) or saved.shape != param.shape or not torch.equal(
                saved.float(), param.detach().float().cpu()):
            return False
    return True


def fit_output_bias(checkpoint: str, out_checkpoint: str, data: Optional[str] = None,
                    train_sentences: Optional[int] = None, epochs: int = 3, lr: float = 0.05,
                    max_tokens: int = 4096, device: str = "cpu") -> Dict:
    """Fit the bias on ``checkpoint`` (on ``device``) and write ``out_checkpoint``; returns the figures (validation and
    training NLL in bits per target token without and with the bias, tokens used, settings)."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device '{device}' was asked for but torch sees no CUDA device; use cpu")
    model, task, cfg = load(checkpoint, data)
    model.to(device)
    accepts = accepts_bias(model, task, cfg)
    if not accepts:
        raise ValueError(f"{checkpoint}: a fitted bias needs an output layer with a per-word bias or one that takes "
                         f"--output-bias ({takes_bias()}); this one is "
                         f"{type(model.decoder.output_projection).__name__} without one")
    layer = model.decoder.output_projection
    train_x, train_y = features(model, task, "train", max_tokens, train_sentences)
    valid_x, valid_y = features(model, task, "valid", max_tokens)
    bias = fit_bias(layer, train_x, train_y, len(task.target_dictionary), epochs, lr)
    write_checkpoint(checkpoint, out_checkpoint, bias.cpu(), accepts, model)
    return {"train_sentences": train_sentences, "train_tokens": len(train_y), "valid_tokens": len(valid_y),
            "epochs": epochs, "lr": lr,
            "valid_nll_bits": {"as trained": round(nll_bits(layer, valid_x, valid_y), 4),
                               "fitted bias": round(nll_bits(layer, valid_x, valid_y, bias), 4)},
            "train_nll_bits": {"as trained": round(nll_bits(layer, train_x, train_y), 4),
                               "fitted bias": round(nll_bits(layer, train_x, train_y, bias), 4)}}
