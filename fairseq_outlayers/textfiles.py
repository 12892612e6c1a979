"""Reading the UTF-8 text files a user gives (corpora, references, lexicons, pairings, ledger rows and records):
one place that turns bytes into text, so a file that is not UTF-8 is always one line naming the file, the line and
the fix (an ``OutlayersConfigError``): ``FILE:N: [WHAT is ]not valid UTF-8 (byte b'\\xe9'); FIX``.

* ``read_text(path, fix, what, unreadable)``: a whole file (gunzipped when its name ends in ``.gz``);
* ``read_lines(...)``: the same as a list of lines without line ends (``split_lines``);
* ``text_lines(path, fix, what)``: (line number, line with its end) one line at a time, for files too large to
  hold (corpora, vector files);
* ``decode_line(raw, path, lineno, fix, what)`` / ``decode_text(data, path, fix, what)``: bytes already read.

``fix`` says what to do about bytes that are not UTF-8 (``REENCODE`` by default); ``unreadable`` what to do about a
file that cannot be read or is not a complete gzip file (``fix`` by default). ``what`` names the file's role (an
option such as ``--hyp``), said before "is not valid UTF-8".
"""
import gzip
import zlib
from typing import Iterator, List, Optional, Tuple

from fairseq_outlayers.errors import OutlayersConfigError

REENCODE = "re-encode it as UTF-8 (e.g. iconv -f latin1 -t utf-8)"


def not_utf8(path: str, lineno: int, byte: bytes, fix: str = REENCODE, what: str = "") -> OutlayersConfigError:
    """The one-line error for line ``lineno`` of ``path`` that holds ``byte``, not UTF-8."""
    subject = f"{what} is not" if what else "not"
    return OutlayersConfigError(f"{path}:{lineno}: {subject} valid UTF-8 (byte {byte!r}); {fix}")


def decode_line(raw: bytes, path: str, lineno: int, fix: str = REENCODE, what: str = "") -> str:
    """Line ``lineno`` of ``path`` (bytes) as text; ``not_utf8`` when it is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise not_utf8(path, lineno, raw[e.start:e.start + 1], fix, what) from None


def decode_text(data: bytes, path: str, fix: str = REENCODE, what: str = "") -> str:
    """The content of ``path`` (bytes) as text; ``not_utf8`` naming the line of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise not_utf8(path, data.count(b"\n", 0, e.start) + 1, data[e.start:e.start + 1], fix, what) from None


def read_text(path: str, fix: str = REENCODE, what: str = "", unreadable: Optional[str] = None) -> str:
    """The text of ``path`` (gunzipped when the name ends in ``.gz``); a file that cannot be read, is not a complete
    gzip file or is not UTF-8 is one line naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise OutlayersConfigError(f"{path}: cannot be read ({e.strerror}); {unreadable or fix}") from None
    if path.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise OutlayersConfigError(f"{path}: {what or 'the file'} is not a complete gzip file ({e}); "
                                       f"{unreadable or fix}") from None
    return decode_text(data, path, fix, what)


def split_lines(text: str, strip_cr: bool = False) -> List[str]:
    """The lines of a text without their ends: split at ``\\n`` only (U+2028, ``\\x0c`` and the like inside a
    sentence are not line breaks), a last empty line left out; ``strip_cr`` also drops a ``\\r`` before it."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [x[:-1] if x.endswith("\r") else x for x in lines] if strip_cr else lines


def read_lines(path: str, fix: str = REENCODE, what: str = "", unreadable: Optional[str] = None,
               strip_cr: bool = False) -> List[str]:
    """``split_lines`` of ``read_text``."""
    return split_lines(read_text(path, fix, what, unreadable), strip_cr)


def text_lines(path: str, fix: str = REENCODE, what: str = "") -> Iterator[Tuple[int, str]]:
    """(line number from 1, the line with its end) of ``path``, read one line at a time; ``not_utf8`` at the first
    line that is not UTF-8. Opening the file is the caller's concern (an ``OSError`` is not caught)."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            yield lineno, decode_line(raw, path, lineno, fix, what)
