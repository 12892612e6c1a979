"""The continuous output layer of Kumar & Tsvetkov (2019, section 3) and the tied target-vector input embedding
(section 4.4).

``ContinuousOutput`` maps decoder features h to a vector ê = W h + b in R^m (optionally after a LayerNorm of h),
and keeps the frozen table of unit target word vectors e(w) as a buffer (saved with the checkpoint):

* ``forward(h)`` returns ê; the training losses (``criterions/continuous_losses.py``) compare it with e(w) of
  the reference word only, so their cost does not depend on the vocabulary size V;
* ``get_normalized_probs`` turns ê into log-probabilities over the dictionary for ``fairseq-generate``: the vMF
  log-density of each word, log C_m(‖ê‖) + êᵀe(w), renormalised over the dictionary. log C_m does not depend on
  w, so this is ``log_softmax_w(êᵀe(w))``: the word of highest vMF density (largest cosine, the paper's
  nearest-neighbour decoding) has the highest probability, and a beam search adds these log-probabilities up.
  With ``score_scale`` set, ``log_softmax_w(s · cos(ê, e(w)))`` is used instead (for models trained with the
  cosine, L2 or max-margin losses, whose ‖ê‖ carries no meaning); the arg-max is the same word.

Entries that are never generated (padding, <s>, fairseq's filler words, dictionary words without a vector, which
share <unk>'s vector) are masked with the ``decodable`` buffer.
"""
import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .output_layer import OutputLayer, TiedReference
from .vmf import nearest_neighbours


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
                 score_scale: Optional[float] = None, chunk_size: int = 16384):
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

    @property
    def target_table(self) -> torch.Tensor:
        """The (V, m) frozen unit target vectors (zero row for padding)."""
        tied = getattr(self, "_tied_embedding", None)
        return tied.table if tied is not None else self.table

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if self.layer_norm is not None:
            features = self.layer_norm(features)
        return self.proj(features)

    def scores(self, e_hat: torch.Tensor) -> torch.Tensor:
        """Unnormalised log-scores over the dictionary (..., V) in float32: êᵀe(w) (or s·cos), -inf where masked."""
        table = self.target_table
        if self.score_scale is not None:
            e_hat = F.normalize(e_hat.float(), dim=-1) * self.score_scale
        logits = F.linear(e_hat.to(table.dtype), table).float()
        return logits.masked_fill(~self.decodable, -math.inf)

    def get_normalized_probs(self, net_output, log_probs: bool):
        logits = self.scores(net_output[0])
        return F.log_softmax(logits, dim=-1) if log_probs else F.softmax(logits, dim=-1)

    def predict(self, e_hat: torch.Tensor, k: int = 1):
        """Nearest neighbours (the paper's decoding rule) by chunked search: (scores, ids), each (N, k)."""
        return nearest_neighbours(e_hat, self.target_table, k=k, candidates=self.decodable,
                                  chunk_size=self.chunk_size)

    def frozen_numel(self) -> int:
        # a table shared with the decoder input embedding is counted there (the tied matrix is the embedding's)
        return 0 if getattr(self, "_tied_embedding", None) is not None else self.table.numel()
