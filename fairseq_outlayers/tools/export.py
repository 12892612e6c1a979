"""``outlayers-export CHECKPOINT OUT --to fairseq|ctranslate2``: a trained model that runs without this package.

At inference most of the package's layers are a plain linear map once their weights are computed, and its
embeddings are plain tables. Each registered output layer and embedding declares how (``export`` in
``core/registry.py``), or why it cannot. The export rebuilds the model as a stock fairseq ``transformer`` or
``lstm`` holding those tensors, checks that both give the same log-probabilities on a batch, and writes:

* ``--to fairseq``: ``OUT/model.pt`` with its dictionaries (and ``bpecodes`` when the data has one). Stock
  ``fairseq-generate`` / ``fairseq-interactive`` load it with no ``--user-dir`` and torch's default weights-only
  loading: the file holds only tensors, dicts, lists and plain values.
* ``--to ctranslate2``: a CTranslate2 model directory made by CTranslate2's own fairseq converter (on a stock
  checkpoint written for it in a temporary directory), with ``--quantization`` passed on.

OUT is written in a temporary directory beside it and renamed into place when complete; an existing OUT is
refused unless ``--force``, and OUT may never be, or hold, an input.
"""
import argparse
import dataclasses
import logging
import os
import shutil
import tempfile
from typing import Dict, Optional

import torch

import fairseq_outlayers.models  # noqa: F401  (registers the plugin: fairseq skips a --user-dir already imported)
from fairseq_outlayers.core.checkpoint_safety import check_finite, read
from fairseq_outlayers.tools.checkpoints import load_trained
from fairseq_outlayers.errors import ExportRefused, OutlayersConfigError, one_line_errors
from fairseq_outlayers.models.lstm import OutlayersLSTMModel
from fairseq_outlayers.core.registry import get_embedding_spec, get_output_layer_spec
from fairseq_outlayers.models.transformer import OutlayersTransformerModel

logger = logging.getLogger("fairseq_outlayers.export")

TARGETS = ("fairseq", "ctranslate2")
#: CTranslate2's weight types (``ct2-fairseq-converter --quantization``)
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
#: the largest difference of a log-probability between the package's model and its stock rebuild that the export
#: accepts (float32 folding of a projection moves them by about 1e-6)
TOLERANCE = 1e-4
#: files of the data directory that a user needs beside the model to translate raw text
DATA_EXTRAS = ("bpecodes",)
#: the refusal of an entry whose registration declares no ``export`` (after the entry's option and name)
NOT_DECLARED = "declares no export (its registration has no export=...)"


# -- the stock model ------------------------------------------------------------------------------------------
def _family(model):
    """'transformer' or 'lstm': the stock fairseq model that holds this package's model of that architecture."""
    if isinstance(model, OutlayersTransformerModel):
        return "transformer"
    if isinstance(model, OutlayersLSTMModel):
        return "lstm"
    raise ExportRefused(f"the model is a {type(model).__name__}, not one of this package's Transformer or LSTM "
                        "models; export a checkpoint written by fairseq-train --user-dir fairseq_outlayers")


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


def _stock_keys(family: str, task_name: str):
    """Every option a stock fairseq-train run of ``family`` on ``task_name`` has (model, task, training)."""
    from fairseq import options

    parser = options.get_training_parser(default_task=task_name)
    return set(vars(options.parse_args_and_arch(parser, ["DATA", "--arch", family, "--task", task_name])))


def stock_args(args, family: str, tensors, task_cfg=None) -> argparse.Namespace:
    """The model's options as stock fairseq's ``family`` reads them: this package's options (and the values it
    records) left out, the tying done by the stock model where the tensors allow, the architecture's defaults
    filled in."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    # an argparse Namespace (fairseq-train) or a DictConfig (fairseq-hydra-train, whose model section has no task
    # options: those come from the task's own configuration)
    task_values = _plain(task_cfg) if task_cfg is not None else {}
    given = {**task_values, "task": task_values.get("_name"), **_plain(args)}
    keys = _stock_keys(family, given.get("task") or "translation")
    values = {k: v for k, v in given.items() if k in keys}
    values.update(arch=family, _name=family, user_dir=None)
    weight, target = tensors["weight"], tensors["target"]
    tied = weight.shape == target.shape and bool(torch.equal(weight, target))
    if family == "transformer":
        share_all = bool(getattr(args, "share_all_embeddings", False)) and tied \
            and bool(torch.equal(tensors["source"], target))
        values.update(share_all_embeddings=share_all, share_decoder_input_output_embed=tied,
                      adaptive_softmax_cutoff=None, decoder_output_dim=int(weight.size(1)))
    else:
        values.update(share_all_embeddings=False, share_decoder_input_output_embed=False,
                      adaptive_softmax_cutoff=None, decoder_attention="1")
    stock = argparse.Namespace(**values)
    ARCH_CONFIG_REGISTRY[family](stock)
    return stock


def _lstm_checks(model, args, tensors):
    """What stock fairseq's LSTM cannot hold: a deeper decoder than encoder, attention other than Luong's."""
    if args.encoder_layers != args.decoder_layers:
        raise ExportRefused(f"stock fairseq's LSTM needs --encoder-layers equal to --decoder-layers (this model: "
                            f"{args.encoder_layers} and {args.decoder_layers})")


def stock_state(model, stock_model, family: str, tensors) -> Dict[str, torch.Tensor]:
    """The stock model's state dict filled from this package's model: the seams' tensors, everything else by name
    (the rest of both architectures is fairseq's own code)."""
    source = model.state_dict()
    fills = {"encoder.embed_tokens.weight": tensors["source"], "decoder.embed_tokens.weight": tensors["target"]}
    if family == "transformer":
        if tensors["bias"] is not None:
            raise ExportRefused("stock fairseq's Transformer output projection has no bias, and this model's output "
                                "layer has a per-word one (--output-bias, or the layer's own)")
        fills["decoder.output_projection.weight"] = tensors["weight"]
    else:
        weight, bias = tensors["weight"], tensors["bias"]
        fills["decoder.fc_out.weight"] = weight
        fills["decoder.fc_out.bias"] = bias if bias is not None else weight.new_zeros(weight.size(0))
        attention = model.decoder.attention
        if attention.input_proj is None:  # dot score: stock fairseq always projects the query, here by the identity
            fills["decoder.attention.input_proj.weight"] = torch.eye(model.decoder.hidden_size)
    state = {}
    for key, value in stock_model.state_dict().items():
        given = fills.get(key, source.get(key))
        if given is None or given.shape != value.shape:
            found = "missing" if given is None else f"of shape {tuple(given.shape)}"
            raise ExportRefused(f"stock fairseq's {family} has the weight '{key}' of shape {tuple(value.shape)}, "
                                f"which this model holds {found}")
        state[key] = given.detach().to(value.dtype).clone().contiguous()
    return state


def build_stock(model, args, task):
    """(stock model, its options): this package's ``model`` rebuilt as stock fairseq, in evaluation mode."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    model.eval()
    family = _family(model)
    tensors = seam_tensors(model, args)
    if family == "lstm":
        _lstm_checks(model, args, tensors)
    options = stock_args(args, family, tensors, getattr(task, "cfg", None))
    stock_model = ARCH_MODEL_REGISTRY[family].build_model(options, task)
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
    updates = 0
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


def _write_dictionaries(task, options, directory: str):
    task.source_dictionary.save(os.path.join(directory, f"dict.{options.source_lang}.txt"))
    task.target_dictionary.save(os.path.join(directory, f"dict.{options.target_lang}.txt"))


def _languages(task, options):
    """The language pair the task inferred from the data (the options may leave it unset)."""
    cfg = getattr(task, "cfg", None)
    options.source_lang = getattr(cfg, "source_lang", None) or options.source_lang
    options.target_lang = getattr(cfg, "target_lang", None) or options.target_lang


def _copy_extras(data_dir: Optional[str], directory: str):
    for name in DATA_EXTRAS:
        path = os.path.join(data_dir or "", name)
        if data_dir and os.path.isfile(path):
            shutil.copyfile(path, os.path.join(directory, name))


def _write_fairseq(state, stock_model, options, task, data_dir, directory):
    torch.save(stock_checkpoint(state, stock_model, options), os.path.join(directory, "model.pt"))
    _write_dictionaries(task, options, directory)
    _copy_extras(data_dir, directory)


def _write_ctranslate2(state, stock_model, options, task, data_dir, directory, quantization):
    try:
        from ctranslate2.converters.fairseq import FairseqConverter
    except ImportError:
        raise OutlayersConfigError("--to ctranslate2 needs the ctranslate2 package: pip install "
                                   "'fairseq_outlayers[serve]' (or pip install ctranslate2)") from None
    with tempfile.TemporaryDirectory(prefix="outlayers-export-") as work:
        # a checkpoint of our own making, read back by CTranslate2's converter: its legacy Namespace is trusted
        checkpoint = os.path.join(work, "model.pt")
        torch.save(stock_checkpoint(state, stock_model, options, namespace=True), checkpoint)
        _write_dictionaries(task, options, work)
        converter = FairseqConverter(checkpoint, work, source_lang=options.source_lang,
                                     target_lang=options.target_lang, unsafe_deserialization=True)
        os.rmdir(directory)  # the converter makes the directory itself
        converter.convert(directory, quantization=quantization)
    _copy_extras(data_dir, directory)


def _check_out(out: str, checkpoint: str, data_dir: Optional[str], force: bool):
    """OUT is not an input, nor inside one, nor holds one; it exists only with --force; its parent is writable."""
    real = os.path.realpath(out)
    for given in (checkpoint, data_dir):
        if not given:
            continue
        inside = os.path.realpath(given)
        if real == inside or inside.startswith(real.rstrip(os.sep) + os.sep) \
                or (os.path.isdir(inside) and real.startswith(inside.rstrip(os.sep) + os.sep)):
            raise OutlayersConfigError(f"OUT '{out}' is, holds or lies inside an input of this export ('{given}'); "
                                       "choose another OUT (--force never replaces an input)")
    if os.path.lexists(out) and not force:
        raise OutlayersConfigError(f"OUT '{out}' exists; choose another path or pass --force to replace it")
    if os.path.lexists(out) and not os.path.isdir(out):
        raise OutlayersConfigError(f"OUT '{out}' exists and is not a directory; choose another path")
    parent = os.path.dirname(os.path.abspath(out))
    existing = parent
    while not os.path.isdir(existing):  # missing directories above OUT are made when it is written
        if os.path.lexists(existing):
            raise OutlayersConfigError(f"OUT '{out}': '{existing}' is not a directory; choose another path")
        existing = os.path.dirname(existing)
    if not os.access(existing, os.W_OK):
        raise OutlayersConfigError(f"OUT '{out}': cannot write in '{existing}'; choose a writable directory")


def _replace(tmp: str, out: str):
    """Move the finished ``tmp`` to ``out``, an existing ``out`` removed only once the new one is in place."""
    old = None
    if os.path.lexists(out):
        old = tempfile.mkdtemp(prefix=".outlayers-old-", dir=os.path.dirname(os.path.abspath(out)))
        os.rmdir(old)
        os.rename(out, old)
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def load(checkpoint: str, data_dir: Optional[str] = None):
    """(model, model options, task, checkpoint state) through the package's safe loader."""
    state = read(checkpoint)
    check_finite(checkpoint, state)
    model, _cfg, task = load_trained(checkpoint, data_dir)
    return model, model.outlayers_args, task, state


def export(checkpoint: str, out: str, to: str, data_dir: Optional[str] = None, quantization: Optional[str] = None,
           force: bool = False) -> str:
    """Write ``checkpoint`` as a stock model to ``out``; returns a one-line report."""
    if to not in TARGETS:
        raise OutlayersConfigError(f"--to '{to}' is unknown; choose one of: {', '.join(TARGETS)}")
    if quantization is not None and to != "ctranslate2":
        raise OutlayersConfigError("--quantization is CTranslate2's; it needs --to ctranslate2")
    _check_out(out, checkpoint, data_dir, force)
    if not os.path.isfile(checkpoint):
        raise OutlayersConfigError(f"checkpoint '{checkpoint}' does not exist or is not a file")
    model, args, task, state = load(checkpoint, data_dir)
    family = _family(model)
    if to == "ctranslate2" and family != "transformer":
        raise ExportRefused(f"--to ctranslate2: CTranslate2 converts fairseq Transformers only, not the {family}; "
                            "use --to fairseq")
    stock_model, options = build_stock(model, args, task)
    _languages(task, options)
    difference = max_difference(model, stock_model, task)
    if not difference <= TOLERANCE:
        raise ExportRefused(f"the stock {family} gives log-probabilities up to {difference:.3g} away from this "
                            f"model's (more than {TOLERANCE:g}); nothing was written")
    data = getattr(task.cfg, "data", None) if hasattr(task, "cfg") else None
    data = data_dir or (str(data).split(os.pathsep)[0] if data else None)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".outlayers-export-", dir=os.path.dirname(os.path.abspath(out)))
    try:
        if to == "fairseq":
            _write_fairseq(state, stock_model, options, task, data, tmp)
        else:
            _write_ctranslate2(state, stock_model, options, task, data, tmp, quantization)
        _replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    what = "CTranslate2 model" + (f" ({quantization})" if quantization else "") if to == "ctranslate2" \
        else "stock fairseq checkpoint (model.pt)"
    kind = "an LSTM" if family == "lstm" else "a Transformer"
    return (f"wrote {out}: a {what} of {kind} with --output-layer {args.output_layer}, --embeddings "
            f"{args.embeddings}; largest log-probability difference to the package's model {difference:.2g}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="outlayers-export",
        description="Write a checkpoint of this package as a model that stock fairseq (no --user-dir) or CTranslate2 "
        "translates with, after checking that both give the same log-probabilities.")
    p.add_argument("checkpoint", help="a checkpoint written by fairseq-train --user-dir fairseq_outlayers")
    p.add_argument("out", help="the directory to write (refused if it exists, unless --force)")
    p.add_argument("--to", required=True, choices=TARGETS,
                   help="fairseq: OUT/model.pt and its dictionaries for stock fairseq-generate/-interactive; "
                   "ctranslate2: a CTranslate2 model directory (needs pip install ctranslate2)")
    p.add_argument("--quantization", choices=QUANTIZATIONS,
                   help="--to ctranslate2: the weight type CTranslate2 stores (default: float32, as trained)")
    p.add_argument("--data", metavar="DIR", help="the data directory with the dictionaries, if it moved since "
                   "training")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists (never an input)")
    return p


@one_line_errors
def main(argv=None):
    logging.basicConfig(format="%(message)s", level=logging.WARNING)
    args = parser().parse_args(argv)
    print(export(args.checkpoint, args.out, args.to, args.data, args.quantization, args.force))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
