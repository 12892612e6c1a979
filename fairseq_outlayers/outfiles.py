"""Writing the files a user asked for: checked before any work starts, written atomically, never clobbered.

* ``check_output_path(path, force, inputs, option)``: before the expensive part of a command, fail with one line
  (an ``OutlayersConfigError``) when the output's directory is missing or not writable, when the path is a
  directory, when it names one of the command's input files (refused even with ``--force``), or when it exists
  and ``--force`` was not given.
* ``atomic_write(path)``: a context manager giving a file object on a temporary file in the same directory; on
  success it is renamed over ``path`` (``os.replace``, atomic on POSIX), on any error it is removed, so ``path``
  holds either the old file or the complete new one, never a half-written one.
"""
import contextlib
import os
import tempfile
from typing import Iterable, Optional

from fairseq_outlayers.errors import OutlayersConfigError


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output_dir(path: str, option: str = "-o"):
    """The directory that will hold ``path`` exists and a file can be created in it."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        what = "is not a directory" if os.path.exists(directory) else "does not exist"
        raise OutlayersConfigError(f"{option} '{path}': directory '{directory}' {what}; create it (mkdir -p) or "
                                   "choose another path")
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".outlayers-probe-")
    except OSError as e:
        raise OutlayersConfigError(f"{option} '{path}': cannot create a file in '{directory}' ({e.strerror}); "
                                   "choose a writable directory") from None
    os.close(fd)
    os.unlink(probe)


def check_output_path(path: str, force: bool = False, inputs: Iterable[Optional[str]] = (), option: str = "-o"):
    """Refuse an output path that cannot or must not be written (see the module docstring)."""
    if not path:
        raise OutlayersConfigError(f"{option} needs a file name")
    if os.path.isdir(path):
        raise OutlayersConfigError(f"{option} '{path}' is a directory; give a file name")
    for given in inputs:
        if given and os.path.exists(given) and _same_file(path, given):
            raise OutlayersConfigError(f"{option} '{path}' is also an input of this command ('{given}'); choose "
                                       "another output path (--force never overwrites an input)")
    check_output_dir(path, option)
    if os.path.lexists(path) and not force:
        raise OutlayersConfigError(f"{option} '{path}' exists; choose another path or pass --force to overwrite it")


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", encoding: Optional[str] = "utf-8"):
    """``with atomic_write(path) as f: f.write(...)``: ``path`` appears complete or not at all."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(path):  # keep the old file's permissions
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(path: str, text: str):
    """Write a whole text file atomically."""
    with atomic_write(path) as f:
        f.write(text)
