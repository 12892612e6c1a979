"""User mistakes are printed as one line that says what is wrong and what to do, not as a traceback.

fairseq lets exceptions from task setup and model building escape as stack traces. Two kinds are rewritten by
the hook installed when the plugin is imported (the main process of fairseq-train/-generate/...):

* ``OutlayersConfigError``: raised by this package for a bad option or data (unknown output layer, a dictionary
  that does not belong to the binarised data, a layer that needs a joined dictionary, ...);
* a ``FileNotFoundError`` raised while fairseq sets up the task (a missing or misspelt data directory or
  dictionary file).

Every other exception keeps its normal traceback.
"""
import sys
import traceback


class OutlayersConfigError(ValueError):
    """A user-facing configuration or data error; the message names the file/option and the fix."""


_previous_hook = None
_TASK_SETUP_FRAMES = {"setup_task", "load_dictionary", "infer_language_pair", "load_dataset", "load_langpair_dataset"}


def explain(exc_type, exc, tb):
    """The one-line message for a user mistake, or None for any other exception."""
    if issubclass(exc_type, OutlayersConfigError):
        return str(exc)
    if issubclass(exc_type, FileNotFoundError):
        frames = {frame.f_code.co_name for frame, _ in traceback.walk_tb(tb)}
        if frames & _TASK_SETUP_FRAMES:
            path = getattr(exc, "filename", None) or str(exc)
            return (f"data path '{path}' does not exist: the first argument must be the --destdir written by "
                    "fairseq-preprocess (check its spelling), holding dict.*.txt and the binarised splits")
    return None


def _hook(exc_type, exc, tb):
    message = explain(exc_type, exc, tb)
    if message is None:
        _previous_hook(exc_type, exc, tb)
    else:
        print(f"fairseq_outlayers: error: {message}", file=sys.stderr)
        sys.stderr.flush()


def install_excepthook():
    global _previous_hook
    if _previous_hook is None:
        _previous_hook = sys.excepthook
        sys.excepthook = _hook
