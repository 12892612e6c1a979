"""Writing the files a user asked for: checked before any work starts, written atomically, never clobbered.

* ``check_output_path(path, force, inputs, option)``: before the expensive part of a command, fail with one line
  (an ``OutlayersConfigError``) when the output's directory is missing or not writable, when the path is a
  directory, when it names one of the command's input files (refused even with ``--force``), or when it exists
  and ``--force`` was not given. An input that is a directory (a data directory, a ledger) stands for every
  file under it, so the dictionaries, binaries and records a command reads without naming them are never
  written over; ``rewritable(path)`` may allow an existing file the command itself wrote before (a render).
* ``check_writable_dir(path, option)``: a directory a command writes into, created and probed before any work.
* ``check_work_dir(path, force, inputs, option)``: a directory a command writes its intermediate files into
  (``--keep-work``): new or empty, or with ``--force`` one that holds none of the command's inputs.
* ``removed_on_termination()``: a context manager under which SIGTERM (and SIGHUP) raise ``SystemExit``, so the
  ``finally`` blocks and ``TemporaryDirectory`` context managers of a killed command still remove its temporary
  directories (SIGKILL cannot be caught).
* ``atomic_write(path)``: a context manager giving a file object on a temporary file in the same directory; on
  success it is renamed over ``path`` (``os.replace``, atomic on POSIX), on any error it is removed, so ``path``
  holds either the old file or the complete new one, never a half-written one. A write that fails for want of
  space (disk full, quota, file too large, read-only or failing disk) is an ``OutlayersConfigError`` that says
  the old file is left as it was.
"""
import contextlib
import errno
import os
import signal
import tempfile
import threading
from typing import Callable, Iterable, Optional

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


def _inside(path: str, directory: str) -> bool:
    """``path`` is ``directory`` itself or lies somewhere under it (symbolic links resolved)."""
    real, top = os.path.realpath(path), os.path.realpath(directory)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def is_input(path: str, inputs: Iterable[Optional[str]]) -> Optional[str]:
    """The input ``path`` would overwrite (an input file itself, or an existing file under an input directory),
    else None."""
    for given in inputs:
        if not given or not os.path.exists(given):
            continue
        if os.path.isdir(given):
            if os.path.lexists(path) and not os.path.isdir(path) and _inside(path, given):
                return given
        elif _same_file(path, given):
            return given
    return None


def check_output_path(path: str, force: bool = False, inputs: Iterable[Optional[str]] = (), option: str = "-o",
                      rewritable: Optional[Callable[[str], bool]] = None):
    """Refuse an output path that cannot or must not be written (see the module docstring). ``inputs``: every
    file the command reads, named on its command line or not (a directory stands for every file under it);
    ``rewritable(path)``: True for an existing file that the command may replace without ``--force`` (one it
    wrote itself before, recognisably)."""
    if not path:
        raise OutlayersConfigError(f"{option} needs a file name")
    if os.path.isdir(path):
        raise OutlayersConfigError(f"{option} '{path}' is a directory; give a file name")
    inputs = list(inputs)
    given = is_input(path, inputs)
    if given is not None:
        what = f"'{given}'" if not os.path.isdir(given) else f"a file of '{given}', which it reads"
        raise OutlayersConfigError(f"{option} '{path}' is also an input of this command ({what}); choose "
                                   "another output path (--force never overwrites an input)")
    check_output_dir(path, option)
    if os.path.lexists(path) and not force and not (rewritable is not None and rewritable(path)):
        raise OutlayersConfigError(f"{option} '{path}' exists; choose another path or pass --force to overwrite it")


def check_writable_dir(path: str, option: str):
    """A directory a command will write files into (created when missing): an error now, before any work, when it
    cannot be created or written."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise OutlayersConfigError(f"{option} '{path}' exists and is not a directory; give a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise OutlayersConfigError(f"{option} '{path}': cannot create it ({e.strerror}); choose another "
                                   "directory") from None
    check_output_dir(os.path.join(path, "probe"), option)


def check_work_dir(path: str, force: bool = False, inputs: Iterable[Optional[str]] = (), option: str = "--keep-work"):
    """A directory for a command's intermediate files: new or empty; with ``force`` an existing one too, unless
    it holds (or is) one of the command's inputs. Created here."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise OutlayersConfigError(f"{option} '{path}' exists and is not a directory; give a new directory")
    if os.path.isdir(path) and os.listdir(path):
        if not force:
            raise OutlayersConfigError(f"{option} '{path}' is not empty; give a new or empty directory, or pass "
                                       "--force to write over the work files in it")
        for given in inputs:
            if given and os.path.exists(given) and (_inside(given, path) or _inside(path, given)):
                raise OutlayersConfigError(f"{option} '{path}' holds an input of this command ('{given}'); give "
                                           "a new or empty directory (--force never writes among the inputs)")
    check_writable_dir(path, option)


#: errors of a write that failed for want of space or a writable disk, not because of what was written
DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def removed_on_termination(signals=(signal.SIGTERM, signal.SIGHUP)):
    """Within the block SIGTERM/SIGHUP raise ``SystemExit(128 + signal)`` (the shell's exit status of a killed
    command), so cleanup in ``finally`` blocks and context managers runs; a signal that is ignored or handled
    already is left alone. Only the main thread can set a signal
    handler; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # a signal the caller ignores (nohup: SIGHUP) or handles itself stays as it is
    previous = {s: signal.signal(s, _terminate) for s in signals if signal.getsignal(s) == signal.SIG_DFL}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


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
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno in DISK_ERRORS:
            kept = "left as it was" if os.path.exists(path) else "not written"
            raise OutlayersConfigError(f"could not write '{path}' ({e.strerror or e}); it is {kept}: free space in "
                                       f"'{directory}' (or choose another path) and run again") from e
        raise


def write_text(path: str, text: str):
    """Write a whole text file atomically."""
    with atomic_write(path) as f:
        f.write(text)
