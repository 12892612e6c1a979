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
* ``atomic_copy(src, dst)``: a file copied the same way (temporary file, fsync, rename).
* ``atomic_dir(out, option)``: a context manager giving a new empty directory beside ``out`` to fill; on success it
  takes the place of ``out`` (an existing ``out`` is replaced: both swapped in one step where the system can, else
  the old one renamed aside first), so ``out`` is at every instant the old directory or the complete new one. The
  hidden folder it works in (``.outlayers-NAME-*``) is removed; a run killed with SIGKILL, or an old ``out`` that
  cannot be removed, leaves it, and ``check_leftovers(out, option)`` names it on the next run with what to do.
* ``user_mode(directory)``: the mode a new file or directory gets from the user's umask; every output gets it.
"""
import contextlib
import ctypes
import errno
import os
import re
import shutil
import signal
import tempfile
import threading
from typing import Callable, Iterable, List, Optional

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


def user_mode(directory: bool = False) -> int:
    """The mode that a new directory (or file) gets from the user's umask, as ``mkdir`` (or ``touch``) gives it."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


def _publish(tmp: str, path: str):
    """Rename the complete, flushed file ``tmp`` over ``path``, with the old file's mode or the user's usual one."""
    if os.path.exists(path):
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
    else:
        os.chmod(tmp, user_mode())
    os.replace(tmp, path)


def _disk_error(e: BaseException, path: str, what: str) -> Optional[OutlayersConfigError]:
    """The one line for a write to ``path`` that failed for want of space or a writable disk, else None."""
    if isinstance(e, OSError) and e.errno in DISK_ERRORS:
        directory = os.path.dirname(os.path.abspath(path))
        return OutlayersConfigError(f"could not write '{path}' ({e.strerror or e}); {what}: free space in "
                                    f"'{directory}' (or choose another path) and run again")
    return None


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
        _publish(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        error = _disk_error(e, path, "it is " + ("left as it was" if os.path.exists(path) else "not written"))
        if error is not None:
            raise error from e
        raise


def atomic_copy(src: str, dst: str):
    """Copy ``src`` to ``dst`` atomically (``dst`` keeps its old content when the copy fails, e.g. disk full). Errors
    are raised as they come (a caller may report a full disk its own way)."""
    directory = os.path.dirname(os.path.abspath(dst))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(dst) + ".", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        _publish(tmp, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# -- a directory replaced in one step -------------------------------------------------------------------------
#: renameat2's flag that swaps two paths in one step (Linux 3.15+, on most local file systems)
_RENAME_EXCHANGE = 2


def _exchange(a: str, b: str) -> bool:
    """Swap the paths ``a`` and ``b`` in one step; False where the system or file system cannot."""
    try:
        rename = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_cwd = -100  # AT_FDCWD
    if rename(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), b)


def staging_prefix(out: str) -> str:
    """The name that the hidden work folders of ``out`` start with, beside it."""
    return f".outlayers-{os.path.basename(os.path.abspath(out))}-"


def leftovers(out: str) -> List[str]:
    """The work folders of ``out`` that an interrupted or incomplete replacement left beside it, sorted."""
    parent = os.path.dirname(os.path.abspath(out))
    prefix = staging_prefix(out)
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    # the prefix and mkdtemp's 8 characters: not the folders of another OUT whose name extends this one's
    ours = re.compile(re.escape(prefix) + r"[a-z0-9_]{8}")
    return sorted(os.path.join(parent, n) for n in names
                  if ours.fullmatch(n) and os.path.isdir(os.path.join(parent, n))
                  and not os.path.islink(os.path.join(parent, n)))


def check_leftovers(out: str, option: str = "OUT"):
    """One line naming a folder that an earlier write of ``out`` left, and what to do with it."""
    found = leftovers(out)
    if not found:
        return
    folder = found[0]
    old, new = os.path.join(folder, "old"), os.path.join(folder, "new")
    if os.path.isdir(old) and not os.path.lexists(out):
        raise OutlayersConfigError(f"{option} '{out}' is missing and its previous version is in '{old}' (an earlier "
                                   f"replacement was interrupted): move it back (mv '{old}' '{out}') or remove "
                                   f"'{folder}', then run again")
    if os.path.isdir(old):
        what = f"holds the previous version of {option} '{out}', which could not be removed"
    elif os.path.isdir(new):
        what = f"holds an unfinished write of {option} '{out}' (a run was interrupted, or is still running)"
    else:
        what = f"is a work folder of {option} '{out}' that a run left"
    raise OutlayersConfigError(f"'{folder}' {what}: remove it (rm -r '{folder}') and run again")


@contextlib.contextmanager
def atomic_dir(out: str, option: str = "OUT", notes: Optional[List[str]] = None):
    """``with atomic_dir(out) as new: ...write files in new...``: ``out`` becomes the complete ``new`` when the block
    ends without error, replacing an existing ``out`` (the caller decides whether it may: ``--force``); on any
    error nothing is left, and an existing ``out`` is as it was. ``notes`` receives a sentence when the old ``out``
    could not be removed after the swap (it stays in the hidden work folder, which the next run names)."""
    parent = os.path.dirname(os.path.abspath(out))
    made = []  # the missing directories above OUT, deepest first, made here and removed again on failure
    top = parent
    while not os.path.isdir(top):
        made.append(top)
        top = os.path.dirname(top)
    existed = os.path.lexists(out)
    staging = None
    published = False
    try:
        with removed_on_termination():
            for directory in reversed(made):
                os.mkdir(directory)
            staging = tempfile.mkdtemp(prefix=staging_prefix(out), dir=parent)
            new, old = os.path.join(staging, "new"), os.path.join(staging, "old")
            os.mkdir(new)  # the umask's mode, as mkdir gives it (mkdtemp's folder is the user's only)
            yield new
            _sync_tree(new)
            if existed and _exchange(new, out):  # OUT is the new directory in one step; the old one is at new
                published = True
                with contextlib.suppress(OSError):
                    os.rename(new, old)
            elif existed:  # rename aside, then in: the old one stays in the work folder until the new one is in place
                os.rename(out, old)
                os.rename(new, out)
                published = True
            else:
                os.rename(new, out)
                published = True
            _sync_dir(parent)
    except BaseException as e:
        if not published:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            for directory in made:
                with contextlib.suppress(OSError):
                    os.rmdir(directory)
        kept = f"{option} is not written" + (", the old one is left as it was" if existed else "")
        error = _disk_error(e, out, kept)
        if error is None and isinstance(e, OSError) and not published:
            error = OutlayersConfigError(f"could not write {option} '{out}' ({e.strerror or e}); {kept}: check the "
                                         f"permissions of '{out if existed else parent}' (chmod, chattr -i) or "
                                         "choose another path")
        if error is not None:
            raise error from e
        raise
    finally:
        if staging is not None and os.path.isdir(staging):
            shutil.rmtree(staging, ignore_errors=True)
            if os.path.isdir(staging) and published and notes is not None:
                notes.append(f"the previous {option} could not be removed: it is in "
                             f"'{os.path.join(staging, 'old')}'; remove it (rm -r '{staging}')")


def _sync_dir(path: str):
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _sync_tree(top: str):
    """Every file and directory under ``top`` flushed to the disk, so that the rename publishes complete files."""
    for root, _dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path):
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _sync_dir(root)


def write_text(path: str, text: str):
    """Write a whole text file atomically."""
    with atomic_write(path) as f:
        f.write(text)
