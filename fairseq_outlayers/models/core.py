"""The model core shared by every architecture: options for the two seams, their checks, and their wiring.

A model class (Transformer or LSTM) calls, in its ``build_model``:

* ``check_core_args(args, task)`` -- fails early, in one line, on a bad combination;
* ``build_core_embeddings(...)`` -- source/target input embeddings from ``--embeddings``;
* ``build_core_output_layer(...)`` -- the decoder's output layer from ``--output-layer``;

and mixes in ``OutputLayerModelMixin`` so that ``get_normalized_probs`` (what ``fairseq-generate`` and the
criterions call) is answered by the output layer.
"""
import argparse
import contextlib
import logging
import os

from fairseq_outlayers import checks, fingerprints, model_args
from fairseq_outlayers.data_checks import check_binarised_data
from fairseq_outlayers.errors import OutlayersConfigError

from .registry import EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY, get_embedding_spec, get_output_layer_spec

logger = logging.getLogger(__name__)


def add_core_args(parser):
    """Options of the two seams, plus every registered method's own options."""
    parser.add_argument(
        "--output-layer", metavar="NAME", choices=sorted(OUTPUT_LAYER_REGISTRY),
        help="output layer turning decoder features into scores: "
        + "; ".join(f"{s.name}: {s.help}" for s in OUTPUT_LAYER_REGISTRY.values())
        + " (default: softmax)",
    )
    parser.add_argument(
        "--embeddings", metavar="NAME", choices=sorted(EMBEDDING_REGISTRY),
        help="how input embeddings are built: "
        + "; ".join(f"{s.name}: {s.help}" for s in EMBEDDING_REGISTRY.values())
        + " (default: standard)",
    )
    parser.add_argument("--output-bias", action="store_true",
                        help="learn a per-word bias in softmax/tied output layers (fairseq's default has none)")
    parser.add_argument("--outlayers-allow-mismatch", action="store_true",
                        help="resume or decode although a dictionary, --target-vectors or --pairing file differs "
                        "from the checkpoint's (a warning instead of an error; the checkpoint's tables are kept)")
    # where these arguments come from (None: this command line; see _fresh); not an option for users
    parser.add_argument("--" + STATE.replace("_", "-"), default=None, help=argparse.SUPPRESS)
    for spec in list(OUTPUT_LAYER_REGISTRY.values()) + list(EMBEDDING_REGISTRY.values()):
        if spec.add_args is not None:
            spec.add_args(parser)


#: None in arguments parsed from a training command line, "pending" once checked, "done" once the model is built
#: (saved with the checkpoint, so a model rebuilt from it is not taken for a new training run)
STATE = "outlayers_args_state"


def _fresh(args) -> bool:
    """True for the arguments of a new training command (fairseq-train's command line, or fairseq-hydra-train's
    configuration), False for a model rebuilt from a checkpoint (old checkpoints have no state at all)."""
    if isinstance(args, argparse.Namespace):
        return hasattr(args, STATE) and getattr(args, STATE) is None
    if getattr(args, STATE, None) not in (None, "pending"):  # "pending": a checked command line made a config
        return False
    try:
        from hydra.core.hydra_config import HydraConfig
    except ImportError:  # pragma: no cover
        return False
    return HydraConfig.initialized()  # fairseq-hydra-train (a checkpoint's configuration is not loaded by hydra)


def core_defaults(args):
    """Fill the seams' options that the user did not set (called from every named architecture)."""
    fresh = _fresh(args)
    given = _given_options(args, raw=isinstance(args, argparse.Namespace)) if fresh else None
    args.output_layer = getattr(args, "output_layer", None) or "softmax"
    args.embeddings = getattr(args, "embeddings", None) or "standard"
    args.output_bias = getattr(args, "output_bias", False) or False
    model_args.record(args, **{fingerprints.ALLOW: bool(getattr(args, fingerprints.ALLOW, False))})
    selected = (args.output_layer, args.embeddings)  # before a method's defaults switch the embeddings
    for spec in list(OUTPUT_LAYER_REGISTRY.values()) + list(EMBEDDING_REGISTRY.values()):
        apply_defaults(spec, args)
    if fresh:  # a new training run: options and criterion are checked once, before any data is read
        check_unused_options(args, given, *selected)
        check_option_values(args)
        check_criterion(args)
        model_args.record(args, **{STATE: "pending"})


def apply_defaults(spec, args):
    """A seam's declared ``defaults`` for the options left unset (missing or None), then its derived options."""
    for dest, value in spec.defaults.items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, value)
    if spec.set_defaults is not None:
        spec.set_defaults(args)


def _spec_options(spec):
    """{dest: (flag, default)} of the options a seam registers."""
    if spec.add_args is None:
        return {}
    parser = argparse.ArgumentParser(add_help=False)
    spec.add_args(parser)
    defaults = argparse.Namespace(output_layer=spec.name, embeddings="standard")
    apply_defaults(spec, defaults)
    return {a.dest: (a.option_strings[0], getattr(defaults, a.dest, None)) for a in parser._actions
            if a.option_strings}


def _given_options(args, raw: bool):
    """[(dest, value)] of every seam option set in ``args``: on a fresh command line (``raw``) any value but
    None/False was given by the user; in a hydra configuration, any value other than the registered default."""
    out = []
    for spec in list(OUTPUT_LAYER_REGISTRY.values()) + list(EMBEDDING_REGISTRY.values()):
        for dest, (_flag, default) in _spec_options(spec).items():
            value = getattr(args, dest, None)
            if value is not None and value is not False and (raw or value != default):
                out.append((dest, value))
    if getattr(args, "output_bias", False):
        out.append(("output_bias", True))
    return out


def check_unused_options(args, given, output_layer, embeddings):
    """An option of a seam that is not selected would be ignored: say so instead (one line)."""
    out_spec, emb_spec = get_output_layer_spec(output_layer), get_embedding_spec(embeddings)
    used = set(_spec_options(out_spec)) | set(_spec_options(emb_spec))
    if emb_spec.options_from:
        used |= set(_spec_options(get_output_layer_spec(emb_spec.options_from)))
    owners = {}
    for kind, registry in (("--output-layer", OUTPUT_LAYER_REGISTRY), ("--embeddings", EMBEDDING_REGISTRY)):
        for spec in registry.values():
            for dest, (flag, _default) in _spec_options(spec).items():
                owners.setdefault(dest, (flag, kind, spec.name))
    for dest, _value in given:
        if dest == "output_bias":
            if not out_spec.output_bias:
                accepting = ", ".join(s.name for s in OUTPUT_LAYER_REGISTRY.values() if s.output_bias)
                raise OutlayersConfigError(f"--output-bias is an option of --output-layer {accepting}; "
                                           f"--output-layer {out_spec.name} would ignore it: drop it")
            continue
        if dest in used or dest not in owners:
            continue
        flag, kind, owner = owners[dest]
        selected = out_spec.name if kind == "--output-layer" else emb_spec.name
        raise OutlayersConfigError(f"{flag} needs {kind} {owner}; {kind} {selected} would ignore it: drop {flag}, "
                                   f"or select {kind} {owner}")


def _selected_specs(args):
    out_spec, emb_spec = get_output_layer_spec(args.output_layer), get_embedding_spec(args.embeddings)
    specs = [out_spec, emb_spec]
    if emb_spec.options_from and emb_spec.options_from != out_spec.name:
        specs.append(get_output_layer_spec(emb_spec.options_from))
    return specs


def check_option_values(args):
    """Every option of the selected seams within its declared range (``ranges``: finite, in bounds) and the
    seams' checks across options (``check_args``: sizes that must fit in memory); one line naming the option, the
    value, the allowed range and the fix."""
    for spec in _selected_specs(args):
        flags = {dest: flag for dest, (flag, _default) in _spec_options(spec).items()}
        checks.check_values(spec.ranges, {dest: getattr(args, dest, None) for dest in spec.ranges}, spec.defaults,
                            flags)
        if spec.check_args is not None:
            spec.check_args(args, None)


def decoder_output_dim(args) -> int:
    """The size of the decoder features the output layer reads (Transformer or LSTM), from the options."""
    for name in ("decoder_output_dim", "decoder_out_embed_dim", "decoder_embed_dim"):
        value = getattr(args, name, None)
        if value:
            return int(value)
    return 512


def _root_option(args, section, name, default=None):
    """A training option outside the model's arguments: from the legacy Namespace (which holds every option), or
    from the root of a hydra configuration (``section.name``)."""
    if isinstance(args, argparse.Namespace):
        return getattr(args, name, default)
    try:
        value = args._get_root()[section][name]
    except Exception:
        return default
    return default if value is None else value


def _continuous_criterions():
    from fairseq.criterions import CRITERION_REGISTRY

    from fairseq_outlayers.criterions.continuous_losses import ContinuousLossCriterion

    return sorted(n for n, c in CRITERION_REGISTRY.items() if isinstance(c, type) and
                  issubclass(c, ContinuousLossCriterion))


def check_criterion(args, criterion=None):
    """The criterion must suit the output layer: continuous outputs train only with the continuous losses, every
    other layer never does. ``criterion``: its registered name (default: the training options'). Called when the
    options are parsed, before anything is built; the criterions may call it too."""
    if criterion is None:
        criterion = (getattr(args, "criterion", None) if isinstance(args, argparse.Namespace)
                     else _root_option(args, "criterion", "_name"))
    if not criterion or not isinstance(criterion, str):
        return
    spec = get_output_layer_spec(getattr(args, "output_layer", None) or "softmax")
    continuous = _continuous_criterions()
    if spec.criterion_family == "continuous" and criterion not in continuous:
        raise OutlayersConfigError(
            f"--criterion {criterion} scores a softmax over the vocabulary, but --output-layer {spec.name} predicts "
            f"a word vector; use --criterion {', '.join(continuous)}")
    if spec.criterion_family != "continuous" and criterion in continuous:
        needing = ", ".join(s.name for s in OUTPUT_LAYER_REGISTRY.values() if s.criterion_family == "continuous")
        raise OutlayersConfigError(
            f"--criterion {criterion} needs --output-layer {needing} (a predicted word vector), but --output-layer "
            f"{spec.name} gives a softmax; use --criterion cross_entropy, label_smoothed_cross_entropy, "
            f"fused_cross_entropy or sampled_softmax, or --output-layer {needing}")
    from fairseq.criterions import CRITERION_REGISTRY

    cls = CRITERION_REGISTRY.get(criterion)
    ranges = getattr(cls, "option_ranges", None)
    if ranges:  # the package's criterions: their options within range, before any data is read
        checks.check_values(ranges, {name: _root_option(args, "criterion", name) for name in ranges},
                            cls.option_defaults())
    if criterion == "vmf_nll":  # a loss that cannot train is refused before any data is read
        from fairseq_outlayers.criterions.continuous_losses import VMFNLLConfig, check_vmf_options

        defaults = VMFNLLConfig()
        check_vmf_options(*(_root_option(args, "criterion", name, getattr(defaults, name)) for name in
                             ("vmf_variant", "vmf_lambda1", "vmf_lambda2", "vmf_released_lambda")))


def _restore_path(args):
    """The checkpoint fairseq-train will load (the rule of fairseq's checkpoint_utils.load_checkpoint), or None."""
    save_dir = _root_option(args, "checkpoint", "save_dir", "checkpoints")
    restore = _root_option(args, "checkpoint", "restore_file", "checkpoint_last.pt")
    suffix = _root_option(args, "checkpoint", "checkpoint_suffix", "") or ""
    if restore == "checkpoint_last.pt":
        path = os.path.join(save_dir, f"checkpoint_last{suffix}.pt")
        if not os.path.exists(path):
            path = _root_option(args, "checkpoint", "continue_once") or _root_option(
                args, "checkpoint", "finetune_from_model")
    else:
        path = restore.replace(".pt", suffix + ".pt")
    return path if path and os.path.isfile(path) else None


def _checkpoint_model_args(path):
    """The model arguments saved in a checkpoint (tensors are memory-mapped, not read), or None."""
    import torch

    state = None
    for kwargs in ({"mmap": True}, {}):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, **kwargs)
            break
        except Exception:
            continue
    if not isinstance(state, dict):
        return None  # unreadable: fairseq reports it when it loads the file
    cfg = state.get("cfg")
    model = cfg.get("model") if isinstance(cfg, dict) else getattr(cfg, "model", None)
    model = model if model is not None else state.get("args")
    return argparse.Namespace(**model) if isinstance(model, dict) else model


def check_training_precision(args):
    """fairseq 0.12's command line reads ``--bf16`` (and ``--memory-efficient-bf16``) as TPU training: its
    options.py sets ``--tpu`` for them, and the Trainer then asks torch_xla for the device. Without torch_xla that
    ends in ``'NoneType' object has no attribute 'xla_device'`` after the model is built; say what to do first."""
    import importlib.util

    if _root_option(args, "common", "tpu", False) and importlib.util.find_spec("torch_xla") is None:
        # fairseq-train and outlayers-train unset the implied --tpu (fairseq_outlayers.precision); this is reached
        # for an explicit --tpu, or where the run's configuration cannot be reached from the model's build
        given = "--bf16 / --memory-efficient-bf16" if _root_option(args, "common", "bf16", False) else "--tpu"
        raise OutlayersConfigError(
            f"{given} makes fairseq 0.12 train on a TPU (its command line sets --tpu for bf16), and torch_xla is not "
            "installed; for bf16 on a GPU run outlayers-train without --tpu, or use --fp16, --memory-efficient-fp16 "
            "or --amp")


#: the core's own options that fix a parameter's shape
CORE_SHAPE_OPTIONS = (("output_layer", "--output-layer"), ("embeddings", "--embeddings"),
                      ("output_bias", "--output-bias"))


def resume_options(args):
    """([(dest, flag, effective)] that fix a parameter's shape, [...] that build a frozen table) of the selected
    seams, for ``fingerprints.check_resume_options``; ``effective(args)`` gives the value that matters (or None:
    the option's value)."""
    shape, table = [(dest, flag, None) for dest, flag in CORE_SHAPE_OPTIONS], []
    for spec in _selected_specs(args):
        flags = {dest: flag for dest, (flag, _default) in _spec_options(spec).items()}
        shape += [(dest, flags[dest], f) for dest, f in spec.shape_options.items()]
        table += [(dest, flags[dest], f) for dest, f in spec.table_options.items()]
    return shape, table


def finish_build(model, args):
    """The end of every model's ``build_model``: a new training run that resumes (or fine-tunes) from a
    checkpoint is checked against the fingerprints that checkpoint recorded, before any data is read."""
    model.outlayers_args = args
    if getattr(args, STATE, None) == "pending":
        check_training_precision(args)
        path = _restore_path(args)
        checkpoint_args = _checkpoint_model_args(path) if path else None
        if checkpoint_args is not None:
            shape, table = resume_options(args)
            fingerprints.check_resume_options(args, path, checkpoint_args, shape, table)
            fingerprints.check_resume(args, path, checkpoint_args)
        model_args.record(args, **{STATE: "done"})
    model.log_parameter_report()


def check_core_args(args, task):
    """Validate the seam options against the task's dictionaries; returns (embedding spec, output-layer spec)."""
    from fairseq_outlayers.precision import release_bf16_from_tpu

    release_bf16_from_tpu(args, task)  # fairseq 0.12 reads --bf16 as TPU training
    try:
        out_spec = get_output_layer_spec(args.output_layer)
        emb_spec = get_embedding_spec(args.embeddings)
    except ValueError as e:
        raise OutlayersConfigError(str(e)) from None
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    if out_spec.requires_joined_dictionary and src_dict != tgt_dict:
        raise OutlayersConfigError(
            f"--output-layer {out_spec.name} shares one matrix between source, target and output, which needs a "
            f"joined dictionary, but the source ({len(src_dict)} types) and target ({len(tgt_dict)} types) "
            "dictionaries differ; re-run fairseq-preprocess with --joined-dictionary, or use --output-layer tied"
        )
    if out_spec.refuses_tying:  # before the model's build turns fairseq's tying flags into the output layer's
        for flag in ("share_decoder_input_output_embed", "share_all_embeddings"):
            if getattr(args, flag, False):
                raise OutlayersConfigError(
                    f"--output-layer {out_spec.name} {out_spec.refuses_tying}, which contradicts "
                    f"--{flag.replace('_', '-')} (it ties the output matrix to the learned decoder embedding); drop "
                    "that option, or use --output-layer tied / tied-all for tying")
    check_binarised_data(task)
    fingerprints.check_dictionaries(args, task)
    if getattr(args, "adaptive_softmax_cutoff", None):
        raise OutlayersConfigError(
            "--adaptive-softmax-cutoff replaces the output layer; it cannot be combined with --output-layer "
            f"{out_spec.name} (drop one of them)"
        )
    return emb_spec, out_spec


def build_core_embeddings(args, task, encoder_dim, decoder_dim, share_all, make_embedding):
    """(encoder_embed, decoder_embed) from ``--embeddings``; ``make_embedding(dictionary, dim)`` is the
    architecture's own initialiser, used by the standard builder."""
    spec = get_embedding_spec(args.embeddings)
    if spec.check_args is not None:
        spec.check_args(args, len(task.target_dictionary))
    with _as_config_error(f"--embeddings {spec.name}"):
        return spec.build(args, task, encoder_dim, decoder_dim, share_all, make_embedding)


def build_core_output_layer(args, task, decoder_embed_tokens, input_dim):
    spec = get_output_layer_spec(args.output_layer)
    if spec.check_args is not None:  # sizes against memory now that the vocabulary size is known
        spec.check_args(args, len(task.target_dictionary) if task is not None else None)
    with _as_config_error(f"--output-layer {spec.name}"):
        return spec.build(args, task, decoder_embed_tokens, input_dim)


@contextlib.contextmanager
def _as_config_error(what):
    """Modules raise ValueError on inconsistent sizes/options; at build time that is the user's configuration."""
    try:
        yield
    except OutlayersConfigError:
        raise
    except ValueError as e:
        raise OutlayersConfigError(f"{what}: {e}") from e


def shares_all_embeddings(args) -> bool:
    return bool(getattr(args, "share_all_embeddings", False)) or get_output_layer_spec(
        args.output_layer
    ).shares_all_embeddings


class OutputLayerModelMixin:
    """Routes ``get_normalized_probs`` to the decoder's output layer (``decoder.output_projection``)."""

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return self.decoder.output_projection.get_normalized_probs(net_output, log_probs)

    def log_parameter_report(self):
        from fairseq_outlayers.params import format_parameter_report, parameter_report

        logger.info("parameters:\n" + format_parameter_report(parameter_report(self)))


def register_method_preset(model_name, arch_name, base, doc, defaults=None, **choices):
    """Register ``arch_name``: the architecture ``base`` (a name or function) with seam options fixed to
    ``choices`` (e.g. ``output_layer="joint"``), so a recipe is one ``--arch`` away. An explicit option that
    contradicts ``choices`` is an error, not silently overridden; ``defaults`` only fill options left unset."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, register_model_architecture

    @register_model_architecture(model_name, arch_name)
    def arch(args):
        for key, value in choices.items():
            given = getattr(args, key, None)
            if given not in (None, value):
                flag = "--" + key.replace("_", "-")
                raise OutlayersConfigError(
                    f"--arch {arch_name} is a preset of {flag} {value} but {flag} {given} was given; drop {flag} "
                    "or use the architecture without the method suffix"
                )
            setattr(args, key, value)
        for key, value in (defaults or {}).items():
            if getattr(args, key, None) is None:
                setattr(args, key, value)
        (ARCH_CONFIG_REGISTRY[base] if isinstance(base, str) else base)(args)

    arch.__doc__ = doc
    return arch
