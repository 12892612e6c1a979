"""``python -m fairseq_outlayers user-dir`` prints the path to pass as ``--user-dir``;
``python -m fairseq_outlayers params CHECKPOINT`` prints a checkpoint's parameter report."""
import sys


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["user-dir"]:
        import os

        print(os.path.dirname(os.path.abspath(__file__)))
        return 0
    if argv[:1] == ["params"]:
        from .cli.params import main as params_main

        return params_main(argv[1:])
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
