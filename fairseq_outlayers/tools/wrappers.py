"""``outlayers-train`` / ``-generate`` / ``-interactive`` / ``-validate``: fairseq's CLIs with this package's
``--user-dir`` already given, so an installed package needs no path to the repository. A user mistake ends them
with one line (``fairseq_outlayers.errors.one_line_errors``). ``outlayers-generate`` / ``-interactive`` also do
``--replace-unk [LEXICON]`` with the package's unknown-word rule (``fairseq_outlayers.tools.evaluation.unknown_words``)."""
import sys

from fairseq_outlayers import USER_DIR
from fairseq_outlayers.value_checks import check_decoding_argv
from fairseq_outlayers.errors import one_line_errors


def _with_user_dir(argv):
    if any(a == "--user-dir" or a.startswith("--user-dir=") for a in argv):
        return argv
    return argv + ["--user-dir", USER_DIR]


def _set_argv(extra=()):
    sys.argv = [sys.argv[0]] + _with_user_dir(sys.argv[1:]) + list(extra)


def _run(module_name, extra=()):
    import importlib

    _set_argv(extra)
    return importlib.import_module(module_name).cli_main()


def _given(option):
    return any(a == option or a.startswith(option + "=") for a in sys.argv[1:])


def _replace_unk_asked():
    return _given("--replace-unk")


def _bf16_asked(argv):
    return any(a in ("--bf16", "--memory-efficient-bf16") for a in argv)


def _train(bf16: bool):
    """fairseq_cli.train.cli_main, with a new run's option checks (``models.checks.check_new_run``, which
    ``build_model`` runs too) before fairseq creates the save directory, and for bf16 the ``--tpu`` that fairseq
    0.12 implies taken back before its configuration is built (fairseq_outlayers.fairseq_compat), so bf16 trains on
    one or several GPUs, or the CPU."""
    from fairseq_cli.train import main  # first: it sets up fairseq's logging before fairseq is imported

    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_outlayers.errors import OutlayersConfigError
    from fairseq_outlayers.fairseq_compat import keep_bf16_off_the_tpu
    from fairseq_outlayers.models.seam_checks import check_new_run

    args = options.parse_args_and_arch(options.get_training_parser())
    if bf16:
        keep_bf16_off_the_tpu(args)
        if getattr(args, "use_plasma_view", False):
            raise OutlayersConfigError("--use-plasma-view with bf16 is not supported by outlayers-train; drop it")
    model = ARCH_MODEL_REGISTRY.get(getattr(args, "arch", None))
    if model is not None and model.__module__.startswith("fairseq_outlayers."):
        check_new_run(args)
    cfg = convert_namespace_to_omegaconf(args)
    if args.profile:
        import torch

        with torch.cuda.profiler.profile(), torch.autograd.profiler.emit_nvtx():
            distributed_utils.call_main(cfg, main)
    else:
        distributed_utils.call_main(cfg, main)


@one_line_errors
def train():
    """fairseq-train; an unreadable checkpoint_last.pt resumes from the newest intact checkpoint (tools/resume.py);
    a new run's options are checked before anything is written; --bf16 trains on the GPU or CPU instead of asking
    for a TPU."""
    from fairseq_outlayers.tools.resume import restore_args

    _set_argv(restore_args(sys.argv[1:]))
    return _train(bf16=_bf16_asked(sys.argv[1:]))


@one_line_errors
def generate():
    check_decoding_argv(sys.argv[1:])
    if not _replace_unk_asked():
        return _run("fairseq_cli.generate")
    from fairseq import options

    from fairseq_outlayers.tools.evaluation.unknown_words import generate_main

    _set_argv()
    parser = options.get_generation_parser()
    # as fairseq_cli.generate.cli_main: tasks that read model options (e.g. AudioPretraining) take --arch
    parser.add_argument("--arch", "-a", metavar="ARCH", default="wav2vec2")
    generate_main(options.parse_args_and_arch(parser))  # returns fairseq's scorer: not an exit status


@one_line_errors
def interactive():
    check_decoding_argv(sys.argv[1:])
    from fairseq import options

    from fairseq_outlayers.tools.evaluation.interactive import interactive_main  # names over-long lines; --replace-unk

    _set_argv()
    interactive_main(options.parse_args_and_arch(options.get_interactive_generation_parser()))


@one_line_errors
def validate():
    """fairseq-validate with fairseq-generate's defaults: the translation task unless ``--task`` is given
    (fairseq-validate has none: ``KeyError: None``) and ``--max-tokens 12000`` unless a batch size is given
    (fairseq-validate asserts one)."""
    extra = [] if _given("--task") else ["--task", "translation"]
    if not (_given("--max-tokens") or _given("--batch-size") or _given("--max-sentences")):
        extra += ["--max-tokens", "12000"]
    return _run("fairseq_cli.validate", extra)
