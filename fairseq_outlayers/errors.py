"""One exception type for user mistakes, printed as a single line instead of a traceback.

fairseq lets exceptions from model building escape as stack traces. A mistake in the user's options or data
(an unknown output layer, dictionaries that do not match the binarised data, ...) deserves one line that says
what is wrong and what to do; ``install_excepthook`` arranges that for this exception type only.
"""
import sys


class OutlayersConfigError(ValueError):
    """A user-facing configuration or data error; the message names the file/option and the fix."""


_previous_hook = None


def _hook(exc_type, exc, tb):
    if issubclass(exc_type, OutlayersConfigError):
        print(f"fairseq_outlayers: error: {exc}", file=sys.stderr)
        return
    _previous_hook(exc_type, exc, tb)


def install_excepthook():
    global _previous_hook
    if _previous_hook is None:
        _previous_hook = sys.excepthook
        sys.excepthook = _hook
