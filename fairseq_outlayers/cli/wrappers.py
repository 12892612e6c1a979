"""``outlayers-train`` / ``-generate`` / ``-interactive`` / ``-validate``: fairseq's CLIs with this package's
``--user-dir`` already given, so an installed package needs no path to the repository."""
import sys

from fairseq_outlayers import USER_DIR


def _with_user_dir(argv):
    if any(a == "--user-dir" or a.startswith("--user-dir=") for a in argv):
        return argv
    return argv + ["--user-dir", USER_DIR]


def _run(module_name, extra=()):
    import importlib

    sys.argv = [sys.argv[0]] + _with_user_dir(sys.argv[1:]) + list(extra)
    return importlib.import_module(module_name).cli_main()


def train():
    """fairseq-train; an unreadable checkpoint_last.pt resumes from the newest intact checkpoint (cli/resume.py)."""
    from fairseq_outlayers.cli.resume import restore_args

    return _run("fairseq_cli.train", restore_args(sys.argv[1:]))


def generate():
    return _run("fairseq_cli.generate")


def interactive():
    return _run("fairseq_cli.interactive")


def validate():
    return _run("fairseq_cli.validate")
