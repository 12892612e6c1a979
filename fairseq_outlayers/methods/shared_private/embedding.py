"""Shared-private bilingual word embeddings (Liu et al., ACL 2019, Sec. 2.2, eqs. 2-3).

A pairing (see ``fairseq_outlayers.methods.shared_private.word_pairs``) puts |V_c| (source word, target word) pairs in each category
c in {lm, wf, ur}. For a pair of category c the first k_c = round(lambda_c * d) features of the two embeddings are
one shared vector; the remaining d - k_c features are private to each language:

    E^x_c = S_c (+) P^x_c ,   E^y_c = S_c (+) P^y_c          (eq. 3, (+) = column concatenation)

with S_c of shape |V_c| x k_c and P^x_c, P^y_c of shape |V_c| x (d - k_c). The full matrices are the row
concatenation of the categories (eq. 2) plus fully private rows for the words left unpaired (the special symbols
and, when the vocabularies differ in size, the surplus words), put back in dictionary order by an index map.

The number of embedding parameters is (|V_x| + |V_y|) d - sum_c |V_c| k_c (the target output projection is
tied to E^y, decoder weight tying); lambda = (0, 0, 0) is decoder weight tying and lambda = (1, 1, 1) makes every
paired word share its whole vector.

``SharedPrivateEmbeddings`` owns the parameters and assembles both matrices; ``SharedPrivateEmbedding`` is the
view one side (encoder or decoder) uses like an ``nn.Embedding``: ``forward(tokens)``, ``.weight`` (the assembled
matrix, what a tied output layer multiplies with), ``embedding_dim``, ``padding_idx``, ``num_embeddings``.

The matrices are assembled once per model pass: the encoder's source lookup, with which every pass starts (a
training step, a validation batch, a fairseq-generate batch and all its decoding steps), drops the previous pass's
assembly; within the pass the target matrix is shared by the decoder input lookup and the tied output layer.
(A cache keyed on the parameters' storage and version served stale embeddings after fairseq's optimizers, which
write through ``.data``, had changed them.)
"""
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORIES = ("lm", "wf", "ur")


def shared_width(lam: float, dim: int) -> int:
    """k_c = round(lambda_c * d): how many leading features a pair of category c shares."""
    return int(round(lam * dim))


def closed_form_numel(counts: Dict[str, int], lambdas: Sequence[float], src_size: int, tgt_size: int,
                      dim: int) -> int:
    """Embedding parameters of shared-private embeddings: (|V_x| + |V_y|) d - sum_c |V_c| k_c."""
    return (src_size + tgt_size) * dim - sum(counts[c] * shared_width(l, dim) for c, l in zip(CATEGORIES, lambdas))


def assemble(shared: Sequence[torch.Tensor], private: Sequence[torch.Tensor], unpaired: torch.Tensor,
             rows: Optional[torch.Tensor] = None) -> torch.Tensor:
    """One side's |V| x d matrix: [S_c | P_c] per category (eq. 3), stacked with the unpaired rows (eq. 2),
    then, given ``rows``, reordered into dictionary order (``rows[i]`` = stacked row of dictionary index i)."""
    blocks = [torch.cat([s, p], dim=1) for s, p in zip(shared, private)]
    stacked = torch.cat(blocks + [unpaired], dim=0)
    return stacked if rows is None else stacked.index_select(0, rows)


def _row_map(size: int, paired: Sequence[Sequence[int]]) -> Tuple[torch.Tensor, List[int]]:
    """(rows, unpaired indices): dictionary index -> row of the stacked matrix (paired blocks first)."""
    order = [i for block in paired for i in block]
    if len(set(order)) != len(order):
        raise ValueError("a dictionary index appears in two pairs: the pairing must be one-to-one")
    taken = set(order)
    unpaired = [i for i in range(size) if i not in taken]
    rows = torch.empty(size, dtype=torch.long)
    rows[torch.tensor(order + unpaired, dtype=torch.long)] = torch.arange(size)
    return rows, unpaired


class SharedPrivateEmbeddings(nn.Module):
    """The parameters of both languages' embeddings and their assembly (Liu et al. 2019, eqs. 2-3).

    ``pairs[c] = (source indices, target indices)`` for c in (lm, wf, ur); ``lambdas`` = (lm, wf, ur) shares.
    Weights are drawn like fairseq's embeddings, N(0, d^-1/2), with the padding rows set to zero."""

    def __init__(self, src_size: int, tgt_size: int, dim: int, pairs: Dict[str, Tuple[Sequence[int], Sequence[int]]],
                 lambdas: Sequence[float] = (0.9, 0.7, 0.5), src_padding_idx: Optional[int] = None,
                 tgt_padding_idx: Optional[int] = None, init_std: Optional[float] = None):
        super().__init__()
        if len(lambdas) != 3 or not all(0.0 <= l <= 1.0 for l in lambdas):
            raise ValueError(f"lambdas must be three numbers in [0, 1] (lm, wf, ur), got {tuple(lambdas)}")
        self.src_size, self.tgt_size, self.dim = src_size, tgt_size, dim
        self.lambdas = tuple(float(l) for l in lambdas)
        self.widths = tuple(shared_width(l, dim) for l in self.lambdas)
        self.counts = {c: len(pairs.get(c, ((), ()))[0]) for c in CATEGORIES}
        for c in CATEGORIES:
            src_idx, tgt_idx = pairs.get(c, ((), ()))
            if len(src_idx) != len(tgt_idx):
                raise ValueError(f"category {c}: {len(src_idx)} source but {len(tgt_idx)} target indices")
        src_rows, src_unpaired = _row_map(src_size, [pairs.get(c, ((), ()))[0] for c in CATEGORIES])
        tgt_rows, tgt_unpaired = _row_map(tgt_size, [pairs.get(c, ((), ()))[1] for c in CATEGORIES])
        # the index maps are buffers: saved in the checkpoint, so generation rebuilds the same assembly
        self.register_buffer("src_rows", src_rows)
        self.register_buffer("tgt_rows", tgt_rows)
        std = dim ** -0.5 if init_std is None else init_std

        def param(rows, cols):
            return nn.Parameter(torch.randn(rows, cols) * std)

        self.shared = nn.ParameterList([param(self.counts[c], k) for c, k in zip(CATEGORIES, self.widths)])
        self.src_private = nn.ParameterList([param(self.counts[c], dim - k) for c, k in zip(CATEGORIES, self.widths)])
        self.tgt_private = nn.ParameterList([param(self.counts[c], dim - k) for c, k in zip(CATEGORIES, self.widths)])
        self.src_unpaired = param(len(src_unpaired), dim)
        self.tgt_unpaired = param(len(tgt_unpaired), dim)
        n_paired = sum(self.counts.values())
        with torch.no_grad():  # padding rows start at zero, as in fairseq's embeddings
            for pad, unpaired, rows in ((src_padding_idx, self.src_unpaired, self.src_rows),
                                        (tgt_padding_idx, self.tgt_unpaired, self.tgt_rows)):
                if pad is not None:
                    r = int(rows[pad])
                    if r < n_paired:
                        raise ValueError(f"the padding index {pad} is paired; special symbols must stay private")
                    unpaired[r - n_paired].zero_()
        self._pad_rows: Dict[str, int] = {}  # side -> stacked row of its padding index
        self.new_pass()

    # ----- assembly, once per model pass ------------------------------------------------------------------
    # Why not a cache keyed on the parameters' storage and version: fairseq's optimizers write through ``p.data``,
    # which changes neither. Parameters change only between model passes, and every pass (a training step, a
    # validation batch, one fairseq-generate batch with all its decoding steps) starts with the encoder's source
    # lookup, which drops what the previous pass assembled (tests/test_shared_private.py, "no_stale"). A backward
    # through an assembled matrix drops it too (gradient accumulation without a new source lookup).
    def new_pass(self):
        """Forget the assembled matrices: the parameters may have changed since they were built."""
        self._pass: Dict[str, torch.Tensor] = {}

    def _assembled(self, name: str, build) -> torch.Tensor:
        current = self._pass
        if name not in current:
            value = current[name] = build()
            if value.requires_grad:  # once backward has gone through it, its graph is freed: assemble again
                def drop(grad):
                    current.pop(name, None)

                value.register_hook(drop)
        return current[name]

    def stacked(self, side: str) -> torch.Tensor:
        """``side``'s rows in block order (lm, wf, ur pairs, then unpaired): eqs. (2)-(3) before reordering."""
        private = self.src_private if side == "src" else self.tgt_private
        unpaired = self.src_unpaired if side == "src" else self.tgt_unpaired
        return self._assembled("stacked-" + side, lambda: assemble(list(self.shared), list(private), unpaired, None))

    def matrix(self, side: str) -> torch.Tensor:
        """The assembled |V| x d matrix of ``side`` ('src' or 'tgt') in dictionary order (once per pass)."""
        rows = self.src_rows if side == "src" else self.tgt_rows
        return self._assembled("matrix-" + side, lambda: self.stacked(side).index_select(0, rows))

    def lookup(self, side: str, tokens: torch.Tensor, padding_idx: Optional[int]) -> torch.Tensor:
        """Embeddings of ``tokens`` (dictionary ids) read from the block-ordered matrix, which skips the
        reordering of the whole matrix when only the looked-up rows are needed (the source side). A source
        lookup starts a new model pass."""
        if side == "src":
            self.new_pass()
        rows = self.src_rows if side == "src" else self.tgt_rows
        pad = None
        if padding_idx is not None:
            if side not in self._pad_rows:
                self._pad_rows[side] = int(rows[padding_idx])
            pad = self._pad_rows[side]
        return F.embedding(rows[tokens], self.stacked(side), pad)

    def train(self, mode: bool = True):
        self.new_pass()
        return super().train(mode)

    def _apply(self, fn, *args, **kwargs):  # .to(), .half(), .cuda(): parameters and row maps change
        self.new_pass()
        self._pad_rows = {}
        return super()._apply(fn, *args, **kwargs)

    def __getstate__(self):  # deepcopy, pickle: no assembled (non-leaf) tensors
        state = self.__dict__.copy()
        state["_pass"], state["_pad_rows"] = {}, {}
        return state

    def _load_from_state_dict(self, *args, **kwargs):
        self.new_pass()
        self._pad_rows = {}
        return super()._load_from_state_dict(*args, **kwargs)

    def extra_repr(self) -> str:
        return (f"src={self.src_size}, tgt={self.tgt_size}, dim={self.dim}, lambdas={self.lambdas}, "
                f"pairs={self.counts}")


class SharedPrivateEmbedding(nn.Module):
    """One language's view of ``SharedPrivateEmbeddings``, used where fairseq expects an ``nn.Embedding``.

    Both views register the same ``SharedPrivateEmbeddings`` (as fairseq does for three-way tying), so its
    parameters are one set of tensors: ``model.parameters()`` counts them once and the optimizer sees them once."""

    def __init__(self, core: SharedPrivateEmbeddings, side: str, padding_idx: Optional[int]):
        super().__init__()
        if side not in ("src", "tgt"):
            raise ValueError("side must be 'src' or 'tgt'")
        self.core = core
        self.side = side
        self.padding_idx = padding_idx
        self.embedding_dim = core.dim
        self.num_embeddings = core.src_size if side == "src" else core.tgt_size

    @property
    def weight(self) -> torch.Tensor:
        """The assembled matrix (dictionary order); a tied output layer reads it every step."""
        return self.core.matrix(self.side)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.side == "src":  # only the looked-up rows are needed: no reordering of the whole matrix
            return self.core.lookup("src", tokens, self.padding_idx)
        # the target matrix in dictionary order is assembled anyway for the tied output layer: reuse it
        return F.embedding(tokens, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.side}, {self.num_embeddings}, {self.embedding_dim}, padding_idx={self.padding_idx}"
