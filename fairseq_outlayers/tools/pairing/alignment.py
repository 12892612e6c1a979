"""Word alignment backends and the estimate of A(y|x) used to pair words by lexical meaning.

Liu et al. (2019, Sec. 2.1.1, eq. 1) pair a source word x with the aligned target word of highest alignment
probability A(y|x), obtained from fast_align (Dyer et al. 2013). We estimate A from the alignment *links*:

    A(y|x) = c(x, y) / sum_y' c(x, y')

where c(x, y) counts the links between a token x and a token y over the whole training corpus (links to NULL are
not counted). This is the relative-frequency lexical translation table of phrase-based SMT; it works the same
for every backend, including an alignment file produced by any external aligner.

Backends (each yields the links ``[(i, j), ...]`` of every sentence pair, i a source and j a target position):

* ``systran`` with ``direction="forward"`` (default): fast_align's forward model p(target | source) with the
  diagonal prior (like ``fast_align -d``), trained by ``systran_align.generate_alignment_probabilities``; the
  Viterbi links are computed here from the trained lexical table, exactly as fast_align's forward pass does:
  each target word j takes the source position i maximising t(y_j | x_i) * p(i | j, m, n), or NULL.
* ``systran`` with ``direction="both"``: both directions, symmetrised by systran_align's ``Aligner``
  (grow-diag-final, as fast_align's ``atools``).
* ``pharaoh``: links read from a Pharaoh ``i-j`` file (one line per sentence pair), e.g. the output of the
  fast_align binary, eflomal or awesome-align.
"""
import logging
import os
import struct
import sys
import tempfile
from collections import Counter
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from fairseq_outlayers.errors import OutlayersConfigError

Links = List[Tuple[int, int]]
logger = logging.getLogger(__name__)

# fast_align's defaults, also systran_align's: probability of aligning to NULL and the diagonal tension
NULL_PROB = 0.08
DIAGONAL_TENSION = 4.0
MISSING_PROB = 1e-9  # fast_align's value for a (source, target) pair absent from the lexical table


class LinkCounter:
    """Accumulates c(x, y) over a corpus and turns it into A(y|x) (see the module docstring)."""

    def __init__(self):
        self.counts: Counter = Counter()
        self.sentences = 0
        self.links = 0
        self.words = 0  # source + target tokens seen

    def add(self, src: Sequence[str], tgt: Sequence[str], links: Iterable[Tuple[int, int]]):
        pairs = [(src[i], tgt[j]) for i, j in links]
        self.counts.update(pairs)
        self.sentences += 1
        self.links += len(pairs)
        self.words += len(src) + len(tgt)

    def probabilities(self) -> Dict[str, Dict[str, float]]:
        """{x: {y: A(y|x)}} for every source token with at least one link."""
        totals: Counter = Counter()
        for (x, _), c in self.counts.items():
            totals[x] += c
        table: Dict[str, Dict[str, float]] = {}
        for (x, y), c in self.counts.items():
            table.setdefault(x, {})[y] = c / totals[x]
        return table


# ---------------------------------------------------------------------------------------------------------
# Pharaoh files


def add_aligner_options(parser, direction: str = "forward"):
    """The word-alignment options shared by the pairing and lexicon commands (``direction``: the default of
    --direction, which differs between them)."""
    other = "both" if direction == "forward" else "forward"
    parser.add_argument("--aligner", default="systran", choices=["systran", "pharaoh"],
                        help="systran: fast_align through systran-align (default); pharaoh: read --alignment")
    parser.add_argument("--alignment", help="Pharaoh 'i-j' alignment file of the corpus (with --aligner pharaoh)")
    parser.add_argument("--direction", default=direction, choices=[direction, other],
                        help="systran aligner: 'forward' = the fast_align model p(tgt|src) only, 'both' = both "
                        f"directions symmetrised with grow-diag-final (default: {direction})")
    parser.add_argument("--iterations", type=int, default=5, help="fast_align EM iterations (default: 5)")


def read_pharaoh(path: str, corpus: Iterable[Tuple[List[str], List[str]]], log=None
                 ) -> Iterator[Tuple[List[str], List[str], Links]]:
    """Zip a Pharaoh ``i-j`` file with the corpus it aligns, checking every link against the sentence lengths.

    A file without a single link (blank lines only) is an error once read: it would pair no word by meaning and
    build an empty lexicon. Blank lines for sentence pairs with both sides non-empty are counted, and ``log``
    (a warning function; default: this module's logger) hears how many, with the first line numbers."""
    if not os.path.isfile(path):
        raise OutlayersConfigError(f"alignment file '{path}' does not exist; pass a Pharaoh 'i-j' file with one "
                                   "line per sentence pair (e.g. the output of fast_align)")
    blank: List[int] = []
    total = 0
    with open(path, "rb") as f:
        lineno = 0
        for src, tgt in corpus:
            raw = f.readline()
            lineno += 1
            if not raw:
                raise OutlayersConfigError(
                    f"alignment file '{path}' has {lineno - 1} lines but the corpus has more; align the same "
                    "training text that is given with --src-text/--tgt-text"
                )
            links = []
            for item in raw.decode("utf-8", errors="replace").split():
                a, sep, b = item.partition("-")
                if not sep or not (a + b).isascii() or not a.isdigit() or not b.isdigit():
                    raise OutlayersConfigError(f"{path}:{lineno}: '{item}' is not a Pharaoh link 'i-j' "
                                               "(source index, dash, target index, counted from 0)")
                i, j = int(a), int(b)
                if i >= len(src) or j >= len(tgt):
                    raise OutlayersConfigError(
                        f"{path}:{lineno}: link {item} is outside the sentence pair ({len(src)} source, "
                        f"{len(tgt)} target tokens); the alignment file does not match the corpus (was it "
                        "computed on the same tokenised/BPE text, with source on the left?)"
                    )
                links.append((i, j))
            total += len(links)
            if not links and src and tgt:
                blank.append(lineno)
            yield src, tgt, links
        if f.readline():
            raise OutlayersConfigError(f"alignment file '{path}' has more lines than the corpus ({lineno}); "
                                       "align the same training text that is given with --src-text/--tgt-text")
    if lineno and not total:
        raise OutlayersConfigError(f"alignment file '{path}' holds no link in its {lineno} lines (all blank): no "
                                   "word can be paired by meaning; give the aligner's output ('i-j' links), or "
                                   "--aligner systran to align here")
    if blank:
        shown = ", ".join(map(str, blank[:10])) + (" ..." if len(blank) > 10 else "")
        (log or logger.warning)(f"warning: {path}: {len(blank)} of {lineno} sentence pairs have no link (blank "
                                f"lines {shown}); their words are paired by meaning from the other lines only")


# ---------------------------------------------------------------------------------------------------------
# fast_align through systran_align


def _import_systran():
    try:
        import systran_align
    except ImportError:

        where = ("it has no build for Python 3.12 or later" if sys.version_info >= (3, 12)
                 else "pip install systran-align, or")
        raise OutlayersConfigError(
            f"the default aligner needs the systran-align package (fast_align), which is not installed ({where}): "
            "run fast_align yourself on the same text and pass its links with --aligner pharaoh --alignment FILE"
        ) from None
    return systran_align


def check_aligner_available(aligner: str) -> None:
    """Fail before any file is read when ``aligner`` needs the systran-align binding and it is missing."""
    if aligner == "systran":
        _import_systran()


def write_fast_align_input(corpus: Iterable[Tuple[List[str], List[str]]], path: str) -> int:
    """Write ``src ||| tgt`` lines (fast_align's input); sentence pairs with an empty side are left out."""
    n = 0
    with open(path, "w", encoding="utf-8") as out:
        for src, tgt in corpus:
            if src and tgt:
                out.write(" ".join(src) + " ||| " + " ".join(tgt) + "\n")
                n += 1
    return n


def train_fast_align(input_path: str, forward_path: str, backward_path: str, iterations: int = 5):
    """fast_align's EM in both directions with the diagonal prior (``fast_align -d``, tension fixed at 4)."""
    systran_align = _import_systran()
    systran_align.generate_alignment_probabilities(
        input_path, forward_path, backward_path, iterations=iterations, favor_diagonal=True,
        optimize_tension=False, diagonal_tension=DIAGONAL_TENSION, prob_align_null=NULL_PROB,
    )


class LexicalTable:
    """fast_align's lexical table t(target | source) as written by systran_align (its binary format: a
    vocabulary of NUL-terminated words, then per source word the (target id, float32 probability) entries;
    ids are 1-based, id of ``<eps>`` is the NULL word)."""

    def __init__(self, path: str):
        with open(path, "rb") as f:
            buf = f.read()
        try:
            _, nvocab = struct.unpack_from("<ii", buf, 0)
            offset, vocab = 8, []
            for _ in range(nvocab):
                end = buf.index(b"\0", offset)
                vocab.append(buf[offset:end].decode("utf-8"))
                offset = end + 1
            offset += 4  # number of rows (rows without entries are not written)
            keys, probs = [], []
            while offset < len(buf):
                src, k = struct.unpack_from("<ii", buf, offset)
                offset += 8
                entries = np.frombuffer(buf, dtype=np.dtype([("t", "<i4"), ("p", "<f4")]), count=k, offset=offset)
                offset += 8 * k
                keys.append(src * (nvocab + 1) + entries["t"].astype(np.int64))
                probs.append(entries["p"].astype(np.float64))
        except (struct.error, ValueError, UnicodeDecodeError) as e:
            raise OutlayersConfigError(
                f"cannot read the fast_align forward table '{path}' written by systran_align ({e}); this "
                "systran-align version may use another format: use --direction both, or --aligner pharaoh"
            ) from None
        self.vocab_size = nvocab + 1
        self.word_id = {w: i + 1 for i, w in enumerate(vocab)}
        if "<eps>" not in self.word_id:
            raise OutlayersConfigError(f"the fast_align table '{path}' has no NULL word '<eps>'; use "
                                       "--direction both or --aligner pharaoh")
        self.null_id = self.word_id["<eps>"]
        keys = np.concatenate(keys) if keys else np.zeros(0, np.int64)
        probs = np.concatenate(probs) if probs else np.zeros(0)
        order = np.argsort(keys, kind="stable")
        self.keys, self.probs = keys[order], probs[order]

    def ids(self, tokens: Sequence[str]) -> List[int]:
        get = self.word_id.get
        return [get(t, 0) for t in tokens]

    def lookup(self, src_ids: np.ndarray, tgt_ids: np.ndarray) -> np.ndarray:
        """t(tgt | src) elementwise (broadcast), MISSING_PROB for pairs absent from the table."""
        keys = src_ids.astype(np.int64) * self.vocab_size + tgt_ids
        if len(self.keys) == 0:
            return np.full(keys.shape, MISSING_PROB)
        idx = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys[idx] == keys, self.probs[idx], MISSING_PROB)


#: cells of the (sentences x source x target) score array computed at once (about 8 MB per float64 temporary):
#: the aligner's memory is bounded by this, not by the corpus or the longest sentence
MAX_CELLS = 1 << 20


def forward_viterbi(table: LexicalTable, src_batch: List[List[int]], tgt_batch: List[List[int]],
                    null_prob: float = NULL_PROB, tension: float = DIAGONAL_TENSION,
                    max_cells: int = MAX_CELLS) -> List[Links]:
    """fast_align's forward Viterbi links for a batch of sentence pairs given as table ids.

    For target position j (1-based, n target words) and source position i (1-based, m source words) the
    diagonal prior is p(i | j, m, n) = (1 - p0) exp(-tension |i/m - j/n|) / Z_j; the target word takes the
    source word of highest t(y_j | x_i) p(i | j, m, n) unless NULL, with p0 t(y_j | NULL), scores higher
    (ties go to NULL, then to the leftmost source word, as in fast_align).

    Every target position is decided on its own, so the work is cut into groups of sentences whose padded
    (sentences x m x n) array has at most ``max_cells`` cells, and a longer sentence into slices of target
    positions: the memory is a constant, whatever the corpus and the sentence lengths."""
    out: List[Links] = []
    k, B = 0, len(src_batch)
    while k < B:
        M, N, end = max(len(src_batch[k]), 1), max(len(tgt_batch[k]), 1), k + 1
        while end < B:
            M2, N2 = max(M, len(src_batch[end])), max(N, len(tgt_batch[end]))
            if (end - k + 1) * M2 * N2 > max_cells:
                break
            M, N, end = M2, N2, end + 1
        if end == k + 1 and M * N > max_cells:  # one long sentence: slices of target positions
            step = max(1, max_cells // M)
            links: Links = []
            for j0 in range(0, N, step):
                links.extend(_viterbi_dense(table, src_batch[k:end], tgt_batch[k:end], null_prob, tension,
                                            j0, min(N, j0 + step))[0])
            out.append(links)
        else:
            out.extend(_viterbi_dense(table, src_batch[k:end], tgt_batch[k:end], null_prob, tension))
        k = end
    return out


def _viterbi_dense(table, src_batch, tgt_batch, null_prob, tension, j0=0, j1=None) -> List[Links]:
    """forward_viterbi on one padded array, for the target positions j0 <= j < j1 (0-based) only."""
    B = len(src_batch)
    m = np.array([len(s) for s in src_batch])
    n = np.array([len(t) for t in tgt_batch])
    M = max(int(m.max()), 1)
    j1 = max(int(n.max()), 1) if j1 is None else j1
    N = j1 - j0
    S = np.zeros((B, M), np.int64)
    T = np.zeros((B, N), np.int64)
    for b in range(B):
        S[b, : m[b]] = src_batch[b]
        row = tgt_batch[b][j0:j1]
        T[b, : len(row)] = row
    t = table.lookup(S[:, :, None], T[:, None, :])  # B x M x N
    i = np.arange(1, M + 1)[None, :, None] / np.maximum(m, 1)[:, None, None]
    j = np.arange(j0 + 1, j1 + 1)[None, None, :] / np.maximum(n, 1)[:, None, None]
    valid_i = (np.arange(M)[None, :] < m[:, None])[:, :, None]
    u = np.where(valid_i, np.exp(-tension * np.abs(i - j)), 0.0)
    del i, j
    prior = (1.0 - null_prob) * u / np.maximum(u.sum(axis=1, keepdims=True), 1e-300)
    del u
    score = np.where(valid_i, t * prior, -1.0)
    del t, prior
    best = score.argmax(axis=1)  # B x N
    best_score = np.take_along_axis(score, best[:, None, :], axis=1)[:, 0, :]
    del score
    null_score = null_prob * table.lookup(np.full_like(T, table.null_id), T)
    linked = (best_score > null_score) & (np.arange(j0, j1)[None, :] < n[:, None])
    out = []
    for b in range(B):
        js = np.nonzero(linked[b])[0]
        out.append(list(zip(best[b, js].tolist(), (js + j0).tolist())))
    return out


def systran_links(corpus_factory, direction: str = "forward", iterations: int = 5, batch_size: int = 2000,
                  workdir: str = None, log=None, skipped: Optional[List[int]] = None
                  ) -> Iterator[Tuple[List[str], List[str], Links]]:
    """Train fast_align on the corpus and yield (src, tgt, links) per sentence pair.

    ``corpus_factory()`` returns a fresh iterator over (src tokens, tgt tokens): the corpus is read twice
    (once to train, once to align) rather than held in memory.

    With ``direction="both"``, systran_align's symmetrising aligner can fail on a very long line (e.g. 3,000
    repeated tokens: a positive log-probability and no links at all). Such a sentence pair (both sides
    non-empty, no links, or a log-probability that is not a finite number <= 0) is skipped with a warning naming
    its line, and its line number appended to ``skipped``."""
    if direction not in ("forward", "both"):
        raise OutlayersConfigError(f"--direction must be 'forward' or 'both', not '{direction}'")
    systran_align = _import_systran()
    with tempfile.TemporaryDirectory(dir=workdir, prefix="outlayers-align-") as tmp:
        inp, fwd, bwd = (os.path.join(tmp, name) for name in ("corpus.src-tgt", "forward.probs", "backward.probs"))
        n = write_fast_align_input(corpus_factory(), inp)
        if n == 0:
            raise OutlayersConfigError("the parallel corpus has no sentence pair with both sides non-empty")
        if log:
            log(f"training fast_align (both directions, {iterations} iterations) on {n} sentence pairs")
        train_fast_align(inp, fwd, bwd, iterations)
        if direction == "forward":
            table = LexicalTable(fwd)
            align = lambda S, T: forward_viterbi(table, [table.ids(s) for s in S], [table.ids(t) for t in T])  # noqa: E731
        else:
            aligner = systran_align.Aligner(fwd, bwd)

            def align(S, T):
                res = aligner.align_batch(S, T)
                return [None if _failed(r) else [(int(i), int(j)) for i, j in r["alignments"]] for r in res]

        batch: List[Tuple[List[str], List[str]]] = []
        first_line = 1
        for pair in corpus_factory():
            batch.append(pair)
            if len(batch) == batch_size:
                yield from _align_batch(align, batch, first_line, skipped, log)
                first_line += len(batch)
                batch = []
        if batch:
            yield from _align_batch(align, batch, first_line, skipped, log)


def _failed(result) -> bool:
    """systran_align's symmetrised result for a non-empty pair is unusable: no links or a broken score."""
    if not result["alignments"]:
        return True
    for key in ("forward_log_prob", "backward_log_prob"):
        value = result.get(key)
        if value is not None and not (np.isfinite(value) and value <= 0.0):
            return True
    return False


def _align_batch(align, batch, first_line=1, skipped=None, log=None):
    todo = [k for k, (s, t) in enumerate(batch) if s and t]
    links: List[Links] = [[] for _ in batch]
    if todo:
        for k, ln in zip(todo, align([batch[k][0] for k in todo], [batch[k][1] for k in todo])):
            if ln is None:
                line = first_line + k
                if skipped is not None:
                    skipped.append(line)
                (log or logger.warning)(
                    f"warning: line {line} ({len(batch[k][0])} source, {len(batch[k][1])} target tokens): the "
                    "symmetrised aligner found no usable links; the line is skipped (--direction forward aligns "
                    "any length)")
                ln = []
            links[k] = ln
    for (s, t), ln in zip(batch, links):
        yield s, t, ln


def estimate_probabilities(linked: Iterable[Tuple[List[str], List[str], Links]]) -> Tuple[Dict, LinkCounter]:
    """A(y|x) from an iterator of (src, tgt, links); also returns the counter (sentence and link totals)."""
    counter = LinkCounter()
    for src, tgt, links in linked:
        counter.add(src, tgt, links)
    return counter.probabilities(), counter
