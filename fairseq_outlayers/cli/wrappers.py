"""``outlayers-train`` / ``-generate`` / ``-interactive`` / ``-validate``: fairseq's CLIs with this package's
``--user-dir`` already given, so an installed package needs no path to the repository. A user mistake ends them
with one line (``fairseq_outlayers.errors.one_line_errors``). ``outlayers-generate`` / ``-interactive`` also do
``--replace-unk [LEXICON]`` with the package's unknown-word rule (``fairseq_outlayers.evaluation.unknown_words``)."""
import sys

from fairseq_outlayers import USER_DIR
from fairseq_outlayers.checks import check_decoding_argv
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


def _replace_unk_asked():
    return any(a == "--replace-unk" or a.startswith("--replace-unk=") for a in sys.argv[1:])


@one_line_errors
def train():
    """fairseq-train; an unreadable checkpoint_last.pt resumes from the newest intact checkpoint (cli/resume.py)."""
    from fairseq_outlayers.cli.resume import restore_args

    return _run("fairseq_cli.train", restore_args(sys.argv[1:]))


@one_line_errors
def generate():
    check_decoding_argv(sys.argv[1:])
    if not _replace_unk_asked():
        return _run("fairseq_cli.generate")
    from fairseq import options

    from fairseq_outlayers.evaluation.unknown_words import generate_main

    _set_argv()
    parser = options.get_generation_parser()
    # as fairseq_cli.generate.cli_main: tasks that read model options (e.g. AudioPretraining) take --arch
    parser.add_argument("--arch", "-a", metavar="ARCH", default="wav2vec2")
    generate_main(options.parse_args_and_arch(parser))  # returns fairseq's scorer: not an exit status


@one_line_errors
def interactive():
    check_decoding_argv(sys.argv[1:])
    if not _replace_unk_asked():
        return _run("fairseq_cli.interactive")
    from fairseq import options

    from fairseq_outlayers.evaluation.unknown_words import interactive_main

    _set_argv()
    interactive_main(options.parse_args_and_arch(options.get_interactive_generation_parser()))


@one_line_errors
def validate():
    return _run("fairseq_cli.validate")
