"""The continuous output layer of Kumar & Tsvetkov (2019, section 3) and the tied target-vector input embedding
(section 4.4).

``ContinuousOutput`` maps decoder features h to a vector ê = W h + b in R^m (optionally after a LayerNorm of h),
and keeps the frozen table of unit target word vectors e(w) as a buffer (saved with the checkpoint):

* ``forward(h)`` returns ê; the training losses (``criterions.py``) compare it with e(w) of
  the reference word only, so their cost does not depend on the vocabulary size V;
* ``get_normalized_probs`` turns ê into log-probabilities over the dictionary for ``fairseq-generate``: the vMF
  log-density of each word, log C_m(‖ê‖) + êᵀe(w), renormalised over the dictionary. log C_m does not depend on
  w, so this is ``log_softmax_w(êᵀe(w))``: the word of highest vMF density (largest cosine, the paper's
  nearest-neighbour decoding) has the highest probability, and a beam search adds these log-probabilities up.
  With ``score_scale`` set, ``log_softmax_w(s · cos(ê, e(w)))`` is used instead (for models trained with the
  cosine, L2 or max-margin losses, whose ‖ê‖ carries no meaning); the arg-max is the same word.

Entries that are never generated (padding, <s>, fairseq's filler words, dictionary words without a vector, which
share <unk>'s vector) are masked with the ``decodable`` buffer.

Large vocabularies (``search``/``topk``): with ``topk = K`` only the K best words (by the same score) and the end
of sentence get a finite log-probability, renormalised over them; every other word gets -inf, so fairseq's beam
search runs unchanged and never picks them. The K best are found either by a chunked exact torch search
(``search="exact"``) or by faiss (``search="faiss"``: an exact inner-product index, ``IndexFlatIP``, over the
decodable rows, built on first use and cached per model and table). Greedy decoding picks the same word as the
dense scores (the best word is always among the K, and renormalising shifts a row by a constant).
"""
import math
import weakref
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from fairseq_outlayers.core.output_layer import OutputLayer, TiedReference, linear_rows

from .nn_search import FaissInnerProductIndex, candidate_log_probs, nearest_neighbours

SEARCHES = ("exact", "faiss")
#: K of --continuous-search faiss when --continuous-topk is not given
DEFAULT_FAISS_TOPK = 100
#: ContinuousOutput -> (cache key, FaissInnerProductIndex); outside the module so that deepcopy/pickle of a
#: model never meets a faiss object, and an index goes away with its model
_FAISS_INDEXES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class TargetVectorEmbedding(nn.Module):
    """Decoder input embedding tied to the frozen target table: ``x = A e(w)`` with a learned linear map A
    (m -> model size, no bias) and the table kept as a buffer (section 4.4 of the paper; the map is this
    package's addition so that m need not equal the model size). A ~ N(0, 1/d), so ‖x‖² ≈ 1 like fairseq's
    N(0, d^-1/2) embeddings."""

    def __init__(self, table: torch.Tensor, embedding_dim: int, padding_idx: int):
        super().__init__()
        self.num_embeddings, self.vector_dim = table.shape
        self.embedding_dim = embedding_dim
        self.padding_idx = padding_idx
        self.register_buffer("table", table)
        self.proj = nn.Linear(self.vector_dim, embedding_dim, bias=False)
        nn.init.normal_(self.proj.weight, mean=0.0, std=embedding_dim ** -0.5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.proj(F.embedding(tokens, self.table).to(self.proj.weight.dtype))

    def frozen_numel(self) -> int:
        return self.table.numel()


class ContinuousOutput(TiedReference, OutputLayer):
    """Decoder features -> ê in R^m, with a frozen unit target table (V, m) for losses and decoding."""

    def __init__(self, table: Optional[torch.Tensor], decodable: torch.Tensor, input_dim: int,
                 layernorm: bool = False, tied_embedding: Optional[TargetVectorEmbedding] = None,
                 score_scale: Optional[float] = None, chunk_size: int = 16384, search: str = "exact",
                 topk: Optional[int] = None, eos: Optional[int] = None):
        if tied_embedding is not None:
            table = tied_embedding.table
        num_words, dim = table.shape
        super().__init__(num_words, input_dim)
        self.vector_dim = dim
        if tied_embedding is not None:
            self._set_tied_embedding(tied_embedding)
        else:
            self.register_buffer("table", table)
        self.register_buffer("decodable", decodable.to(torch.bool).clone())
        self.layer_norm = nn.LayerNorm(input_dim) if layernorm else None
        self.proj = nn.Linear(input_dim, dim)
        self.score_scale = score_scale
        self.chunk_size = chunk_size
        # the one check of these options (messages name the command-line options the values come from)
        if search not in SEARCHES:
            raise ValueError(f"--continuous-search must be one of {', '.join(SEARCHES)}, got '{search}'")
        if topk is not None and topk < 1:
            raise ValueError(f"--continuous-topk must be at least 1, got {topk}")
        self.search = search
        self.topk = topk
        self.eos = eos  # always scored when only the top K are (so that a hypothesis can always end)
        self.num_updates = 0  # set by fairseq's trainer (model.set_num_updates); read by loss schedules

    def set_num_updates(self, num_updates):
        self.num_updates = num_updates

    @property
    def target_table(self) -> torch.Tensor:
        """The (V, m) frozen unit target vectors (zero row for padding)."""
        tied = getattr(self, "_tied_embedding", None)
        return tied.table if tied is not None else self.table

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if self.layer_norm is not None:
            features = self.layer_norm(features)
        return self.proj(features)

    def _query(self, e_hat: torch.Tensor) -> torch.Tensor:
        """The vector whose inner product with e(w) is the score: ê, or s·ê/‖ê‖ with ``score_scale``."""
        if self.score_scale is not None:
            return F.normalize(e_hat.float(), dim=-1) * self.score_scale
        return e_hat

    def scores(self, e_hat: torch.Tensor) -> torch.Tensor:
        """Unnormalised log-scores over the dictionary (..., V) in float32: êᵀe(w) (or s·cos), -inf where masked."""
        table = self.target_table
        logits = linear_rows(self._query(e_hat).to(table.dtype), table).float()
        return logits.masked_fill(~self.decodable, -math.inf)

    def faiss_index(self) -> FaissInnerProductIndex:
        """The faiss index of the decodable rows, built on first use; rebuilt only when the table or the mask
        changes (another device or dtype, a loaded state dict)."""
        table, mask = self.target_table, self.decodable
        # storage and version suffice here, unlike for trained weights: the table and mask are frozen buffers that
        # no optimizer writes; a loaded state dict bumps their version, .to() gives new storage (tested)
        key = (table.data_ptr(), table._version, str(table.device), table.dtype, mask.data_ptr(), mask._version)
        cached = _FAISS_INDEXES.get(self)
        if cached is None or cached[0] != key:
            cached = (key, FaissInnerProductIndex(table, mask))
            _FAISS_INDEXES[self] = cached
        return cached[1]

    def top_candidates(self, e_hat: torch.Tensor, k: int):
        """The k best decodable words of each row of ``e_hat`` (N, m): (scores (N, k), ids (N, k)), best first."""
        query = self._query(e_hat)
        if self.search == "faiss":
            return self.faiss_index().search(query, k)
        return nearest_neighbours(query, self.target_table, k=k, candidates=self.decodable,
                                  chunk_size=self.chunk_size)

    def get_normalized_probs(self, net_output, log_probs: bool):
        if self.topk is None and self.search == "exact":
            logits = self.scores(net_output[0])
            return F.log_softmax(logits, dim=-1) if log_probs else F.softmax(logits, dim=-1)
        e_hat = net_output[0]
        flat = e_hat.reshape(-1, e_hat.size(-1))
        k = min(self.topk if self.topk is not None else DEFAULT_FAISS_TOPK, self.dictionary_size)
        scores, ids = self.top_candidates(flat, k)
        extra_scores = extra_ids = None
        if self.eos is not None and self.decodable[self.eos]:
            table = self.target_table
            extra_ids = torch.full_like(ids[:, :1], self.eos)
            extra_scores = F.linear(self._query(flat).to(table.dtype), table[self.eos:self.eos + 1]).float()
            extra_scores = extra_scores.masked_fill((ids == self.eos).any(-1, keepdim=True), -math.inf)
        out = candidate_log_probs(scores, ids, self.dictionary_size, extra_scores, extra_ids)
        out = out.view(*e_hat.shape[:-1], self.dictionary_size)
        return out if log_probs else out.exp()

    def predict(self, e_hat: torch.Tensor, k: int = 1):
        """Nearest neighbours (the paper's decoding rule) by chunked search: (scores, ids), each (N, k)."""
        return nearest_neighbours(e_hat, self.target_table, k=k, candidates=self.decodable,
                                  chunk_size=self.chunk_size)

    def frozen_numel(self) -> int:
        # a table shared with the decoder input embedding is counted there (the tied matrix is the embedding's)
        return 0 if getattr(self, "_tied_embedding", None) is not None else self.table.numel()
