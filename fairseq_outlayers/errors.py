"""User mistakes are exceptions with a one-line message that says what is wrong and what to do.

``OutlayersConfigError`` is raised by this package for a bad option or data (unknown output layer, a dictionary
that does not belong to the binarised data, a layer that needs a joined dictionary, ...), where the check is.
Called from Python, it is an ordinary ``ValueError``. Under fairseq's own CLIs (``fairseq-train --user-dir ...``)
it ends fairseq's usual traceback, whose last line is the message.

The package's own command-line entry points (``outlayers-train``/``-generate``/``-interactive``/``-validate``
and the package's tools) are wrapped with ``one_line_errors``: there a user mistake is printed as the single line
``fairseq_outlayers: error: MESSAGE`` and the exit status is 1. Two kinds count as user mistakes:

* ``OutlayersConfigError``;
* a ``FileNotFoundError`` raised while fairseq sets up the task (a missing or misspelt data directory or
  dictionary file);
* any error raised while fairseq loads a checkpoint (missing, empty, truncated, or a crafted pickle that the
  weights-only loader refused; ``checkpoint_safety.load_error_message``).

Every other exception keeps its normal traceback. Importing the package changes nothing here: no
``sys.excepthook``.
"""
import functools
import sys
import traceback

PREFIX = "fairseq_outlayers: error: "


class OutlayersConfigError(ValueError):
    """A user-facing configuration or data error; the message names the file/option and the fix."""


_TASK_SETUP_FRAMES = {"setup_task", "load_dictionary", "infer_language_pair", "load_dataset", "load_langpair_dataset"}


def explain(exc: BaseException):
    """The one-line message for a user mistake, or None for any other exception."""
    if isinstance(exc, OutlayersConfigError):
        return str(exc)
    from fairseq_outlayers.checkpoint_safety import load_error_message

    message = load_error_message(exc)  # a missing, damaged or unsafe checkpoint that fairseq was loading
    if message is not None:
        return message
    if isinstance(exc, FileNotFoundError):
        frames = {frame.f_code.co_name for frame, _ in traceback.walk_tb(exc.__traceback__)}
        if frames & _TASK_SETUP_FRAMES:
            path = getattr(exc, "filename", None) or str(exc)
            return (f"data path '{path}' does not exist: the first argument must be the --destdir written by "
                    "fairseq-preprocess (check its spelling), holding dict.*.txt and the binarised splits")
    return None


def one_line_errors(main):
    """Decorate a command-line entry point: a user mistake (``explain``) is printed as one line on stderr and
    exits with status 1; anything else propagates unchanged."""

    @functools.wraps(main)
    def entry_point(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except Exception as e:
            message = explain(e)
            if message is None:
                raise
            sys.stdout.flush()
            print(PREFIX + message, file=sys.stderr)
            sys.stderr.flush()
            raise SystemExit(1) from None

    return entry_point
