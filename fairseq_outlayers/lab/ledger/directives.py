"""The directives of a row file that name decodings and a teacher (``rows.py`` reads them): ``# decodes:``,
``# scales:`` and ``# teacher:``, and the placeholder ``@teacher`` a teacher row gives as the value of the option
that reads its vectors (the ledger puts the exported file there when the row trains: ``teacher.py``)."""
import os
import shlex
from dataclasses import dataclass
from typing import List, Optional, Tuple

from fairseq_outlayers.errors import OutlayersConfigError

#: the option value a row with ``# teacher:`` gives for its vectors, replaced by the exported file when it trains
TEACHER_VECTORS = "@teacher"


def parse_decodes(text: str) -> List[Tuple[int, Optional[float]]]:
    """``"5 5@40"`` -> [(5, None), (5, 40.0)]: beams, and beams with a continuous-output score scale."""
    out = []
    for item in text.split():
        beam, at, scale = item.partition("@")
        try:
            b, sc = int(beam), (float(scale) if at else None)
        except ValueError:
            raise ValueError(f"'{item}' is not BEAM or BEAM@SCALE (e.g. 5 or 5@40)") from None
        if b < 1 or (sc is not None and not 0 < sc < float("inf")):
            raise ValueError(f"'{item}': the beam must be >= 1 and the scale a positive number")
        out.append((b, sc))
    return out


def parse_scales(text: str) -> List[Optional[float]]:
    """``"none 10 20"`` -> [None, 10.0, 20.0]: the candidate score scales of ``# scales:``."""
    out = []
    for item in text.split():
        if item == "none":
            out.append(None)
            continue
        try:
            value = float(item)
        except ValueError:
            raise ValueError(f"'{item}' is neither 'none' nor a number") from None
        if not 0 < value < float("inf"):
            raise ValueError(f"'{item}': a scale must be a positive number")
        out.append(value)
    if not out or len(set(out)) != len(out):
        raise ValueError("give one or more different scales, e.g. 'none 10 20 40'")
    return out


@dataclass
class Teacher:
    """``# teacher: ROW [--matrix output|input] [--random-below N] [--center]``."""
    row: str
    matrix: str = "output"
    random_below: int = 0
    center: bool = False

    def vectors_name(self) -> str:
        """The exported file's name in the teacher's run directory."""
        mixed = f".random-below{self.random_below}{'.centred' if self.center else ''}" if self.random_below else ""
        return f"vectors.{self.matrix}{mixed}.vec"


def parse_teacher(text: str) -> Teacher:
    words = shlex.split(text)
    if not words or words[0].startswith("-"):
        raise ValueError("name the teacher row first, e.g. 'word-softmax' or 'word-softmax --random-below 5'")
    teacher, rest = Teacher(words[0]), iter(words[1:])
    for word in rest:
        if word == "--matrix":
            teacher.matrix = next(rest, "")
            if teacher.matrix not in ("output", "input"):
                raise ValueError("--matrix is 'output' or 'input'")
        elif word == "--random-below":
            value = next(rest, "")
            if not (value.isascii() and value.isdigit()) or int(value) < 1:
                raise ValueError("--random-below needs a count >= 1")
            teacher.random_below = int(value)
        elif word == "--center":
            teacher.center = True
        else:
            raise ValueError(f"'{word}' is not --matrix, --random-below or --center")
    if teacher.center and not teacher.random_below:
        raise ValueError("--center is for a mixed table (--random-below N); centre plain vectors with the "
                         "output layer's own option")
    return teacher


def decode_key(beam: int, scale: Optional[float]) -> str:
    """The record's key of a decode: ``"5"``, or ``"5@40"`` with a score scale."""
    return str(beam) if scale is None else f"{beam}@{scale:g}"


def check_teacher(row, path: str, found) -> None:
    """A ``# teacher:`` row gives ``@teacher`` as the value of exactly one option (the one that reads its vectors),
    and a row without one gives it nowhere; a row is not its own teacher, nor a quick row's."""
    options = row.options()
    named = [k for k, v in zip(options, options[1:]) if v == TEACHER_VECTORS]
    if row.teacher is not None:
        lineno = found["teacher"][1]
        if len(named) != 1:
            raise OutlayersConfigError(f"{path}:{lineno}: a row with '# teacher:' gives '{TEACHER_VECTORS}' as the "
                                       "value of the option that reads its vectors, once (the ledger puts the "
                                       f"teacher's exported file there); it gives it {len(named)} times")
        if row.teacher.row == row.name:
            raise OutlayersConfigError(f"{path}:{lineno}: a row cannot be its own teacher")
        if row.budget is not None:
            raise OutlayersConfigError(f"{path}:{lineno}: '# teacher:' is for a converged row (not with "
                                       "'# budget:')")
    elif named:
        raise OutlayersConfigError(f"{path}: '{named[0]} {TEACHER_VECTORS}' needs '# teacher: ROW' (the row whose "
                                   "trained model gives the vectors)")


def teacher_vectors(row, seed: int, work: str) -> str:
    """Where the ledger exports the vectors of ``row``'s teacher for ``seed``: in the teacher's run directory."""
    return os.path.join(work, f"{row.teacher.row}.seed{seed}", row.teacher.vectors_name())


def with_vectors(options: List[str], vectors: str) -> List[str]:
    """``options`` with the value ``@teacher`` replaced by the file ``vectors``."""
    return [vectors if a == TEACHER_VECTORS and k.startswith("--") else a
            for k, a in zip([""] + options[:-1], options)]
