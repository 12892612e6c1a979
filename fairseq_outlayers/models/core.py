"""The model core shared by both architectures: building the two seams, and the model mixin.

A model class (Transformer or LSTM) calls, in its ``build_model``:

* ``start_build(args, task)``: the seams' checks (``models/seam_checks.py``), and a new run's;
* ``build_core_embeddings(args, task, encoder_dim, decoder_dim, share_all, make_embedding)``;
* ``build_core_output_layer(args, task, decoder_embed_tokens, input_dim)``;
* ``finish_build(model, args)``: a resumed run's fingerprints, and the parameter report;

and mixes in ``OutputLayerModelMixin`` so that ``get_normalized_probs`` (what ``fairseq-generate`` and the
criterions call) is answered by the output layer. The options are in ``models/seam_options.py``.
"""
import contextlib
import logging

from fairseq_outlayers import fairseq_compat, fingerprints
from fairseq_outlayers.errors import OutlayersConfigError

from .registry import get_embedding_spec, get_output_layer_spec
from .seam_checks import check_new_run, check_resume, check_seams

logger = logging.getLogger(__name__)


def start_build(args, task):
    """The seams' checks; for a new training run (not a model rebuilt from a checkpoint) its options too, before
    any data is read. Returns whether this is a new run (``finish_build`` needs it)."""
    new_run = not built_from_checkpoint(args)
    fairseq_compat.release_bf16_from_tpu(args, task)
    if new_run:
        check_new_run(args)
    check_seams(args, task)
    return new_run


def built_from_checkpoint(args) -> bool:
    """Whether ``args`` are the model arguments of a checkpoint, at the start of a build. Every build records the
    fingerprints of its dictionaries in them (``fingerprints.check_dictionaries``), and fairseq saves them with the
    model and hands them back to ``build_model`` when it loads it; a command line's arguments have none. fairseq
    0.12 gives ``from_checkpoint=True`` to ``task.build_model`` (``checkpoint_utils.load_model_ensemble_and_task``),
    but a legacy model's ``build_model`` never receives it."""
    return bool(fingerprints.recorded(args))


def finish_build(model, args, new_run):
    """The end of every model's ``build_model``: a new training run records the fingerprints of the files its
    options name and, when it resumes (or fine-tunes) from a checkpoint, is checked against the fingerprints that
    checkpoint recorded, before any data is read."""
    model.outlayers_args = args
    if new_run:
        check_resume(args)
    model.log_parameter_report()


def build_core_embeddings(args, task, encoder_dim, decoder_dim, share_all, make_embedding):
    """(encoder_embed, decoder_embed) from ``--embeddings``; ``make_embedding(dictionary, dim)`` is the
    architecture's own learned embedding (its initialisation), for the builders that need one."""
    spec = get_embedding_spec(args.embeddings)
    if spec.check_args is not None:
        spec.check_args(args, len(task.target_dictionary))
    with _as_config_error(f"--embeddings {spec.name}"):
        return spec.build(args, task, encoder_dim=encoder_dim, decoder_dim=decoder_dim, share_all=share_all,
                          make_embedding=make_embedding)


def build_core_output_layer(args, task, decoder_embed_tokens, input_dim):
    """The output layer from ``--output-layer``, reading ``input_dim`` decoder features."""
    spec = get_output_layer_spec(args.output_layer)
    if spec.check_args is not None:  # sizes against memory now that the vocabulary size is known
        spec.check_args(args, len(task.target_dictionary) if task is not None else None)
    with _as_config_error(f"--output-layer {spec.name}"):
        return spec.build(args, task, decoder_embed_tokens=decoder_embed_tokens, input_dim=input_dim)


def load_embedding_paths(args, task, encoder_embed, decoder_embed):
    """fairseq's ``--encoder-embed-path`` / ``--decoder-embed-path``: pretrained rows into the learned matrices
    (``decoder_embed`` None: shared with the encoder's; a frozen table without ``weight`` is left as it is)."""
    from fairseq import utils

    for path, embed, dictionary in ((getattr(args, "encoder_embed_path", None), encoder_embed,
                                     task.source_dictionary),
                                    (getattr(args, "decoder_embed_path", None), decoder_embed,
                                     task.target_dictionary)):
        if path and hasattr(embed, "weight"):
            utils.load_embedding(utils.parse_embedding(path), dictionary, embed)


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

    def load_state_dict(self, state_dict, *args, **kwargs):
        """fairseq's, after refusing NaN or infinite weights in one line naming the checkpoint and the tensor
        (``checkpoint_safety.check_finite_weights``): every entry point that loads the model through
        ``--user-dir``, stock ``fairseq-generate`` included, stops there rather than deep in the beam search."""
        from fairseq_outlayers.checkpoint_safety import check_finite_weights, loading_path

        check_finite_weights(loading_path(), state_dict)
        return super().load_state_dict(state_dict, *args, **kwargs)

    def log_parameter_report(self):
        from fairseq_outlayers.parameter_counts import format_parameter_report, parameter_report

        logger.info("parameters:\n" + format_parameter_report(parameter_report(self)))


def register_method_preset(model_name, arch_name, base, doc, defaults=None, **choices):
    """Register ``arch_name``: the architecture ``base`` (a name or function) with seam options fixed to
    ``choices`` (e.g. ``output_layer=NAME``), so a recipe is one ``--arch`` away. An explicit option that
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
