"""Translate a raw text file with a trained checkpoint: tokenise, BPE, translate, detokenise.

    python -m fairseq_outlayers translate --checkpoint CKPT --data DATA_BIN --input raw.de --output out.en

The text is prepared exactly as the training data was (``fairseq_outlayers.rawtext``: sacremoses tokenisation,
the data's case and BPE codes, read from ``DATA_BIN``), binarised with ``DATA_BIN``'s dictionaries, translated by
``fairseq-generate`` (beam 5) and detokenised; one output line per input line (an empty line stays empty).
``--output`` is checked before any work and written atomically; an existing file needs ``--force``.
"""
import argparse
import os
import sys
import tempfile

from fairseq_outlayers.errors import OutlayersConfigError


def translate_lines(lines, checkpoint, data, work_dir, beam=5, lenpen=1.0, batch_size=64, prep=None):
    """Detokenised translations of raw ``lines`` (empty lines are not sent to the model and stay empty)."""
    from fairseq_outlayers.evaluation.scoring import generate
    from fairseq_outlayers.rawtext import Preparation, binarise

    prep = prep or Preparation.from_data(data)
    todo = [i for i, line in enumerate(lines) if line.strip()]
    out = [""] * len(lines)
    if not todo:
        return out
    data_bin = binarise(prep, [lines[i] for i in todo], None, data, os.path.join(work_dir, "data"))
    _, hyps = generate(data_bin, checkpoint, work_dir, beam, lenpen, batch_size)
    if len(hyps) != len(todo):
        raise OutlayersConfigError(f"fairseq-generate returned {len(hyps)} translations for {len(todo)} lines; "
                                   f"see {work_dir}/generate-test.txt")
    for i, text in zip(todo, prep.detokenise(hyps)):
        out[i] = text
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairseq_outlayers translate",
                                     description=__doc__.strip().splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a trained model (e.g. checkpoint_best.pt)")
    parser.add_argument("--data", required=True, help="the data directory it was trained on (dictionaries, BPE "
                        "codes and .done from scripts/prepare-*.sh)")
    parser.add_argument("--input", required=True, help="raw text, one sentence per line (UTF-8)")
    parser.add_argument("--output", required=True, help="where to write the translations")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --output")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--lenpen", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--keep-work", default=None, metavar="DIR", help="keep the prepared text and "
                        "fairseq-generate's output in DIR (default: a temporary directory, removed)")
    args = parser.parse_args(argv)
    from fairseq_outlayers.outfiles import check_output_path, write_text
    from fairseq_outlayers.rawtext import read_text

    try:
        if not os.path.isfile(args.checkpoint):
            raise OutlayersConfigError(f"--checkpoint '{args.checkpoint}' does not exist; give a checkpoint "
                                       "written by fairseq-train (e.g. SAVE_DIR/checkpoint_best.pt)")
        if args.beam < 1:
            raise OutlayersConfigError(f"--beam must be a positive integer, got {args.beam}")
        check_output_path(args.output, args.force, inputs=[args.input, args.checkpoint], option="--output")
        lines = read_text(args.input, "--input")
        if args.keep_work:
            os.makedirs(args.keep_work, exist_ok=True)
            out = translate_lines(lines, args.checkpoint, args.data, args.keep_work, args.beam, args.lenpen,
                                  args.batch_size)
        else:
            with tempfile.TemporaryDirectory(prefix="outlayers-translate-") as work:
                out = translate_lines(lines, args.checkpoint, args.data, work, args.beam, args.lenpen,
                                      args.batch_size)
        write_text(args.output, "".join(x + "\n" for x in out))
    except OutlayersConfigError as e:
        print(f"translate: error: {e}", file=sys.stderr)
        return 2
    print(f"translate: {len(lines)} lines -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
