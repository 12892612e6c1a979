"""The baseline output layers: a learned (untied) softmax and decoder weight tying.

Tying (Press & Wolf 2017; Inan et al. 2017) reuses the decoder's input embedding E as the output matrix:
``logits = h E^T``. It is the special case the joint input-output layer (Pappas et al. 2018, eq. 5) and the
shared-private embeddings (Liu et al. 2019) reduce to, so tests compare those methods against this module.
"""
from typing import Optional

import torch
import torch.nn as nn

from fairseq_outlayers.core.output_layer import FactorisedSoftmaxOutput, TiedReference


class LearnedSoftmaxOutput(FactorisedSoftmaxOutput):
    """Untied softmax: its own |V| x d matrix (fairseq's init, N(0, d^-1/2)), optional per-word bias."""

    def __init__(self, dictionary_size: int, input_dim: int, bias: bool = False):
        super().__init__(dictionary_size, input_dim)
        self.weight = nn.Parameter(torch.empty(dictionary_size, input_dim))
        nn.init.normal_(self.weight, mean=0.0, std=input_dim ** -0.5)
        self.bias = nn.Parameter(torch.zeros(dictionary_size)) if bias else None

    def target_weights(self, ids: Optional[torch.Tensor] = None):
        if ids is None:
            return self.weight, self.bias
        bias = None if self.bias is None else self.bias.index_select(0, ids)
        return self.weight.index_select(0, ids), bias


class TiedSoftmaxOutput(TiedReference, FactorisedSoftmaxOutput):
    """Decoder weight tying: the output matrix *is* the decoder's input embedding weight (one tensor)."""

    def __init__(self, embedding: nn.Module, input_dim: int, bias: bool = False):
        num_words, dim = embedding.weight.shape
        if dim != input_dim:
            raise ValueError(
                f"tied output layer: decoder output dim {input_dim} != target embedding dim {dim}; "
                "set the decoder output dim (--decoder-output-dim of the Transformer, --decoder-out-embed-dim of the "
                "LSTM) equal to --decoder-embed-dim, or use --output-layer softmax"
            )
        super().__init__(num_words, input_dim)
        self._set_tied_embedding(embedding)
        self.bias = nn.Parameter(torch.zeros(num_words)) if bias else None

    def target_weights(self, ids: Optional[torch.Tensor] = None):
        bias = self.bias if (self.bias is None or ids is None) else self.bias.index_select(0, ids)
        return self._tied_rows(ids), bias
