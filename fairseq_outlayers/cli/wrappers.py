"""``outlayers-train`` / ``-generate`` / ``-interactive`` / ``-validate``: fairseq's CLIs with this package's
``--user-dir`` already given, so an installed package needs no path to the repository."""
import sys

from fairseq_outlayers import USER_DIR


def _with_user_dir(argv):
    if any(a == "--user-dir" or a.startswith("--user-dir=") for a in argv):
        return argv
    return argv + ["--user-dir", USER_DIR]


def _run(module_name):
    import importlib

    sys.argv = [sys.argv[0]] + _with_user_dir(sys.argv[1:])
    return importlib.import_module(module_name).cli_main()


def train():
    return _run("fairseq_cli.train")


def generate():
    return _run("fairseq_cli.generate")


def interactive():
    return _run("fairseq_cli.interactive")


def validate():
    return _run("fairseq_cli.validate")
