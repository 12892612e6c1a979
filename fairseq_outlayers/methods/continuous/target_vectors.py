"""Target word vectors for continuous outputs (Kumar & Tsvetkov 2019): read, unit-normalise, align to the fairseq
target dictionary, and report coverage.

Formats: word2vec/fastText text (``.vec``/``.txt``: an optional ``COUNT DIM`` header, then ``word v1 ... vDIM``
per line); word2vec binary and fastText ``.bin`` models through ``gensim`` when it is installed (a fastText model
also gives vectors to dictionary words it never saw, from their character n-grams).

Every vector is divided by its L2 norm. What each dictionary entry gets:

* a word with a vector in the file: that vector;
* ``<unk>``: the file's own ``<unk>`` vector if it has one, else the paper's rule -- the normalised mean of the
  (unit) vectors of all file words that are *not* in the dictionary; if there are none, a fixed pseudo-random
  unit vector;
* ``</s>`` and ``<s>``: the file's vector for that symbol if present (word2vec writes one for ``</s>``), else a
  fixed pseudo-random unit vector (seeded, so every run and every machine gets the same one);
* ``<pad>``: the zero vector; fairseq's filler words ``madeupwordNNNN``: fixed pseudo-random unit vectors;
* any other dictionary word without a vector: ``<unk>``'s vector (as the paper maps such words to ``<unk>``).

With ``center=True`` (``--target-vectors-center``) the unit vectors of the dictionary words are then centred: their
mean is subtracted from every vector taken from the file (and from ``<unk>``'s mean) before normalising again.
Word vectors trained on a small corpus share one dominant direction (on Multi30k English the mean of the unit
vectors has norm 0.82, and a random pair of words has cosine 0.68); the rarest words sit closest to it, so an
uncertain prediction lands on them. Centring removes that direction (random pairs: cosine 0.00), an instance of
the post-processing of Mu & Viswanath (2018, "All-but-the-top"); the paper's vectors are used as they are, so
it is off by default.

Padding, ``<s>``, the fillers and the words that borrowed ``<unk>``'s vector are marked *not decodable*: decoding
never outputs them (it outputs ``<unk>`` instead). Coverage = words with their own vector / dictionary words
(specials and fillers excluded); below ``min_coverage`` loading fails with a message naming the file.

The command line (``outlayers-vectors report|random|export``) is ``fairseq_outlayers.tools.vectors``.
"""
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np
import torch

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.textfiles import text_lines
from fairseq_outlayers.value_checks import FROZEN_BYTES, check_fits

logger = logging.getLogger(__name__)

FILLER = re.compile(r"^madeupword\d{4}$")
#: seed of the fixed pseudo-random vectors given to special symbols without a vector in the file
SPECIAL_SEED = 20190506
FASTTEXT_MAGIC = 793712314


@dataclass
class VectorReport:
    path: str
    dim: int
    file_words: int
    dictionary_size: int
    eligible: int  # dictionary words (specials and fillers excluded)
    covered: int
    missing: List[str] = field(default_factory=list)
    specials: Dict[str, str] = field(default_factory=dict)
    zero_vectors: int = 0
    duplicates: int = 0
    warnings: List[str] = field(default_factory=list)

    @property
    def coverage(self) -> float:
        return self.covered / self.eligible if self.eligible else 1.0

    def lines(self) -> List[str]:
        out = [f"warning: {w}" for w in self.warnings]
        out += [f"target vectors {self.path}: m = {self.dim}, {self.file_words:,d} vectors in the file",
               f"coverage: {self.covered:,d} of {self.eligible:,d} dictionary words have a vector "
               f"({100 * self.coverage:.2f}%)"]
        for symbol, what in self.specials.items():
            out.append(f"{symbol}: {what}")
        if self.missing:
            shown = ", ".join(self.missing[:20]) + (" ..." if len(self.missing) > 20 else "")
            out.append(f"{len(self.missing):,d} dictionary words without a vector share <unk>'s vector and are "
                       f"never generated: {shown}")
        if self.zero_vectors:
            out.append(f"{self.zero_vectors:,d} zero vectors in the file were ignored")
        if self.duplicates:
            out.append(f"{self.duplicates:,d} repeated words in the file: the first vector of each was kept")
        return out


@dataclass
class TargetTable:
    table: torch.Tensor  # (V, m) float32, unit rows, zero row for padding
    decodable: torch.Tensor  # (V,) bool
    report: VectorReport


class _Collector:
    """Streams (word, vector) pairs: keeps unit vectors of dictionary words, sums unit vectors of the others."""

    def __init__(self, path: str, wanted: Dict[str, int]):
        self.path, self.wanted = path, wanted
        self.found: Dict[str, np.ndarray] = {}
        self.outside_sum: Optional[np.ndarray] = None
        self.outside = self.file_words = self.zero = self.duplicates = 0
        self.dim: Optional[int] = None
        self.warnings: List[str] = []

    def add(self, word: str, vec: np.ndarray, where: str):
        if self.dim is None:
            self.dim = vec.shape[0]
        elif vec.shape[0] != self.dim:
            raise OutlayersConfigError(f"{self.path}{where}: word '{word}' has {vec.shape[0]} values but the file's "
                                       f"vectors have {self.dim}; fix or remove that line")
        if not np.all(np.isfinite(vec)):
            raise OutlayersConfigError(f"{self.path}{where}: word '{word}' has a NaN or infinite value; fix or "
                                       "remove that line")
        self.file_words += 1
        norm = float(np.linalg.norm(vec.astype(np.float64)))
        if norm == 0.0:
            self.zero += 1
            return
        unit = (vec.astype(np.float64) / norm)
        if word in self.wanted:
            if word in self.found:
                self.duplicates += 1
                return
            self.found[word] = unit.astype(np.float32)
        else:
            self.outside_sum = unit if self.outside_sum is None else self.outside_sum + unit
            self.outside += 1


def _read_text(path: str, collector: _Collector):
    header_dim = header_count = None
    body = 0  # vector lines read
    for n, line in text_lines(path, "is this a binary model? (use a .bin name for word2vec/fastText binaries)"):
        line = line.rstrip("\r\n").rstrip(" ")
        if not line.strip():
            continue
        parts = line.split(" ")
        if n == 1 and len(parts) == 2 and all(p.isascii() and p.isdigit() for p in parts):
            header_count, header_dim = int(parts[0]), int(parts[1])
            if header_dim < 1:
                raise OutlayersConfigError(f"{path} line 1: the header 'COUNT DIM' gives DIM = {header_dim}; "
                                           "vectors need at least one value: fix the header or the file")
            collector.dim = header_dim
            continue
        body += 1
        if len(parts) < 2:
            raise OutlayersConfigError(f"{path} line {n}: expected 'word v1 ... vm', found only '{line[:40]}'")
        try:
            vec = np.array(parts[1:], dtype=np.float32)
        except ValueError:
            raise OutlayersConfigError(f"{path} line {n}: word '{parts[0][:40]}' has a value that is not a "
                                       "number; fix or remove that line") from None
        collector.add(parts[0], vec, f" line {n}")
    if header_count is not None and header_count != body:
        collector.warnings.append(
            f"{path}: the header says {header_count:,d} vectors of size {header_dim} but the file holds {body:,d} "
            f"vector lines (of size {collector.dim}); the file may be truncated or concatenated: check it")


def _is_fasttext_bin(path: str) -> bool:
    with open(path, "rb") as f:
        head = f.read(4)
    return len(head) == 4 and int.from_bytes(head, "little", signed=True) == FASTTEXT_MAGIC


def _read_binary(path: str, collector: _Collector, dictionary_words: List[str]):
    try:
        from gensim.models import KeyedVectors
        from gensim.models.fasttext import load_facebook_vectors
    except ImportError:
        raise OutlayersConfigError(f"{path} is a binary vector file; reading it needs gensim (pip install gensim), "
                                   "or convert it to the .vec text format") from None
    try:
        _read_gensim(path, collector, dictionary_words, KeyedVectors, load_facebook_vectors)
    except OutlayersConfigError:
        raise
    except Exception as e:  # gensim's own errors on a damaged or foreign file
        raise OutlayersConfigError(f"{path}: gensim cannot read it as a word2vec or fastText binary "
                                   f"({type(e).__name__}: {e}); is it a text .vec file with a .bin name?") from None


def _read_gensim(path, collector, dictionary_words, KeyedVectors, load_facebook_vectors):
    if _is_fasttext_bin(path):
        kv = load_facebook_vectors(path)
        known = set(kv.key_to_index)
        for word in kv.index_to_key:
            collector.add(word, np.asarray(kv[word], dtype=np.float32), "")
        # a fastText model builds vectors for unseen words from their character n-grams
        for word in dictionary_words:
            if word not in known and word not in collector.found:
                collector.add(word, np.asarray(kv[word], dtype=np.float32), "")
                collector.file_words -= 1
    else:
        kv = KeyedVectors.load_word2vec_format(path, binary=True, unicode_errors="strict")
        for word in kv.index_to_key:
            collector.add(word, np.asarray(kv[word], dtype=np.float32), "")


def _unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm (a zero row stays zero)."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def random_unit_vectors(n: int, dim: int, seed: int) -> torch.Tensor:
    """(n, dim) float32 rows drawn uniformly on the unit sphere (normalised Gaussian draws in float64) from a
    generator of its own: the same rows for the same seed on every machine."""
    gen = torch.Generator().manual_seed(seed)
    vecs = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    return torch.nn.functional.normalize(vecs, dim=-1).float()


def write_example_vectors(src_dict, tgt_dict, path: str, dim: int = 16, seed: int = 0):
    """A small valid ``--target-vectors`` file: a random ``dim``-dimensional vector for every target word (fillers
    left out), as word2vec text (``Option.example``: what the registry-driven tests train with)."""
    words = [w for w in tgt_dict.symbols[tgt_dict.nspecial:] if not FILLER.match(w)]
    rows = np.random.default_rng(seed).standard_normal((len(words), dim))
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{len(words)} {dim}\n")
        f.writelines(w + " " + " ".join(f"{v:.6f}" for v in row) + "\n" for w, row in zip(words, rows))


def load_target_table(dictionary, path: str, min_coverage: float = 0.5, expected_dim: Optional[int] = None,
                      center: bool = False) -> TargetTable:
    """Align the vectors in ``path`` to a fairseq ``Dictionary``; see the module docstring for the rules."""
    if not 0.0 <= min_coverage <= 1.0:
        raise OutlayersConfigError(f"--target-vectors-min-coverage must be in [0, 1], got {min_coverage}")
    if not path:
        raise OutlayersConfigError("--output-layer continuous needs --target-vectors FILE (word vectors of the "
                                   "target language; make them with scripts/train_target_vectors.py)")
    if not os.path.isfile(path):
        raise OutlayersConfigError(f"--target-vectors {path}: no such file")
    symbols = list(dictionary.symbols)
    specials = {dictionary.bos(): "<s>", dictionary.pad(): "<pad>", dictionary.eos(): "</s>",
                dictionary.unk(): "<unk>"}
    wanted = {w: i for i, w in enumerate(symbols) if i != dictionary.pad()}
    collector = _Collector(path, wanted)
    if path.endswith(".bin"):
        words = [w for i, w in enumerate(symbols) if i not in specials and not FILLER.match(w)]
        _read_binary(path, collector, words)
    else:
        _read_text(path, collector)
    dim = collector.dim
    if dim is None or not collector.file_words:  # a header alone ("0 2000000000") sets no table size
        raise OutlayersConfigError(f"--target-vectors {path}: the file holds no vectors")
    if expected_dim is not None and expected_dim != dim:
        raise OutlayersConfigError(f"--target-vectors {path} holds {dim}-dimensional vectors but --continuous-dim "
                                   f"is {expected_dim}; drop --continuous-dim (it is read from the file) or use "
                                   "vectors of that size")
    V = len(symbols)
    check_fits(f"--target-vectors {path}: vector size", dim, 2 * FROZEN_BYTES * V, f"the {V:,d}-word target table",
               "use vectors of a few hundred dimensions (the paper: 300)")
    table = torch.zeros(V, dim)
    decodable = torch.ones(V, dtype=torch.bool)
    report = VectorReport(path, dim, collector.file_words, V, 0, 0, zero_vectors=collector.zero,
                          duplicates=collector.duplicates, warnings=list(collector.warnings))
    for w in collector.warnings:
        logger.warning(w)
    missing_rows, covered_rows = [], []
    for i, w in enumerate(symbols):
        if i in specials or FILLER.match(w):
            continue
        report.eligible += 1
        if w in collector.found:
            report.covered += 1
            covered_rows.append(i)
        else:
            report.missing.append(w)
            missing_rows.append(i)
            decodable[i] = False
    shift = None
    if covered_rows:
        covered = np.stack([collector.found[symbols[i]] for i in covered_rows]).astype(np.float64)
        if center:
            shift = covered.mean(axis=0)
            report.specials["centring"] = (f"subtracted the mean of the {len(covered_rows):,d} dictionary words' unit "
                                           f"vectors (norm {np.linalg.norm(shift):.3f}) from every file vector")
            covered = _unit_rows(covered - shift)
        table[covered_rows] = torch.from_numpy(covered.astype(np.float32))

    def from_file(vec):  # a unit vector from the file, centred like the dictionary words
        vec = np.asarray(vec, dtype=np.float64)
        out = vec if shift is None else _unit_rows((vec - shift)[None])[0]
        return torch.from_numpy(out.astype(np.float32))

    unk = dictionary.unk()
    fixed_rows = []  # rows that get fixed pseudo-random unit vectors
    if symbols[unk] in collector.found:
        table[unk] = from_file(collector.found[symbols[unk]])
        report.specials["<unk>"] = "the file's own vector"
    elif collector.outside and np.linalg.norm(collector.outside_sum) > 0:
        mean = collector.outside_sum / (collector.outside if center else np.linalg.norm(collector.outside_sum))
        table[unk] = from_file(mean)
        report.specials["<unk>"] = (f"normalised mean of the {collector.outside:,d} file vectors of words "
                                    "outside the dictionary")
    else:
        fixed_rows.append(unk)
        report.specials["<unk>"] = ("fixed pseudo-random unit vector (no file word is outside the dictionary, so "
                                    "the paper's mean-of-outside-words rule has nothing to average)")
    for idx, name in ((dictionary.eos(), "</s>"), (dictionary.bos(), "<s>")):
        if symbols[idx] in collector.found:
            table[idx] = from_file(collector.found[symbols[idx]])
            report.specials[name] = "the file's own vector"
        else:
            fixed_rows.append(idx)
            report.specials[name] = "fixed pseudo-random unit vector"
    fillers = [i for i, w in enumerate(symbols) if FILLER.match(w) and i not in specials]
    fixed_rows = sorted(set(fixed_rows + fillers))
    if fixed_rows:
        table[fixed_rows] = random_unit_vectors(len(fixed_rows), dim, SPECIAL_SEED)
    if missing_rows:
        table[missing_rows] = table[unk].clone()
    if fillers:
        report.specials["madeupwordNNNN"] = f"{len(fillers)} fixed pseudo-random unit vectors, never generated"
    report.specials["<pad>"] = "zero vector, never generated"
    decodable[dictionary.pad()] = False
    decodable[dictionary.bos()] = False
    decodable[fillers] = False
    if report.coverage < min_coverage:
        raise OutlayersConfigError(
            f"--target-vectors {path}: only {report.covered:,d} of the {report.eligible:,d} target dictionary words "
            f"({100 * report.coverage:.1f}%) have a vector, below --target-vectors-min-coverage {min_coverage}; the "
            "vectors must use the target side's tokenisation (e.g. word level, not BPE): train them with "
            "scripts/train_target_vectors.py, or lower the threshold")
    return TargetTable(table, decodable, report)
