"""The model core shared by both architectures: building the two seams, and the model mixin.

A model class (Transformer or LSTM) calls, in its ``build_model``:

* ``start_build(args, task)``: the seams' checks (below), and a new run's;
* ``build_core_embeddings(args, task, encoder_dim, decoder_dim, share_all, make_embedding)``;
* ``build_core_output_layer(args, task, decoder_embed_tokens, input_dim)``;
* ``finish_build(model, args)``: a resumed run's fingerprints, and the parameter report;

and mixes in ``OutputLayerModelMixin`` so that ``get_normalized_probs`` (what ``fairseq-generate`` and the
criterions call) is answered by the output layer. The options are in ``core/registry.py``.

The seams' checks are here too. ``check_seams`` runs for every build: the specs against the task's dictionaries and
data, and fairseq's options that contradict a layer. ``check_new_run`` runs for a new training run only, not for a
model rebuilt from a checkpoint: options of a seam that is not selected, option ranges, the criterion, the
precision, and the checkpoint a resume will load. Both raise a one-line ``OutlayersConfigError`` that names the
option and the fix.

``check_binarised_data`` (run by ``check_seams``) compares the binarised data with the dictionaries fairseq loaded
beside it. A replaced ``dict.en.txt`` (another preprocessing run, a copied file) makes fairseq train on ids that
mean other words or, past the end of the dictionary, fail deep inside torch with an index error. It reads the
largest token id of each split (a memory-mapped max, no copy) and compares it with the dictionary size.
"""
import argparse
import contextlib
import glob
import logging
import os

import numpy as np

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.value_checks import check_values

from . import fairseq_compat, fingerprints
from .registry import (EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY, criterion_trains, declared_criterions, file_options,
                       get_embedding_spec, get_output_layer_spec, given_options, layers_trained_by, resume_options,
                       selected_specs, spec_options)

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
        check_checkpoint_match(args)
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
        from fairseq_outlayers.core.checkpoint_safety import check_finite_weights, loading_path, non_finite

        if non_finite(state_dict):  # the checkpoint's name is looked up only to be said
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

def _max_token_id(bin_path):
    idx_path = bin_path[: -len(".bin")] + ".idx"
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    if not MMapIndexedDataset.exists(bin_path[: -len(".bin")]):
        return None
    index = MMapIndexedDataset.Index(idx_path)
    data = np.memmap(bin_path, dtype=index.dtype, mode="r")
    return int(data.max()) if data.size else None


def check_binarised_data(task):
    """Raise OutlayersConfigError if a split of the task's data holds a token id the dictionary lacks."""
    data = getattr(getattr(task, "cfg", None), "data", None) or getattr(getattr(task, "args", None), "data", None)
    src, tgt = getattr(task.cfg, "source_lang", None), getattr(task.cfg, "target_lang", None)
    if not data or not src or not tgt:
        return
    for path in str(data).split(os.pathsep):
        for lang, dictionary in ((src, task.source_dictionary), (tgt, task.target_dictionary)):
            for bin_path in sorted(glob.glob(os.path.join(path, f"*.{src}-{tgt}.{lang}.bin"))):
                try:
                    largest = _max_token_id(bin_path)
                except (OSError, ValueError):
                    continue  # not a fairseq mmap dataset: leave it to fairseq
                if largest is not None and largest >= len(dictionary):
                    raise OutlayersConfigError(
                        f"{bin_path} holds token id {largest} but {os.path.join(path, f'dict.{lang}.txt')} has only "
                        f"{len(dictionary)} entries: that dictionary does not belong to this binarised data; "
                        "restore the dictionary written by fairseq-preprocess or re-run fairseq-preprocess"
                    )


def layer_names(test) -> str:
    """The registered output layers whose spec passes ``test``, for a message: "a / b"."""
    return " / ".join(sorted(name for name, spec in OUTPUT_LAYER_REGISTRY.items() if test(spec)))


def _plain_tying(spec) -> bool:
    """fairseq's decoder tying as an output layer: the decoder embedding is the output matrix."""
    return spec.ties_decoder_embedding and spec.embedding_sized_input


def check_seams(args, task):
    """The selected specs against the task's dictionaries and fairseq's own options."""
    try:
        out_spec = get_output_layer_spec(args.output_layer)
        emb_spec = get_embedding_spec(args.embeddings)
    except ValueError as e:
        raise OutlayersConfigError(str(e)) from None
    if out_spec.ties_decoder_embedding and emb_spec.no_word_matrix:
        raise OutlayersConfigError(
            f"--output-layer {out_spec.name} ties its word rows to the decoder input embedding, but --embeddings "
            f"{emb_spec.name} {emb_spec.no_word_matrix}; use --output-layer "
            f"{layer_names(lambda s: not s.ties_decoder_embedding)} "
            "with them, or another --embeddings")
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    if out_spec.requires_joined_dictionary and src_dict != tgt_dict:
        raise OutlayersConfigError(
            f"--output-layer {out_spec.name} shares one matrix between source, target and output, which needs a "
            f"joined dictionary, but the source ({len(src_dict)} types) and target ({len(tgt_dict)} types) "
            "dictionaries differ; re-run fairseq-preprocess with --joined-dictionary, or use --output-layer "
            f"{layer_names(lambda s: _plain_tying(s) and not s.requires_joined_dictionary)}"
        )
    if out_spec.refuses_tying:  # before the model's build turns fairseq's tying flags into the output layer's
        for flag in ("share_decoder_input_output_embed", "share_all_embeddings"):
            if getattr(args, flag, False):
                raise OutlayersConfigError(
                    f"--output-layer {out_spec.name} {out_spec.refuses_tying}, which contradicts "
                    f"--{flag.replace('_', '-')} (it ties the output matrix to the learned decoder embedding); drop "
                    f"that option, or use --output-layer {layer_names(_plain_tying)} for tying")
    elif getattr(args, "share_decoder_input_output_embed", False) and not out_spec.ties_decoder_embedding:
        raise OutlayersConfigError(
            f"--share-decoder-input-output-embed asks for tying but --output-layer is '{out_spec.name}' (untied); "
            f"use --output-layer {layer_names(lambda s: _plain_tying(s) and not s.requires_joined_dictionary)} "
            "instead")
    if getattr(args, "merge_src_tgt_embed", False):
        raise OutlayersConfigError("--merge-src-tgt-embed is not supported by outlayers_transformer; binarise with "
                                   "fairseq-preprocess --joined-dictionary and use --output-layer "
                                   f"{layer_names(lambda s: s.shares_all_embeddings)}")
    check_binarised_data(task)
    fingerprints.check_dictionaries(args, task)
    if getattr(args, "adaptive_softmax_cutoff", None):
        raise OutlayersConfigError(
            "--adaptive-softmax-cutoff replaces the output layer; it cannot be combined with --output-layer "
            f"{out_spec.name} (drop one of them)"
        )


def check_new_run(args):
    """The options of a new training run, before any data is read (not for a model rebuilt from a checkpoint)."""
    check_unused_options(args)
    check_option_values(args)
    check_criterion(args)
    fairseq_compat.check_training_precision(args)
    check_files(args)


def check_files(args):
    """Every file that an option of the selected seams names (``Option.file``) exists."""
    for dest, option in file_options(selected_specs(args)).items():
        path = getattr(args, dest, None)
        if path and not os.path.isfile(path):
            raise OutlayersConfigError(f"{option.flag} {path}: no such file")


def check_checkpoint_match(args):
    """A new run: the fingerprints of the files its options name (``Option.file``); then, when it resumes (or
    fine-tunes) from a checkpoint, its options and fingerprints against those the checkpoint recorded."""
    files = file_options(selected_specs(args))
    for dest in files:
        if getattr(args, dest, None):
            fingerprints.note_file(args, dest, getattr(args, dest))
    path = fairseq_compat.restore_path(args)
    checkpoint_args = fairseq_compat.checkpoint_model_args(path) if path else None
    if checkpoint_args is not None:
        shape, table = resume_options(args)
        fingerprints.check_option_resume(args, path, checkpoint_args, shape, table)
        fingerprints.check_file_resume(args, path, checkpoint_args,
                                  {dest: (o.flag, o.file) for dest, o in files.items()})


def check_unused_options(args):
    """An option of a seam that is not selected would be ignored: say so instead (one line)."""
    out_spec, emb_spec = get_output_layer_spec(args.output_layer), get_embedding_spec(args.embeddings)
    used = set(spec_options(out_spec)) | set(spec_options(emb_spec))
    if emb_spec.options_from:  # the options the embeddings read, not those that select them
        source = get_output_layer_spec(emb_spec.options_from)
        used |= set(spec_options(source)) - (set(source.selects) if source is not out_spec else set())
    owners = {}
    for kind, registry in (("--output-layer", OUTPUT_LAYER_REGISTRY), ("--embeddings", EMBEDDING_REGISTRY)):
        for spec in registry.values():
            for dest, (flag, _default) in spec_options(spec).items():
                owners.setdefault(dest, (flag, kind, spec.name))
    for dest, _value in given_options(args):
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


def check_option_values(args):
    """Every option of the selected seams within its declared range (``ranges``: finite, in bounds) and the
    seams' checks across options (``check_args``: sizes that must fit in memory); one line naming the option, the
    value, the allowed range and the fix."""
    for spec in selected_specs(args):
        flags = {dest: flag for dest, (flag, _default) in spec_options(spec).items()}
        check_values(spec.ranges, {dest: getattr(args, dest, None) for dest in spec.ranges}, spec.defaults, flags)
        if spec.check_args is not None:
            spec.check_args(args, None)


def check_criterion(args, criterion=None):
    """The criterion must train the output layer (``registry.criterion_trains``: softmax-type layers with the
    criterions that score a softmax, the others with the criterions made for them), and the criterion's own
    ``check_options`` runs, before any data is read. ``criterion``: its registered name (default: the training
    options')."""
    if criterion is None:
        criterion = (getattr(args, "criterion", None) if isinstance(args, argparse.Namespace)
                     else fairseq_compat.root_option(args, "criterion", "_name"))
    if not criterion or not isinstance(criterion, str):
        return
    from fairseq.criterions import CRITERION_REGISTRY

    spec = get_output_layer_spec(args.output_layer)
    cls = CRITERION_REGISTRY.get(criterion)
    if cls is not None and not criterion_trains(cls, spec):
        if spec.softmax_type:
            needing = ", ".join(layers_trained_by(cls))
            others = ", ".join(declared_criterions(spec))
            raise OutlayersConfigError(
                f"--criterion {criterion} needs --output-layer {needing} (a predicted word vector), but "
                f"--output-layer {spec.name} gives a softmax; use fairseq's cross-entropy criterions"
                f"{', ' + others if others else ''}, or --output-layer {needing}")
        raise OutlayersConfigError(
            f"--criterion {criterion} scores a softmax over the vocabulary, but --output-layer {spec.name} predicts "
            f"a word vector; use --criterion {', '.join(declared_criterions(spec))}")
    early = getattr(cls, "check_options", None)
    if early is not None:  # the criterion's own options (ranges, combinations), before any data is read
        early(lambda name, default=None: fairseq_compat.root_option(args, "criterion", name, default))
