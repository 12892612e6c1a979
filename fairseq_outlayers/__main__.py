"""``python -m fairseq_outlayers user-dir`` prints the path to pass as ``--user-dir``;
``python -m fairseq_outlayers params CHECKPOINT`` prints a checkpoint's parameter report;
``python -m fairseq_outlayers translate --checkpoint CKPT --data DIR --input raw.txt --output out.txt`` translates
raw text (tokenised, BPE'd and detokenised as the training data was);
``python -m fairseq_outlayers fit-bias CHECKPOINT --out NEW.pt`` fits the per-word output bias a model trained with
a sampled softmax lacks (``outlayers-fit-bias``);
``python -m fairseq_outlayers options [WORD ...]`` prints every option the package adds, with its default and help
(``outlayers-options``)."""
import sys

from fairseq_outlayers import USER_DIR


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["user-dir"]:
        print(USER_DIR)
        return 0
    if argv[:1] == ["params"]:
        from .tools.params import main as params_main

        return params_main(argv[1:])
    if argv[:1] == ["fit-bias"]:
        from .tools.fit_bias import main as fit_bias_main

        return fit_bias_main(argv[1:])
    if argv[:1] == ["options"]:
        from .tools.options import main as options_main

        return options_main(argv[1:])
    if argv[:1] == ["translate"]:
        from .tools.translate import main as translate_main

        return translate_main(argv[1:])
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
