"""The stock fairseq twin of a package model: the architecture families (``FAMILIES``, each naming its stock
twin), the seams' plain tensors (each registration's ``export``), the twin's options and weights, and the check
that both give the same log-probabilities. ``tools/export.py`` hands the twin to a target's writer."""
import argparse
import dataclasses
import logging
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch

from fairseq_outlayers.core.registry import get_embedding_spec, get_output_layer_spec
from fairseq_outlayers.errors import ExportRefused
from fairseq_outlayers.models.lstm import OutlayersLSTMModel
from fairseq_outlayers.models.transformer import OutlayersTransformerModel

logger = logging.getLogger("fairseq_outlayers.export")

#: the refusal of an entry whose registration declares no ``export`` (after the entry's option and name)
NOT_DECLARED = "declares no export (its registration has no export=...)"


# -- the architecture families and their stock twins ----------------------------------------------------------
def _transformer_options(values: dict, args, tensors):
    weight, target = tensors["weight"], tensors["target"]
    tied = weight.shape == target.shape and bool(torch.equal(weight, target))
    share_all = bool(getattr(args, "share_all_embeddings", False)) and tied \
        and bool(torch.equal(tensors["source"], target))
    values.update(share_all_embeddings=share_all, share_decoder_input_output_embed=tied, adaptive_softmax_cutoff=None,
                  decoder_output_dim=int(weight.size(1)))


def _transformer_fills(model, tensors) -> Dict[str, torch.Tensor]:
    fills = {"decoder.output_projection.weight": tensors["weight"]}
    if tensors["bias"] is not None:  # a target that holds it (Family.output_bias is False: see build_stock)
        fills["decoder.output_projection.bias"] = tensors["bias"]
    return fills


def _lstm_options(values: dict, args, tensors):
    values.update(share_all_embeddings=False, share_decoder_input_output_embed=False, adaptive_softmax_cutoff=None,
                  decoder_attention="1")


def _lstm_fills(model, tensors) -> Dict[str, torch.Tensor]:
    weight, bias = tensors["weight"], tensors["bias"]
    fills = {"decoder.fc_out.weight": weight,
             "decoder.fc_out.bias": bias if bias is not None else weight.new_zeros(weight.size(0))}
    if model.decoder.attention.input_proj is None:  # dot score: stock fairseq always projects the query
        fills["decoder.attention.input_proj.weight"] = torch.eye(model.decoder.hidden_size)
    return fills


def _lstm_checks(model, args, tensors):
    """What stock fairseq's LSTM cannot hold: a deeper decoder than encoder."""
    if args.encoder_layers != args.decoder_layers:
        raise ExportRefused(f"stock fairseq's LSTM needs --encoder-layers equal to --decoder-layers (this model: "
                            f"{args.encoder_layers} and {args.decoder_layers})")


@dataclass(frozen=True)
class Family:
    """An architecture family of the package and its stock twin: the fairseq architecture that holds the same
    model once the seams are plain tensors."""
    name: str
    model_class: type
    stock: str  # the stock fairseq architecture (``--arch``) of the twin
    label: str  # how messages name the twin
    output_bias: bool  # the twin's output projection holds a per-word bias
    options: Callable  # options(values, args, tensors): the twin's options that the seams decide
    fills: Callable  # fills(model, tensors) -> {state key: tensor}: the twin's weights that the seams give
    checks: Optional[Callable] = None  # checks(model, args, tensors): refuses what the twin cannot hold


FAMILIES: Tuple[Family, ...] = (
    Family("transformer", OutlayersTransformerModel, "transformer", "stock fairseq's Transformer", False,
           _transformer_options, _transformer_fills),
    Family("lstm", OutlayersLSTMModel, "lstm", "stock fairseq's LSTM", True, _lstm_options, _lstm_fills, _lstm_checks),
)


def family_of(model) -> Family:
    """The family of this package's ``model``; a refusal in one line for any other model."""
    for family in FAMILIES:
        if isinstance(model, family.model_class):
            return family
    names = " or ".join(f.name.capitalize() if f.name != "lstm" else "LSTM" for f in FAMILIES)
    raise ExportRefused(f"the model is a {type(model).__name__}, not one of this package's {names} models; export a "
                        "checkpoint written by fairseq-train --user-dir fairseq_outlayers")


def _family(model) -> str:
    return family_of(model).name


# -- the seams' tensors --------------------------------------------------------------------------------------
def _declared(spec, what: str, module, *extra):
    """What the registry entry ``spec`` declares for ``module``; a refusal in one line naming ``what``."""
    if spec.export is None:
        raise ExportRefused(f"{what} {NOT_DECLARED}")
    if isinstance(spec.export, str):
        raise ExportRefused(f"{what} cannot be exported: {spec.export}")
    try:
        return spec.export(module, *extra)
    except ExportRefused as e:
        raise ExportRefused(f"{what} cannot be exported: {e}") from None


def seam_tensors(model, args) -> Dict[str, Optional[torch.Tensor]]:
    """The plain tensors of the two seams, as the registries declare them: the source and target embedding
    tables and the output projection's weight and bias."""
    embeddings = get_embedding_spec(args.embeddings)
    layer = get_output_layer_spec(args.output_layer)
    what = f"--embeddings {embeddings.name}"
    source = _declared(embeddings, what, model.encoder.embed_tokens)
    target = _declared(embeddings, what, model.decoder.embed_tokens)
    weight, bias = _declared(layer, f"--output-layer {layer.name}", model.decoder.output_projection)
    return {"source": source, "target": target, "weight": weight, "bias": bias}


# -- the stock model ------------------------------------------------------------------------------------------
def _stock_keys(family: str, task_name: str):
    """Every option a stock fairseq-train run of ``family`` on ``task_name`` has (model, task, training)."""
    from fairseq import options

    parser = options.get_training_parser(default_task=task_name)
    return set(vars(options.parse_args_and_arch(parser, ["DATA", "--arch", family, "--task", task_name])))


def stock_args(args, family, tensors, task_cfg=None) -> argparse.Namespace:
    """The model's options as the stock twin of ``family`` (a ``Family`` or its name) reads them: this package's
    options (and the values it records) left out, the tying done by the stock model where the tensors allow, the
    architecture's defaults filled in."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    family = family if isinstance(family, Family) else next(f for f in FAMILIES if f.name == family)
    # an argparse Namespace (fairseq-train) or a DictConfig (fairseq-hydra-train, whose model section has no task
    # options: those come from the task's own configuration)
    task_values = _plain(task_cfg) if task_cfg is not None else {}
    given = {**task_values, "task": task_values.get("_name"), **_plain(args)}
    keys = _stock_keys(family.stock, given.get("task") or "translation")
    values = {k: v for k, v in given.items() if k in keys}
    values.update(arch=family.stock, _name=family.stock, user_dir=None)
    family.options(values, args, tensors)
    stock = argparse.Namespace(**values)
    ARCH_CONFIG_REGISTRY[family.stock](stock)
    return stock


def _bias_refusal(family: Family, args, bias_targets) -> ExportRefused:
    holders = [name for name, families in bias_targets if family.name in families]
    layer = getattr(args, "output_layer", "?")
    fix = f"export it with --to {' or --to '.join(holders)}" if holders else "train it without --output-bias"
    return ExportRefused(f"{family.label} output projection has no bias, and this model's output layer has a per-word "
                         f"one (--output-layer {layer} with --output-bias, or the layer's own); {fix}")


def stock_state(model, stock_model, family, tensors) -> Dict[str, torch.Tensor]:
    """The stock model's state dict filled from this package's model: the seams' tensors, everything else by name
    (the rest of both architectures is fairseq's own code)."""
    family = family if isinstance(family, Family) else next(f for f in FAMILIES if f.name == family)
    source = model.state_dict()
    fills = {"encoder.embed_tokens.weight": tensors["source"], "decoder.embed_tokens.weight": tensors["target"]}
    fills.update(family.fills(model, tensors))
    state = {}
    for key, value in stock_model.state_dict().items():
        given = fills.get(key, source.get(key))
        if given is None or given.shape != value.shape:
            found = "missing" if given is None else f"of shape {tuple(given.shape)}"
            raise ExportRefused(f"stock fairseq's {family.stock} has the weight '{key}' of shape {tuple(value.shape)}, "
                                f"which this model holds {found}")
        state[key] = given.detach().to(value.dtype).clone().contiguous()
    return state


def build_stock(model, args, task, output_bias: bool = False, bias_targets=()):
    """(stock model, its options): this package's ``model`` rebuilt as its family's stock twin, in evaluation mode.
    ``bias_targets``: [(target, its families)] of the targets that hold a per-word output bias, for the refusal.
    ``output_bias``: the target holds a per-word output bias where the twin has none (CTranslate2); the twin then
    gets a biased output projection (``torch.nn.Linear``), which the target's writer carries over."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    model.eval()
    family = family_of(model)
    tensors = seam_tensors(model, args)
    if family.checks is not None:
        family.checks(model, args, tensors)
    if tensors["bias"] is not None and not family.output_bias and not output_bias:
        raise _bias_refusal(family, args, bias_targets)
    options = stock_args(args, family, tensors, getattr(task, "cfg", None))
    stock_model = ARCH_MODEL_REGISTRY[family.stock].build_model(options, task)
    if tensors["bias"] is not None and not family.output_bias:
        weight = tensors["weight"]
        stock_model.decoder.output_projection = torch.nn.Linear(weight.size(1), weight.size(0), bias=True)
    stock_model.load_state_dict(stock_state(model, stock_model, family, tensors), strict=True)
    stock_model.eval()
    return stock_model, options


def max_difference(model, stock_model, task, sentences: int = 4, length: int = 7, seed: int = 0) -> float:
    """The largest difference of a log-probability between the two models, teacher-forced on random sentences
    of the dictionaries' words."""
    generator = torch.Generator().manual_seed(seed)
    src, tgt = task.source_dictionary, task.target_dictionary

    def words(dictionary):
        ids = torch.randint(dictionary.nspecial, len(dictionary), (sentences, length), generator=generator)
        return torch.cat([ids, ids.new_full((sentences, 1), dictionary.eos())], dim=1)

    source, target = words(src), words(tgt)
    prev = torch.cat([target[:, -1:], target[:, :-1]], dim=1)  # fairseq's shift: eos first
    lengths = torch.full((sentences,), length + 1, dtype=torch.long)
    with torch.no_grad():
        outputs = [m.get_normalized_probs(m(source, lengths, prev), log_probs=True) for m in (model, stock_model)]
    return float((outputs[0].double() - outputs[1].double()).abs().max())


# -- files ----------------------------------------------------------------------------------------------------
def _plain(value):
    """``value`` as types that torch's weights-only loader accepts: dicts, lists and scalars."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, (DictConfig, ListConfig)):
        return _plain(OmegaConf.to_container(value, resolve=True, enum_to_str=True))
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a task's config (TranslationConfig)
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # an enum of fairseq's choices: its value


def stock_checkpoint(state: dict, stock_model, options, namespace: bool = False) -> dict:
    """A fairseq checkpoint of ``stock_model``: the training's sections (those fairseq-generate reads), this
    package's options gone, as plain values (``namespace``: the options as an ``argparse.Namespace`` in ``args``,
    the legacy form that CTranslate2's converter reads)."""
    cfg = state.get("cfg") or {}
    sections = {}
    for name in ("common", "common_eval", "distributed_training", "dataset", "optimization", "checkpoint", "bmuf",
                 "generation", "eval_lm", "interactive", "task"):
        section = cfg.get(name) if hasattr(cfg, "get") else None
        sections[name] = None if section is None else _plain(section)
    if sections["common"] is not None:
        sections["common"]["user_dir"] = None
    if isinstance(sections["task"], dict):  # a legacy task section is the whole option set: keep its task keys
        sections["task"] = {k: v for k, v in sections["task"].items() if k in vars(options) or k == "_name"}
    sections["model"] = _plain(options)
    history = state.get("optimizer_history") or [{}]
    updates = int(history[-1].get("num_updates", 0) or 0)
    return {
        "args": argparse.Namespace(**vars(options)) if namespace else None,
        "cfg": None if namespace else sections,
        "model": stock_model.state_dict(),
        "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "optimizer_name": "none",
                               "lr_scheduler_state": {}, "num_updates": updates}],
        "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0}},
        "last_optimizer_state": None,
    }
