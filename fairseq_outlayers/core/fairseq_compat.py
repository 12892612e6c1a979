"""Every fairseq 0.12 workaround of the plugin, each with its reason (and fairseq's issue, where there is one).

In this file:

* ``restore_file`` / ``restore_path`` / ``command_line_checkpoint`` / ``checkpoint_model_args``: the checkpoint ``fairseq-train`` will load
  (fairseq's rule in ``checkpoint_utils.load_checkpoint``), read before fairseq reads it, so a resume is checked
  before any data; ``tools/resume.py`` applies the same rule to the command line.
* ``keep_bf16_off_the_tpu`` / ``release_bf16_from_tpu`` / ``check_training_precision``: ``options.py`` sets
  ``--tpu`` for ``--bf16``, and the Trainer then needs torch_xla.
* ``transformer_config``: what fairseq's Transformer ``build_model`` does to the options, which its builders
  take only as a ``TransformerConfig`` (the seams need the options as arguments).
* ``keep_tied_key_out``: fairseq's checkpoint upgrade re-inserts ``output_projection.weight`` for a tied decoder.
* ``atomic_checkpoint_copies``: fairseq writes ``checkpoint_last.pt`` (and ``checkpoint_best.pt``) by copying the
  checkpoint it has just saved, in place: a disk that fills up during the copy leaves it truncated.
  ``outlayers-train`` copies to a temporary file and renames it instead. fairseq also logs the traceback of a
  failed save; for a full disk ``outlayers-train`` says it in one line instead.

Elsewhere, each where fairseq's own code runs:

* ``tools/resume.py``: under plain ``fairseq-train``, ``checkpoint_last.pt`` is written by a non-atomic copy; a
  truncated one ends the next run.
* ``lab/ledger/patience.py``: ``--patience`` is counted in memory only (``should_stop_early.num_runs``), so a
  resumed run starts it again; the ledger sets it from the log.
* ``lab/fairseq_runs.py`` and ``tests/harness.py``: the batch-prefetch thread (``BufferedIterator``) can abort
  the process at exit after a complete run.
* ``checkpoint_safety.py``: torch >= 2.6 loads weights-only, and fairseq's checkpoints pickle ``Namespace``.
* ``models/lstm.py``: ``LSTMDecoder`` allocates ``fc_out`` unless tied, and the LSTM base sets adaptive softmax.
"""
import argparse
import contextlib
import importlib.util
import logging
import os
import re
import sys
from typing import Optional, Sequence

from fairseq_outlayers import outfiles
from fairseq_outlayers.command_line import option_given, option_value
from fairseq_outlayers.errors import OutlayersConfigError

logger = logging.getLogger(__name__)
NOTE = "bf16 without a TPU: fairseq's implied --tpu is switched off; training in bfloat16 on this device"


def root_option(args, section, name, default=None):
    """A training option outside the model's arguments: from the legacy Namespace (which holds every option), or
    from the root of a hydra configuration (``section.name``)."""
    if isinstance(args, argparse.Namespace):
        return getattr(args, name, default)
    try:
        value = args._get_root()[section][name]
    except Exception:
        return default
    return default if value is None else value


def restore_file(save_dir: str = "checkpoints", restore: str = "checkpoint_last.pt", suffix: str = "") -> str:
    """The file fairseq-train reads for ``--restore-file`` (fairseq's ``checkpoint_utils.load_checkpoint``): the
    default ``checkpoint_last.pt`` is in ``--save-dir``; any other name is a path as given. Either way
    ``--checkpoint-suffix`` goes before ``.pt``."""
    if restore == "checkpoint_last.pt":
        return os.path.join(save_dir, f"checkpoint_last{suffix}.pt")
    return restore.replace(".pt", suffix + ".pt")


def restore_path(args, fine_tune: bool = True) -> Optional[str]:
    """The checkpoint fairseq-train will load (``restore_file``, or, without ``checkpoint_last.pt``, the file of
    ``--continue-once`` or ``--finetune-from-model`` when ``fine_tune``: a start from its weights only), or None
    when that file does not exist."""
    restore = root_option(args, "checkpoint", "restore_file", "checkpoint_last.pt")
    path = restore_file(root_option(args, "checkpoint", "save_dir", "checkpoints"), restore,
                        root_option(args, "checkpoint", "checkpoint_suffix", "") or "")
    if fine_tune and restore == "checkpoint_last.pt" and not os.path.exists(path):
        path = root_option(args, "checkpoint", "continue_once") or root_option(
            args, "checkpoint", "finetune_from_model")
    return path if path and os.path.isfile(path) else None


#: fairseq-train's options that choose the checkpoint it loads (``restore_path``)
RESTORE_OPTIONS = ("save_dir", "restore_file", "checkpoint_suffix", "continue_once", "finetune_from_model")


def command_line_checkpoint(argv: Sequence[str]) -> Optional[str]:
    """The checkpoint a fairseq command line loads, read from its arguments: ``--path`` (fairseq-generate,
    -interactive, -validate: one file, or several joined by ``:``), else fairseq-train's (``restore_path``)."""
    path = option_value(argv, "--path")
    if path is not None:
        return path
    given = {name: option_value(argv, "--" + name.replace("_", "-")) for name in RESTORE_OPTIONS}
    return restore_path(argparse.Namespace(**{k: v for k, v in given.items() if v is not None}))


def checkpoint_model_args(path):
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


# ---- bf16 is not TPU training ------------------------------------------------------------------------------------
# fairseq 0.12's ``options.parse_args_and_arch`` sets ``--tpu`` whenever ``--bf16`` (or ``--memory-efficient-bf16``)
# is given, and its Trainer then asks torch_xla for a TPU. Its Trainer, optimizers and sample preparation otherwise
# handle bf16 on any device. So when bf16 is asked for, ``--tpu`` was not, and torch_xla is not installed, the flag
# is taken back: by ``outlayers-train`` on the parsed options (``keep_bf16_off_the_tpu``), so multi-GPU runs are
# ordinary CUDA runs; by plain ``fairseq-train --user-dir`` when the model is built (``release_bf16_from_tpu``). A
# multi-GPU ``fairseq-train`` decides how to start its workers from ``--tpu`` before any model is built: use
# ``outlayers-train`` there.

def bf16_means_no_tpu(bf16, tpu, argv: Optional[Sequence[str]] = None) -> bool:
    """True when fairseq set ``tpu`` only because of bf16: bf16 asked for, ``--tpu`` not on the command line
    (``argv``, default ``sys.argv``) and torch_xla not installed."""
    argv = sys.argv[1:] if argv is None else argv
    return bool(bf16) and bool(tpu) and not option_given(argv, "--tpu") and importlib.util.find_spec("torch_xla") is None


def keep_bf16_off_the_tpu(args, argv: Optional[Sequence[str]] = None) -> bool:
    """On the Namespace from ``options.parse_args_and_arch``: unset the ``tpu`` that bf16 implied."""
    if bf16_means_no_tpu(getattr(args, "bf16", False), getattr(args, "tpu", False), argv):
        args.tpu = False
        logger.info(NOTE)
        return True
    return False


def release_bf16_from_tpu(args, task, argv: Optional[Sequence[str]] = None) -> bool:
    """At a model's build under ``fairseq-train``: unset the ``tpu`` that bf16 implied in the run's configuration
    (the root of ``task.cfg``, the object fairseq's Trainer is given) and in the model's arguments ``args``. False
    when there is nothing to change or no run configuration to reach."""
    try:
        common = task.cfg._get_root()["common"]
        bf16, tpu = common["bf16"], common["tpu"]
    except Exception:  # a task built from a Namespace, or a configuration without these options
        return False
    if not bf16_means_no_tpu(bf16, tpu, argv):
        return False
    common["tpu"] = False
    if getattr(args, "tpu", False):
        args.tpu = False
    logger.info(NOTE)
    return True


def check_training_precision(args):
    """A ``--tpu`` left set without torch_xla ends in ``'NoneType' object has no attribute 'xla_device'`` after
    the model is built; say what to do first (reached for an explicit --tpu, or where the run's configuration
    cannot be reached from the model's build)."""
    if root_option(args, "common", "tpu", False) and importlib.util.find_spec("torch_xla") is None:
        given = "--bf16 / --memory-efficient-bf16" if root_option(args, "common", "bf16", False) else "--tpu"
        raise OutlayersConfigError(
            f"{given} makes fairseq 0.12 train on a TPU (its command line sets --tpu for bf16), and torch_xla is not "
            "installed; for bf16 on a GPU run outlayers-train without --tpu, or use --fp16, --memory-efficient-fp16 "
            "or --amp")


# ---- the Transformer ---------------------------------------------------------------------------------------------

def transformer_config(args, task):
    """What fairseq's legacy ``TransformerModel.build_model`` and ``TransformerModelBase.build_model`` do to the
    options before building (fairseq 0.12), with its checks of --share-all-embeddings."""
    from fairseq.models.transformer import TransformerConfig
    from fairseq.models.transformer.transformer_config import (DEFAULT_MAX_SOURCE_POSITIONS,
                                                               DEFAULT_MAX_TARGET_POSITIONS, DEFAULT_MIN_PARAMS_TO_WRAP)

    if args.encoder_layers_to_keep:
        args.encoder_layers = len(args.encoder_layers_to_keep.split(","))
    if args.decoder_layers_to_keep:
        args.decoder_layers = len(args.decoder_layers_to_keep.split(","))
    if getattr(args, "max_source_positions", None) is None:
        args.max_source_positions = DEFAULT_MAX_SOURCE_POSITIONS
    if getattr(args, "max_target_positions", None) is None:
        args.max_target_positions = DEFAULT_MAX_TARGET_POSITIONS
    if args.share_all_embeddings:
        if task.source_dictionary != task.target_dictionary:
            raise OutlayersConfigError("--share-all-embeddings requires a joined dictionary")
        if args.encoder_embed_dim != args.decoder_embed_dim:
            raise OutlayersConfigError("--share-all-embeddings requires --encoder-embed-dim to match "
                                       "--decoder-embed-dim")
        if args.decoder_embed_path and args.decoder_embed_path != args.encoder_embed_path:
            raise OutlayersConfigError("--share-all-embeddings not compatible with --decoder-embed-path")
    if getattr(args, "offload_activations", False):
        args.checkpoint_activations = True  # offloading implies checkpointing
    if not args.share_all_embeddings:
        args.min_params_to_wrap = getattr(args, "min_params_to_wrap", DEFAULT_MIN_PARAMS_TO_WRAP)
    cfg = TransformerConfig.from_namespace(args)
    cfg.decoder.input_dim = int(cfg.decoder.input_dim)  # fairseq's workaround for OmegaConf (T96535332)
    cfg.decoder.output_dim = int(cfg.decoder.output_dim)
    if args.share_all_embeddings:
        cfg.share_decoder_input_output_embed = True  # as fairseq sets it; the output layer is ours anyway
    return cfg


def keep_tied_key_out(decoder):
    """fairseq's ``upgrade_state_dict_named`` copies the embedding to ``output_projection.weight`` for a decoder
    with ``share_input_output_embed``; the output layer ties itself, so the decoder says it does not."""
    decoder.share_input_output_embed = False


# ---- checkpoint copies -------------------------------------------------------------------------------------------

def atomic_copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
    """``PathManager.copy`` for a local file, done atomically (``outfiles.atomic_copy``: a temporary file beside
    ``dst_path``, flushed and renamed over it), so ``dst_path`` keeps its old content when the copy fails (disk
    full)."""
    if os.path.exists(dst_path) and not overwrite:
        return False
    outfiles.atomic_copy(src_path, dst_path)
    return True


@contextlib.contextmanager
def atomic_checkpoint_copies():
    """Within the block, fairseq's checkpoint copies (``checkpoint_utils`` copies the saved checkpoint to
    ``checkpoint_last.pt`` and ``checkpoint_best.pt`` with ``PathManager.copy``) go through ``atomic_copy`` for
    local paths, and the traceback fairseq logs for a save that failed on a full disk is left out (the caller
    reports it in one line). Used by ``outlayers-train`` around its run; importing the plugin changes nothing."""
    from fairseq.file_io import PathManager

    original = PathManager.__dict__["copy"]
    plain = original.__func__ if isinstance(original, staticmethod) else original

    def copy(src_path, dst_path, overwrite=False):
        if "://" in str(src_path) or "://" in str(dst_path):  # a remote path: ioPath's own handler
            return plain(src_path, dst_path, overwrite)
        return atomic_copy(src_path, dst_path, overwrite)

    PathManager.copy = staticmethod(copy)
    log = logging.getLogger("fairseq.checkpoint_utils")
    log.addFilter(_no_disk_full_traceback)
    try:
        yield
    finally:
        PathManager.copy = original
        log.removeFilter(_no_disk_full_traceback)


def _no_disk_full_traceback(record) -> bool:
    """False for the traceback fairseq logs when a checkpoint save failed on a full (or read-only) disk."""

    from fairseq_outlayers.outfiles import DISK_ERRORS

    text = str(record.msg)
    found = re.search(r"^\w*Error: \[Errno (\d+)\]", text, re.M) if text.startswith("Traceback") else None
    return not (found and int(found.group(1)) in DISK_ERRORS)
