"""Raw (untokenised) text through a trained model's own preparation: tokenise, case, BPE, binarise, detokenise.

The preparation scripts (``scripts/prepare-*.sh``) tokenise with sacremoses (XML characters escaped), lowercase
when asked, apply fastBPE and binarise with ``fairseq-preprocess``. They leave in the data directory what is
needed to do the same to new text: ``.done`` (``lowercase: 0|1``) and the BPE codes, ``bpecodes`` (joint BPE:
source and target are BPE'd) or ``bpecodes.SRC`` (source-side BPE, word-level targets). ``Preparation.from_data``
reads them; a data directory without codes (e.g. the tests' synthetic corpora) means no BPE.

* ``Preparation.source(lines)``: raw source sentences -> the token sequences the model was trained on;
* ``binarise(prep, src_lines, tgt_lines, data, dest)``: a data directory whose ``test`` split holds them, with
  the training dictionaries (target optional: ``--only-source``);
* ``Preparation.detokenise(lines)``: fairseq-generate's output (BPE removed) -> plain text.

Every problem with the user's text is one line naming the file and line and what to do (``OutlayersConfigError``).
"""
import os
import shutil
import sys
from dataclasses import dataclass
from typing import List, Optional

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.textfiles import read_lines


def read_text(path: str, what: str) -> List[str]:
    """The lines of a UTF-8 text file (no line-break characters); errors name the file and line."""
    if not os.path.isfile(path):
        raise OutlayersConfigError(f"{what} '{path}' does not exist; give a plain UTF-8 text file, one sentence "
                                   "per line")
    lines = read_lines(path, "re-encode it as UTF-8 (e.g. iconv -t utf-8)", what,
                       unreadable="give a plain UTF-8 text file, one sentence per line", strip_cr=True)
    if not lines:
        raise OutlayersConfigError(f"{what} '{path}' is empty; give one sentence per line")
    return lines


def data_languages(data: str):
    """(source, target) of a fairseq-preprocess directory, from its ``train.SRC-TGT.SRC.idx`` (or any split)."""
    for name in sorted(os.listdir(data)):
        parts = name.split(".")
        if len(parts) == 4 and parts[-1] == "idx" and "-" in parts[1]:
            src, tgt = parts[1].split("-", 1)
            if parts[2] == src:
                return src, tgt
    raise OutlayersConfigError(f"'{data}' holds no binarised split (SPLIT.SRC-TGT.SRC.idx); give the data "
                               "directory the model was trained on (fairseq-preprocess --destdir)")


@dataclass
class Preparation:
    src: str
    tgt: str
    lowercase: bool
    bpe_codes: Optional[str]  #: applied to the source
    target_bpe: bool  #: the target side was BPE'd too (joint codes)

    @classmethod
    def from_data(cls, data: str, src: Optional[str] = None, tgt: Optional[str] = None,
                  lowercase: Optional[bool] = None) -> "Preparation":
        if not os.path.isdir(data):
            raise OutlayersConfigError(f"data directory '{data}' does not exist; give the fairseq-preprocess "
                                       "directory the model was trained on")
        if src is None or tgt is None:
            src, tgt = data_languages(data)
        if lowercase is None:
            lowercase = False
            done = os.path.join(data, ".done")
            if os.path.isfile(done):
                for line in open(done, encoding="utf-8"):
                    if line.startswith("lowercase:"):
                        lowercase = line.split(":", 1)[1].strip() == "1"
        joint, source_only = os.path.join(data, "bpecodes"), os.path.join(data, f"bpecodes.{src}")
        codes = joint if os.path.isfile(joint) else source_only if os.path.isfile(source_only) else None
        return cls(src, tgt, lowercase, codes, codes == joint)

    def describe(self) -> str:
        bpe = (f"BPE {self.bpe_codes} ({'source and target' if self.target_bpe else 'source only'})"
               if self.bpe_codes else "no BPE")
        return f"sacremoses tokenisation ({self.src}), {'lowercased' if self.lowercase else 'cased'}, {bpe}"

    def tokenise(self, lines: List[str], lang: str) -> List[str]:
        """Moses tokenisation as ``tools/corpus_tools.py tokenize`` does it (escaped), then the case."""
        from sacremoses import MosesTokenizer

        tok = MosesTokenizer(lang=lang)
        out = [tok.tokenize(line, return_str=True, escape=True) for line in lines]
        return [x.lower() for x in out] if self.lowercase else out

    def _bpe(self, lines: List[str]) -> List[str]:
        if not self.bpe_codes:
            return lines
        import fastBPE

        sys.stdout.flush()
        saved = os.dup(1)  # fastBPE prints "Loading codes ..." on the C++ stdout: keep it off ours
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.close(devnull)
            bpe = fastBPE.fastBPE(self.bpe_codes)
            return bpe.apply(lines)
        finally:
            os.dup2(saved, 1)
            os.close(saved)

    def source(self, lines: List[str]) -> List[str]:
        return self._bpe(self.tokenise(lines, self.src))

    def target(self, lines: List[str]) -> List[str]:
        tokens = self.tokenise(lines, self.tgt)
        return self._bpe(tokens) if self.target_bpe else tokens

    def detokenise(self, lines: List[str]) -> List[str]:
        from sacremoses import MosesDetokenizer

        detok = MosesDetokenizer(lang=self.tgt)
        return [detok.detokenize(h.split()) for h in lines]


def _write_lines(path: str, lines: List[str]):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(x + "\n" for x in lines))


def binarise(prep: Preparation, src_lines: List[str], tgt_lines: Optional[List[str]], data: str, dest: str) -> str:
    """``dest``: a data directory whose ``test`` split is the prepared text, with ``data``'s dictionaries."""
    from fairseq_outlayers.tools import commands

    os.makedirs(dest, exist_ok=True)
    prefix = os.path.join(dest, "text")
    _write_lines(f"{prefix}.{prep.src}", prep.source(src_lines))
    cmd = [commands.executable("fairseq-preprocess"), "--source-lang", prep.src, "--target-lang", prep.tgt, "--testpref", prefix,
           "--destdir", dest, "--workers", "1", "--srcdict", os.path.join(data, f"dict.{prep.src}.txt")]
    if tgt_lines is None:
        cmd.append("--only-source")
    else:
        _write_lines(f"{prefix}.{prep.tgt}", prep.target(tgt_lines))
        cmd += ["--tgtdict", os.path.join(data, f"dict.{prep.tgt}.txt")]
    proc = commands.run(cmd)
    if proc.returncode != 0:
        raise OutlayersConfigError(f"fairseq-preprocess failed on the prepared text in {dest}: "
                                   f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}")
    if tgt_lines is None:  # fairseq-generate loads both dictionaries
        shutil.copyfile(os.path.join(data, f"dict.{prep.tgt}.txt"), os.path.join(dest, f"dict.{prep.tgt}.txt"))
    return dest
