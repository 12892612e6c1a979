"""``outlayers-interactive``: fairseq-interactive with over-long lines named by their line number.

fairseq-interactive stops on a line longer than the model reads (its ``max_positions``) with a traceback that
names a sample of the current buffer, not a line. Here the same run ends with one line naming the input line and
its length, and suggests ``--skip-invalid-size-inputs-valid-test``; with that option fairseq skips such lines
and prints nothing for them, and here each skipped line still gets its (empty) ``H-`` and ``D-`` lines, so the
output stays aligned with the input, and is named on standard error.

Done with fairseq's own pieces, without changing them: the input is read through ``CountingInput`` (fairseq
reads ``-`` from ``sys.stdin``), which counts the lines handed out, so the start of each buffer is known; fairseq's
warning about skipped samples (logger ``fairseq.tasks.fairseq_task``) says which samples of the buffer were left
out; ``SkippedLines`` writes their empty lines into the output in id order. ``--replace-unk [LEXICON]``
(``unknown_words.ReplaceUnkOutput``) works on top of it.
"""
import contextlib
import logging
import re
import sys
from typing import List, Optional

from fairseq_outlayers.errors import OutlayersConfigError

TOOL = "outlayers-interactive"
SKIPPED = re.compile(r"([\d,]+) samples have invalid sizes and will be skipped, max_positions=(.*?), first few "
                     r"sample ids=\[([\d, ]*)\]")
INVALID = re.compile(r"Size of sample #(\d+) is invalid \(=\(?(?:np\.int\d+\()?(\d+).*?since "
                     r"max_positions=(\(?[\d, ]+\)?)")


class CountingInput:
    """A text stream that counts the lines read from it with ``readline`` (what ``fileinput`` calls)."""

    def __init__(self, stream):
        self.stream, self.count = stream, 0

    def readline(self, *args):
        line = self.stream.readline(*args)
        if line:
            self.count += 1
        return line

    def __getattr__(self, name):
        return getattr(self.stream, name)


def buffer_start(lines_read: int, buffer_size: int) -> int:
    """The id of the first line of the buffer fairseq-interactive is working on, when ``lines_read`` lines have
    been read: every buffer but the last holds ``buffer_size`` lines, and a buffer is handed on once read."""
    return buffer_size * ((max(lines_read, 1) - 1) // buffer_size)


class SkippedLines(logging.Handler):
    """Hears fairseq's warning about skipped samples and writes, into the output passing through it (a text
    stream for ``print``), an empty ``H-ID`` and ``D-ID`` line for each skipped line, in id order."""

    def __init__(self, out, reader: CountingInput, buffer_size: int, tool: str = TOOL):
        super().__init__(logging.WARNING)
        self.out, self.reader, self.buffer_size, self.tool = out, reader, buffer_size, tool
        self.pending: List[int] = []
        self.unnamed = 0  # skipped beyond the ten sample ids fairseq names
        self.limit = ""
        self._partial = ""

    # logging
    def emit(self, record):
        m = SKIPPED.search(record.getMessage())
        if not m:
            return
        start = buffer_start(self.reader.count, self.buffer_size)
        ids = [start + int(x) for x in m.group(3).split(",") if x.strip()]
        self.unnamed += int(m.group(1).replace(",", "")) - len(ids)
        self.limit = m.group(2)
        self.pending.extend(ids)

    # the stream print() writes to
    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            m = re.match(r"S-(\d+)\t", line)
            if m:
                self._mark(before=int(m.group(1)))
            self.out.write(line + "\n")
        return len(text)

    def flush(self):
        self.out.flush()

    def close(self):
        if self._partial:
            self.out.write(self._partial)
            self._partial = ""
        self._mark()
        self.flush()
        if self.unnamed:
            print(f"{self.tool}: {self.unnamed} more line(s) were skipped than fairseq named; their output lines "
                  "are missing", file=sys.stderr)

    def _mark(self, before: Optional[int] = None):
        due = sorted(i for i in self.pending if before is None or i < before)
        self.pending = [i for i in self.pending if i not in due]
        for i in due:
            self.out.write(f"H-{i}\t-inf\t\nD-{i}\t-inf\t\n")
            print(f"{self.tool}: line {i + 1} skipped: longer than the model reads (max_positions {self.limit}); "
                  f"its H-{i} and D-{i} lines are empty", file=sys.stderr)


def too_long(exc: BaseException, reader: CountingInput, buffer_size: int) -> Optional[OutlayersConfigError]:
    """fairseq's refusal of an over-long sample as one line naming the input line, or None for anything else."""
    m = INVALID.search(str(exc))
    if not m:
        return None
    line = buffer_start(reader.count, buffer_size) + int(m.group(1)) + 1
    return OutlayersConfigError(
        f"input line {line} has {int(m.group(2)):,} tokens (after tokenisation and BPE, with the end of sentence), "
        f"more than the model reads (max_positions {m.group(3)}); pass --skip-invalid-size-inputs-valid-test to "
        "skip such lines (each gets empty H- and D- lines and is named on standard error), or split the line")


def interactive_main(args):
    """fairseq-interactive's ``main`` on ``args`` (from fairseq's interactive parser), with over-long lines named
    (module docstring) and, when ``args.replace_unk`` is given, the package's unknown-word replacement."""
    from fairseq import distributed_utils
    from fairseq.data import encoders
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import interactive

    from fairseq_outlayers.tools.evaluation import unknown_words

    settings = (unknown_words.take_over_replacement(args, TOOL) if args.replace_unk is not None else None)
    with contextlib.ExitStack() as stack:
        if args.input == "-":
            source = sys.stdin
        else:
            try:
                source = stack.enter_context(open(args.input, encoding="utf-8"))
            except OSError as e:
                raise OutlayersConfigError(f"--input '{args.input}' cannot be read ({e.strerror})") from None
        reader = CountingInput(source)
        args.input = "-"  # fairseq reads sys.stdin, which is the counting reader below
        cfg = convert_namespace_to_omegaconf(args)
        buffer_size = max(int(cfg.interactive.buffer_size or 1), 1)
        marks = SkippedLines(sys.stdout, reader, buffer_size)
        stream = marks
        if settings is not None:
            tokenizer, bpe = encoders.build_tokenizer(cfg.tokenizer), encoders.build_bpe(cfg.bpe)

            def decode(x):  # fairseq-interactive's decode_fn
                if bpe is not None:
                    x = bpe.decode(x)
                if tokenizer is not None:
                    x = tokenizer.decode(x)
                return x

            stream = unknown_words.ReplaceUnkOutput(marks, decode=decode, **settings)
        task_logger = logging.getLogger("fairseq.tasks.fairseq_task")
        task_logger.addHandler(marks)
        stack.callback(task_logger.removeHandler, marks)
        old_stdin, sys.stdin = sys.stdin, reader
        stack.callback(setattr, sys, "stdin", old_stdin)
        try:
            with contextlib.redirect_stdout(stream):
                distributed_utils.call_main(cfg, interactive.main)
        except Exception as e:  # fairseq raises a bare Exception for an over-long sample
            error = too_long(e, reader, buffer_size)
            if error is None:
                raise
            stream.close()
            raise error from None
        stream.close()
        if stream is not marks:
            marks.close()
    if settings is not None:
        unknown_words.report_replacements(TOOL, stream)
