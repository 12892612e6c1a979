"""Translate a raw text file with a trained checkpoint: tokenise, BPE, translate, detokenise.

    python -m fairseq_outlayers translate --checkpoint CKPT --data DATA_BIN --input raw.de --output out.en \\
        [--long-lines error|skip|truncate]

The text is prepared exactly as the training data was (``fairseq_outlayers.tools.rawtext``: sacremoses tokenisation,
the data's case and BPE codes, read from ``DATA_BIN``), binarised with ``DATA_BIN``'s dictionaries, translated by
``fairseq-generate`` (beam 5) and detokenised; one output line per input line (an empty line stays empty).
``--output`` is checked before any work and written atomically; an existing file needs ``--force``, and no
file the command reads (the input, the checkpoint, anything in ``DATA_BIN``) is ever written over.

A line longer than the model reads (its ``max_source_positions``, at most fairseq's 1024 tokens after
tokenisation and BPE) stops the command before translating, naming the line, unless ``--long-lines skip`` (its
output line is left empty and the line is named on standard error) or ``--long-lines truncate`` (its first tokens
are translated, as fairseq's ``--truncate-source`` does). The temporary work directory is removed on exit and when
the command is stopped with SIGTERM; ``--keep-work DIR`` keeps it in a new or empty ``DIR``.
"""
import argparse
import math
import os
import re
import sys
import tempfile
from typing import List

from fairseq_outlayers import value_checks as checks
from fairseq_outlayers.core.checkpoint_safety import check_finite, read
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.outfiles import check_output_path, check_work_dir, removed_on_termination, write_text
from fairseq_outlayers.tools.evaluation import scoring
from fairseq_outlayers.tools.evaluation.scoring import binarised_sizes, read_generate_output
from fairseq_outlayers.tools.rawtext import Preparation, binarise, read_text

#: fairseq's default ``--max-source-positions`` of the translation task, which fairseq-generate applies
TASK_MAX_SOURCE_POSITIONS = 1024
LONG_LINES = ("error", "skip", "truncate")


def source_limit(checkpoint: str) -> int:
    """The most source tokens (with the end-of-sentence token) fairseq-generate lets the checkpoint read: the
    model's ``max_source_positions`` when the checkpoint's configuration gives one, and never more than the task's
    default. Read with the package's safe load, memory-mapped, before the text is prepared: a checkpoint that is
    refused, damaged or holds NaN weights is an ``OutlayersConfigError`` (one line) here."""
    limit = TASK_MAX_SOURCE_POSITIONS
    state = read(checkpoint, mmap=True)
    check_finite(checkpoint, state)
    cfg = state.get("cfg") if isinstance(state, dict) else None
    model = (cfg or {}).get("model") if isinstance(cfg, dict) else None
    if model is None and isinstance(state, dict):
        model = state.get("args")
    value = model.get("max_source_positions") if isinstance(model, dict) else getattr(model, "max_source_positions",
                                                                                      None)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 2:
        limit = min(limit, int(value))
    return limit


def _invalid_size(message: str):
    """(sample index, size) of fairseq's 'Size of sample #N is invalid (=(S, T))' refusal, else None."""
    m = re.search(r"Size of sample #(\d+) is invalid \(=\(?(?:np\.int\d+\()?(\d+)", message)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _named(lines: List[int], sizes: List[int]) -> str:
    shown = ", ".join(f"{k + 1} ({sizes[j]:,} tokens)" for j, k in lines[:5])
    return shown + (f" and {len(lines) - 5} more" if len(lines) > 5 else "")


def translate_lines(lines, checkpoint, data, work_dir, beam=5, lenpen=1.0, batch_size=64, prep=None,
                    long_lines="error", input_name="--input", report=None):
    """Detokenised translations of raw ``lines`` (empty lines are not sent to the model and stay empty).

    A line longer than the model reads (``source_limit``) is, by ``long_lines``: "error", an
    ``OutlayersConfigError`` naming it before anything is translated; "skip", left out (its translation is "");
    "truncate", cut to its first tokens by fairseq-generate's ``--truncate-source``. ``report(message)`` hears of
    skipped and truncated lines (1-based line numbers)."""
    if long_lines not in LONG_LINES:
        raise OutlayersConfigError(f"--long-lines must be one of {', '.join(LONG_LINES)}, not '{long_lines}'")
    prep = prep or Preparation.from_data(data)
    todo = [i for i, line in enumerate(lines) if line.strip()]
    out = [""] * len(lines)
    if not todo:
        return out
    data_bin = binarise(prep, [lines[i] for i in todo], None, data, os.path.join(work_dir, "data"))
    limit = source_limit(checkpoint)
    sizes = binarised_sizes(os.path.join(data_bin, f"test.{prep.src}-{prep.tgt}.{prep.src}.idx"))
    long = [(j, todo[j]) for j, n in enumerate(sizes or []) if n > limit]
    advice = (f"pass --long-lines skip (an empty output line for each) or --long-lines truncate (its first "
              f"{limit - 1:,} tokens translated), or split the line")
    if long and long_lines == "error":
        raise OutlayersConfigError(
            f"{input_name} line {_named(long, sizes)}: longer than the model reads ({limit:,} tokens with the end "
            f"of sentence, after tokenisation and BPE); {advice}")
    extra = ["--max-source-positions", str(limit)]
    extra += {"error": [], "skip": ["--skip-invalid-size-inputs-valid-test"],
              "truncate": ["--truncate-source"]}[long_lines]
    try:
        scoring.generate(data_bin, checkpoint, work_dir, beam, lenpen, batch_size, extra=extra)  # a test replaces it
    except OutlayersConfigError as e:
        found = _invalid_size(str(e))
        if found is None or found[0] >= len(todo):
            raise
        j, n = found
        raise OutlayersConfigError(f"{input_name} line {todo[j] + 1} ({n:,} tokens): longer than the model reads; "
                                   f"{advice}") from None
    with open(os.path.join(work_dir, "generate-test.txt"), encoding="utf-8") as f:
        by_id = read_generate_output(f.read())["H"]
    skipped = {j for j, _ in long} if long_lines == "skip" else set()
    missing = [j for j in range(len(todo)) if j not in by_id and j not in skipped]
    if missing:
        raise OutlayersConfigError(f"fairseq-generate returned no translation of {input_name} line "
                                   f"{todo[missing[0]] + 1} ({len(missing)} line(s) without one); see "
                                   f"{work_dir}/generate-test.txt")
    done = [j for j in range(len(todo)) if j in by_id]
    for j, text in zip(done, prep.detokenise([by_id[j] for j in done])):
        out[todo[j]] = text
    if long and report is not None:
        what = ("skipped (their output lines are empty)" if long_lines == "skip"
                else f"truncated to their first {limit - 1:,} tokens")
        report(f"{len(long)} line(s) longer than the model reads ({limit:,} tokens) {what}: line "
               f"{_named(long, sizes)}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairseq_outlayers translate",
                                     description=__doc__.strip().splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a trained model (e.g. checkpoint_best.pt)")
    parser.add_argument("--data", required=True, help="the data directory it was trained on (dictionaries, BPE "
                        "codes and .done from scripts/prepare-*.sh)")
    parser.add_argument("--input", required=True, help="raw text, one sentence per line (UTF-8)")
    parser.add_argument("--output", required=True, help="where to write the translations")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --output (never a file the "
                        "command reads), or reuse a non-empty --keep-work DIR")
    parser.add_argument("--beam", type=checks.BEAM, default=5)
    parser.add_argument("--lenpen", type=checks.LENGTH_PENALTY, default=1.0, help="length penalty, in [-10, 10]")
    parser.add_argument("--batch-size", type=checks.POSITIVE_INT, default=64)
    parser.add_argument("--long-lines", choices=LONG_LINES, default="error",
                        help="a line longer than the model reads (its max_source_positions, at most 1024 tokens "
                        "after tokenisation and BPE): error (default: stop before translating, naming the line), "
                        "skip (an empty output line; the line is named on standard error) or truncate (translate "
                        "its first tokens)")
    parser.add_argument("--keep-work", default=None, metavar="DIR", help="keep the prepared text and "
                        "fairseq-generate's output in DIR, a new or empty directory (default: a temporary "
                        "directory, removed on exit and on SIGTERM)")
    args = parser.parse_args(argv)

    def report(message):
        print(f"translate: {message}", file=sys.stderr)

    try:
        if not os.path.isfile(args.checkpoint):
            raise OutlayersConfigError(f"--checkpoint '{args.checkpoint}' does not exist; give a checkpoint "
                                       "written by fairseq-train (e.g. SAVE_DIR/checkpoint_best.pt)")
        if not os.path.isdir(args.data):
            raise OutlayersConfigError(f"--data '{args.data}' is not a directory; give the fairseq-preprocess "
                                       "directory the model was trained on")
        # every file the command reads: the input, the checkpoint and the data directory's dictionaries, codes
        # and binaries (named or not); none is ever written over, --force or not
        inputs = [args.input, args.checkpoint, args.data]
        check_output_path(args.output, args.force, inputs=inputs, option="--output")
        lines = read_text(args.input, "--input")
        with removed_on_termination():
            if args.keep_work:
                check_work_dir(args.keep_work, args.force, inputs=inputs + [args.output])
                out = translate_lines(lines, args.checkpoint, args.data, args.keep_work, args.beam, args.lenpen,
                                      args.batch_size, long_lines=args.long_lines, report=report)
            else:
                with tempfile.TemporaryDirectory(prefix="outlayers-translate-") as work:
                    out = translate_lines(lines, args.checkpoint, args.data, work, args.beam, args.lenpen,
                                          args.batch_size, long_lines=args.long_lines, report=report)
            write_text(args.output, "".join(x + "\n" for x in out))
    except OutlayersConfigError as e:
        print(f"translate: error: {e}", file=sys.stderr)
        return 2
    print(f"translate: {len(lines)} lines -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
