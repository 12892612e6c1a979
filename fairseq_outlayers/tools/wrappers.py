"""``outlayers-train`` / ``-generate`` / ``-interactive`` / ``-validate``: fairseq's CLIs with this package's
``--user-dir`` already given, so an installed package needs no path to the repository, and (``-generate`` /
``-validate``) ``--required-batch-size-multiple 1`` unless given, so every sentence is scored. A user mistake ends them
with one line (``fairseq_outlayers.errors.one_line_errors``). ``outlayers-generate`` / ``-interactive`` also do
``--replace-unk [LEXICON]`` with the package's unknown-word rule (``fairseq_outlayers.tools.evaluation.unknown_words``)."""
import contextlib
import importlib
import os
import sys
import traceback

import fairseq_outlayers.models  # noqa: F401  (registers the plugin: fairseq skips a --user-dir already imported)
from fairseq_outlayers import USER_DIR
from fairseq_outlayers.command_line import option_given, option_value
from fairseq_outlayers.core.build import check_new_run
from fairseq_outlayers.core.checkpoint_safety import check_decodable, loading
from fairseq_outlayers.core.fairseq_compat import atomic_checkpoint_copies, keep_bf16_off_the_tpu, restore_path
from fairseq_outlayers.errors import OutlayersConfigError, one_line_errors
from fairseq_outlayers.outfiles import DISK_ERRORS, check_writable_dir
from fairseq_outlayers.value_checks import check_decoding_argv


def _with_user_dir(argv):
    if option_given(argv, "--user-dir"):
        return argv
    return argv + ["--user-dir", USER_DIR]


def _set_argv(extra=()):
    sys.argv = [sys.argv[0]] + _with_user_dir(sys.argv[1:]) + list(extra)


def _run(module_name, extra=()):
    _set_argv(extra)
    return importlib.import_module(module_name).cli_main()


def _given(option):
    return option_given(sys.argv[1:], option)


def _replace_unk_asked():
    return _given("--replace-unk")


def _bf16_asked(argv):
    return any(a in ("--bf16", "--memory-efficient-bf16") for a in argv)


def _check_checkpoints(argv):
    """The checkpoints of ``--path`` are readable fairseq checkpoints with finite weights, before fairseq starts. A
    path that is not a file (a sharded checkpoint's base name, or a missing file) is left to fairseq's loader, whose
    errors are one line too (``errors.load_error_message``)."""

    path = option_value(argv, "--path")
    paths = [p for p in (path or "").split(os.pathsep) if os.path.isfile(p)]
    if paths:
        check_decodable(paths)


def check_training_device(args):
    """Options that need a device this run does not have, refused before any work: ``--fp16`` needs CUDA
    (fairseq's FP16 optimizer asserts it deep inside its setup; ``--memory-efficient-fp16``, which sets ``fp16``
    too, and ``--amp`` run on the CPU)."""
    import torch

    plain_fp16 = getattr(args, "fp16", False) and not getattr(args, "memory_efficient_fp16", False)
    if plain_fp16 and not getattr(args, "bf16", False) and (
            getattr(args, "cpu", False) or not torch.cuda.is_available()):
        where = "--cpu was given" if getattr(args, "cpu", False) else "torch here sees no CUDA GPU"
        raise OutlayersConfigError(f"--fp16 needs a CUDA GPU, and {where}; drop --fp16 to train in float32, or use "
                                   "--bf16, which also trains on the CPU")


def _save_error(exc: BaseException):
    """(message, partial file) for an ``OSError`` raised while fairseq wrote a checkpoint (disk full, quota, a
    read-only file system), or None for any other exception."""

    if not isinstance(exc, OSError):
        return None
    target = None
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        name, local = frame.f_code.co_name, frame.f_locals
        if name == "torch_persistent_save" and isinstance(local.get("filename"), str):
            target = local["filename"]
        elif name == "save_checkpoint" and target is None and isinstance(local.get("checkpoints"), list):
            target = (local["checkpoints"] or [None])[0]
        elif name == "atomic_copy" and isinstance(local.get("dst_path"), str):
            target = local["dst_path"]
    if target is None:
        return None

    reason = exc.strerror or str(exc)
    folder = os.path.dirname(target) or "."
    fix = "free space in" if exc.errno in DISK_ERRORS else "make sure you can write in"
    return (f"could not write checkpoint '{target}' ({reason}); the checkpoints saved before are intact: {fix} "
            f"'{folder}' (or give another --save-dir) and run the same command again to resume from "
            "checkpoint_last.pt"), target + ".tmp"


def _train(bf16: bool):
    """fairseq_cli.train.cli_main, with a new run's option checks (``core.build.check_new_run``, which
    ``build_model`` runs too, and ``check_training_device``) before fairseq creates the save directory, which is
    then created and probed here; for bf16 the ``--tpu`` that fairseq 0.12 implies taken back before its
    configuration is built (fairseq_outlayers.core.fairseq_compat), so bf16 trains on one or several GPUs, or the CPU.
    Checkpoint copies are atomic (``fairseq_compat.atomic_checkpoint_copies``), and a checkpoint write that fails
    (disk full) removes its partial file and ends in one line (``_save_error``). Workers that fairseq spawns itself
    (several GPUs without torchrun) do not inherit the atomic copies."""
    from fairseq_cli.train import main  # first: it sets up fairseq's logging before fairseq is imported

    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.models import ARCH_MODEL_REGISTRY

    args = options.parse_args_and_arch(options.get_training_parser())
    if bf16:
        keep_bf16_off_the_tpu(args)
        if getattr(args, "use_plasma_view", False):
            raise OutlayersConfigError("--use-plasma-view with bf16 is not supported by outlayers-train; drop it")

    check_training_device(args)
    from fairseq_outlayers.tools.resume import check_training_state

    check_training_state(args)  # a changed arch, optimizer, precision, criterion or schedule: one line, first
    model = ARCH_MODEL_REGISTRY.get(getattr(args, "arch", None))
    if model is not None and model.__module__.startswith("fairseq_outlayers."):
        check_new_run(args)
    if not getattr(args, "no_save", False):  # fairseq would fail on it after building the model
        check_writable_dir(args.save_dir, "--save-dir")
    cfg = convert_namespace_to_omegaconf(args)
    try:
        with atomic_checkpoint_copies(), loading(restore_path(args)):
            if args.profile:
                import torch

                with torch.cuda.profiler.profile(), torch.autograd.profiler.emit_nvtx():
                    distributed_utils.call_main(cfg, main)
            else:
                distributed_utils.call_main(cfg, main)
    except OSError as e:
        found = _save_error(e)
        if found is None:
            raise

        message, partial = found
        with contextlib.suppress(OSError):
            os.unlink(partial)  # the half-written file fairseq renames over the checkpoint only when complete
        raise OutlayersConfigError(message) from e


@one_line_errors
def train():
    """fairseq-train; an unreadable checkpoint_last.pt resumes from the newest intact checkpoint (tools/resume.py);
    a new run's options are checked before anything is written; --bf16 trains on the GPU or CPU instead of asking
    for a TPU."""
    from fairseq_outlayers.tools.resume import restore_args

    _set_argv(restore_args(sys.argv[1:]))
    return _train(bf16=_bf16_asked(sys.argv[1:]))


def _every_sentence():
    """``--required-batch-size-multiple 1`` unless given: with fairseq's default of 8, fairseq-generate and
    fairseq-validate drop a last batch that is not a multiple of 8 sentences (fairseq issue #5036)."""
    return [] if _given("--required-batch-size-multiple") else ["--required-batch-size-multiple", "1"]


@one_line_errors
def generate():
    """fairseq-generate on every sentence (``_every_sentence``); ``--replace-unk`` with the package's rule."""
    check_decoding_argv(sys.argv[1:])
    _check_checkpoints(sys.argv[1:])
    if not _replace_unk_asked():
        return _run("fairseq_cli.generate", _every_sentence())
    from fairseq import options

    from fairseq_outlayers.tools.evaluation.unknown_words import generate_main

    _set_argv(_every_sentence())
    parser = options.get_generation_parser()
    # as fairseq_cli.generate.cli_main: tasks that read model options (e.g. AudioPretraining) take --arch
    parser.add_argument("--arch", "-a", metavar="ARCH", default="wav2vec2")
    generate_main(options.parse_args_and_arch(parser))  # returns fairseq's scorer: not an exit status


@one_line_errors
def interactive():
    check_decoding_argv(sys.argv[1:])
    _check_checkpoints(sys.argv[1:])
    from fairseq import options

    from fairseq_outlayers.tools.evaluation.interactive import interactive_main  # names over-long lines; --replace-unk

    _set_argv()
    interactive_main(options.parse_args_and_arch(options.get_interactive_generation_parser()))


@one_line_errors
def validate():
    """fairseq-validate with fairseq-generate's defaults: the translation task unless ``--task`` is given
    (fairseq-validate has none: ``KeyError: None``) and ``--max-tokens 12000`` unless a batch size is given
    (fairseq-validate asserts one); every sentence (``_every_sentence``)."""
    _check_checkpoints(sys.argv[1:])
    extra = _every_sentence() + ([] if _given("--task") else ["--task", "translation"])
    if not (_given("--max-tokens") or _given("--batch-size") or _given("--max-sentences")):
        extra += ["--max-tokens", "12000"]
    return _run("fairseq_cli.validate", extra)
