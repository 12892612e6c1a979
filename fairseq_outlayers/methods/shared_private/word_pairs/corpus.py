"""Reading the inputs of the pairing tool: a parallel corpus and two fairseq dictionaries.

Every problem a user can cause here (a missing file, line counts that differ, bytes that are not UTF-8, a
token that would break fast_align's ``src ||| tgt`` format) is reported as an ``OutlayersConfigError`` that
names the file and the line.
"""
import os
import re
from typing import Iterator, List, Set, Tuple

from fairseq_outlayers.core.fingerprints import dictionary_hash  # noqa: F401  (the hash a pairing file records)
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.textfiles import decode_line, text_lines

_MADEUP = re.compile(r"^madeupword\d+$")
#: what to do about a corpus line that is not UTF-8
REENCODE_CORPUS = "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8) before pairing"


def _open_text(path: str, what: str):
    if not os.path.isfile(path):
        raise OutlayersConfigError(f"{what} '{path}' does not exist; pass the path of an existing file")
    return open(path, "rb")


def read_parallel(src_path: str, tgt_path: str) -> Iterator[Tuple[List[str], List[str]]]:
    """Yield (source tokens, target tokens) per line of two line-aligned, whitespace-tokenised files."""
    with _open_text(src_path, "source text") as fs, _open_text(tgt_path, "target text") as ft:
        lineno = 0
        while True:
            a, b = fs.readline(), ft.readline()
            lineno += 1
            if not a and not b:
                return
            if not a or not b:
                shorter, longer = (src_path, tgt_path) if not a else (tgt_path, src_path)
                raise OutlayersConfigError(
                    f"the parallel corpus is not line-aligned: '{shorter}' ends at line {lineno - 1} but "
                    f"'{longer}' has more lines; pass the source and target sides of the same training set"
                )
            src = decode_line(a, src_path, lineno, REENCODE_CORPUS).split()
            tgt = decode_line(b, tgt_path, lineno, REENCODE_CORPUS).split()
            for toks, path in ((src, src_path), (tgt, tgt_path)):
                if "|||" in toks:
                    raise OutlayersConfigError(
                        f"{path}:{lineno}: the token '|||' is fast_align's field separator; replace it in the "
                        "text (and the dictionary) before pairing"
                    )
            yield src, tgt


def load_dictionary(path: str):
    """A fairseq ``Dictionary`` from ``dict.xx.txt`` (as written by fairseq-preprocess)."""
    from fairseq.data import Dictionary

    if not os.path.isfile(path):
        raise OutlayersConfigError(f"dictionary '{path}' does not exist; pass the dict.<lang>.txt that "
                                   "fairseq-preprocess wrote into the data-bin directory")
    try:
        for _ in text_lines(path, "pass the dict.<lang>.txt that fairseq-preprocess wrote", "dictionary"):
            pass
    except OSError as e:
        raise OutlayersConfigError(f"dictionary '{path}' cannot be read ({e.strerror})") from None
    try:
        return Dictionary.load(path)
    except Exception as e:  # fairseq raises ValueError, RuntimeError or a bare Exception for a malformed file
        reason = " ".join(str(e).split())[:200]
        raise OutlayersConfigError(f"dictionary '{path}' cannot be read as a fairseq dictionary ('token count' per "
                                   f"line): {reason}; pass the dict.<lang>.txt that fairseq-preprocess wrote") from None


def special_indices(dictionary) -> Set[int]:
    """Indices never shared: fairseq's special symbols (bos, pad, eos, unk, extra specials) and the
    ``madeupwordNNNN`` fillers that ``--padding-factor`` appends."""
    specials = set(range(dictionary.nspecial))
    specials.update({dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()})
    specials.update(i for i, s in enumerate(dictionary.symbols) if _MADEUP.match(s))
    return specials


def text_coverage(path: str, dictionaries, max_lines: int = 10000) -> List[float]:
    """For each dictionary, the fraction of the tokens of the first ``max_lines`` lines of ``path`` it holds
    (bytes that are not UTF-8 are left to ``read_parallel``, which names the line)."""
    known, total = [0] * len(dictionaries), 0
    with _open_text(path, "text") as f:
        for lineno, raw in enumerate(f, 1):
            if lineno > max_lines:
                break
            toks = raw.decode("utf-8", errors="replace").split()
            total += len(toks)
            for k, d in enumerate(dictionaries):
                known[k] += sum(1 for t in toks if t in d.indices)
    return [k / total if total else 1.0 for k in known]


def coverage_warnings(src_text: str, tgt_text: str, src_dict, tgt_dict, src_dict_path: str, tgt_dict_path: str,
                      min_fraction: float = 0.5, max_lines: int = 10000) -> List[str]:
    """Warnings when the text is not in the dictionaries' units or its sides are swapped (then almost no word
    can be paired by meaning): checked on the first ``max_lines`` lines, before any aligning."""
    src_own, src_other = text_coverage(src_text, [src_dict, tgt_dict], max_lines)
    tgt_own, tgt_other = text_coverage(tgt_text, [tgt_dict, src_dict], max_lines)
    out = []
    if src_own < min_fraction and tgt_own < min_fraction and src_other > src_own and tgt_other > tgt_own:
        out.append(f"source and target look swapped: {100 * src_other:.1f}% of the tokens of '{src_text}' are in "
                   f"the target dictionary '{tgt_dict_path}' but {100 * src_own:.1f}% in the source dictionary "
                   f"'{src_dict_path}'; pass --src-text/--tgt-text in the order of --src-dict/--tgt-dict")
        return out
    for text, own, dict_path, side in ((src_text, src_own, src_dict_path, "source"),
                                       (tgt_text, tgt_own, tgt_dict_path, "target")):
        if own < min_fraction:
            out.append(f"only {100 * own:.1f}% of the tokens of the {side} text '{text}' are in '{dict_path}' "
                       f"(first {max_lines} lines): the text must be the training text exactly as fairseq-preprocess "
                       "read it (same tokenisation and BPE), else few words are paired by meaning")
    return out
