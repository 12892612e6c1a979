"""The model core shared by every architecture: options for the two seams, their checks, and their wiring.

A model class (Transformer or LSTM) calls, in its ``build_model``:

* ``check_core_args(args, task)`` -- fails early, in one line, on a bad combination;
* ``build_core_embeddings(...)`` -- source/target input embeddings from ``--embeddings``;
* ``build_core_output_layer(...)`` -- the decoder's output layer from ``--output-layer``;

and mixes in ``OutputLayerModelMixin`` so that ``get_normalized_probs`` (what ``fairseq-generate`` and the
criterions call) is answered by the output layer.
"""
import contextlib
import logging

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
    for spec in list(OUTPUT_LAYER_REGISTRY.values()) + list(EMBEDDING_REGISTRY.values()):
        if spec.add_args is not None:
            spec.add_args(parser)


def core_defaults(args):
    """Fill the seams' options that the user did not set (called from every named architecture)."""
    args.output_layer = getattr(args, "output_layer", None) or "softmax"
    args.embeddings = getattr(args, "embeddings", None) or "standard"
    args.output_bias = getattr(args, "output_bias", False) or False
    for spec in list(OUTPUT_LAYER_REGISTRY.values()) + list(EMBEDDING_REGISTRY.values()):
        if spec.set_defaults is not None:
            spec.set_defaults(args)


def check_core_args(args, task):
    """Validate the seam options against the task's dictionaries; returns (embedding spec, output-layer spec)."""
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
    check_binarised_data(task)
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
    with _as_config_error(f"--embeddings {spec.name}"):
        return spec.build(args, task, encoder_dim, decoder_dim, share_all, make_embedding)


def build_core_output_layer(args, task, decoder_embed_tokens, input_dim):
    spec = get_output_layer_spec(args.output_layer)
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

    @property
    def output_layer_module(self):
        return self.decoder.output_projection

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
