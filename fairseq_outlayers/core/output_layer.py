"""The output-layer seam: the module that turns decoder features into scores over the target dictionary.

Every output layer in this package is an ``OutputLayer``. It answers the three questions the model core asks:

* ``forward(features)`` -- what the decoder returns as ``net_output[0]`` (logits over the dictionary for the
  softmax family);
* ``get_normalized_probs(net_output, log_probs)`` -- (log-)probabilities over the whole target dictionary, what
  ``fairseq-generate``'s ``SequenceGenerator`` and fairseq's criterions call;
* ``parameter_counts()`` -- how many parameters it owns and how many of those are trained.

Most layers are *factorised softmax* layers: ``logits = context(h) @ targets(ids).T + bias(ids)`` where
``context`` maps decoder features into the space of the target vectors and ``targets`` returns the rows of the
output matrix for a set of word ids (all of them by default). Writing every softmax-type layer in that form is
what lets one sampled-softmax criterion (negative sampling) serve all of them: it asks only for the rows it needs.

Layers that share weights with the decoder's input embedding (tying, the joint layer, an embedding built from others) hold a
*reference* to the embedding module without registering it as a submodule, so the weight is one tensor, it is
saved once under the embedding's name and it is counted once.
"""
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


def linear_rows(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` as one matrix product over the rows of ``x`` flattened to 2-D.

    Decoding feeds (B*beam, 1, d) views of a (1, B*beam, d) tensor. Without gradients to the weight (a frozen
    buffer, or any weight under ``torch.no_grad``), ``torch.matmul`` does not fold such a view into one ``mm``.
    It broadcasts the weight to a batched ``bmm`` instead, about 5x slower on a CPU. The transposed (T x B -> B x T)
    features of training are copied once, as ``.contiguous()`` did. Same values, bit for bit, as the folded product
    (``tests/test_output_layer_rows.py``)."""
    flat = x.reshape(-1, x.size(-1))
    return F.linear(flat, weight, bias).view(*x.shape[:-1], weight.size(0))


class OutputLayer(nn.Module):
    """Base class of every output layer. Subclasses implement ``forward``."""

    def __init__(self, dictionary_size: int, input_dim: int):
        super().__init__()
        self.dictionary_size = dictionary_size
        self.input_dim = input_dim

    def get_normalized_probs(self, net_output, log_probs: bool):
        """(Log-)probabilities over the target dictionary from ``net_output[0]`` (computed in float32)."""
        scores = net_output[0].float()
        return F.log_softmax(scores, dim=-1) if log_probs else F.softmax(scores, dim=-1)

    def frozen_numel(self) -> int:
        """Elements of fixed (never trained) weights kept as buffers, e.g. a frozen random classifier."""
        return 0

    def parameter_counts(self) -> Dict[str, int]:
        """Parameters this layer owns (excluding tied references), how many are trained, and frozen weights."""
        owned = sum(p.numel() for p in self.parameters())
        trained = sum(p.numel() for p in self.parameters() if p.requires_grad)
        frozen = owned - trained + self.frozen_numel()
        return {"owned": owned, "trained": trained, "frozen": frozen}


class FactorisedSoftmaxOutput(OutputLayer):
    """``logits = context(h) @ targets(ids).T + bias(ids)``; subclasses define ``context`` and ``target_weights``."""

    def context(self, features: torch.Tensor) -> torch.Tensor:
        """Map decoder features (..., input_dim) to the space of the target vectors (..., target_dim)."""
        return features

    def target_weights(self, ids: Optional[torch.Tensor] = None):
        """Rows of the output matrix for ``ids`` (all words when None) and their bias (or None)."""
        raise NotImplementedError

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        weight, bias = self.target_weights(None)
        return linear_rows(self.context(features), weight, bias)

    def logit_factors(self, features: torch.Tensor):
        """``(context, weight, bias)`` with ``logits == F.linear(context, weight, bias)``: the (V, d) matrix and
        bias of the whole dictionary and the features mapped into its space, for a loss that never forms the
        logits (the fused cross-entropy)."""
        weight, bias = self.target_weights(None)
        return self.context(features), weight, bias

    def sampled_logits(self, features: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Logits restricted to the words ``ids`` (1-D LongTensor): (..., len(ids)). Only those rows are computed."""
        weight, bias = self.target_weights(ids)
        return linear_rows(self.context(features), weight, bias)


class TiedReference:
    """Mixin: keep a non-registered reference to the embedding module whose weight an output layer reuses."""

    def _set_tied_embedding(self, embedding: nn.Module):
        # Not fairseq's shared Parameter (output.weight = embed.weight): the tied weight may be computed at every
        # step (an embedding built from others), and a second registered name would add a key to every checkpoint.
        # So the module is held unregistered (object.__setattr__ bypasses nn.Module's registration) and its weight is saved,
        # moved and counted once, under the decoder's embedding (tests/test_core.py::test_tied_weight_is_one_tensor).
        object.__setattr__(self, "_tied_embedding", embedding)

    @property
    def tied_embedding(self) -> nn.Module:
        return self._tied_embedding

    def _tied_rows(self, ids: Optional[torch.Tensor]) -> torch.Tensor:
        weight = self._tied_embedding.weight
        return weight if ids is None else weight.index_select(0, ids)


def folded_linear(layer: FactorisedSoftmaxOutput):
    """One plain linear map, ``(weight, bias)`` with ``F.linear(h, weight, bias) == layer(h)``.

    For a factorised layer whose ``context`` is affine, ``context(h) = J h + c`` (the identity for softmax and
    tying; a bias-free projection or a scale for the fixed classifier): ``weight = W J`` and ``bias = W c + b``,
    folded in float64 and returned in the layer's dtype. The layer must be in evaluation mode (no dropout). ``bias`` is None when the layer has none and c = 0.
    With the identity as context the result is the layer's own matrix, bit for bit."""
    if layer.training:
        raise ValueError("folded_linear needs the layer in evaluation mode (model.eval())")
    with torch.no_grad():
        weight, bias = layer.target_weights(None)
        basis = torch.cat([weight.new_zeros(1, layer.input_dim), torch.eye(layer.input_dim).to(weight)])
        mapped = layer.context(basis).double()
        offset, columns = mapped[0], mapped[1:] - mapped[0]  # columns: J^T, one row per input feature
        wide = weight.double()
        folded = (columns @ wide.t()).t()
        shift = wide @ offset if bool(offset.any()) else None
        if bias is not None:
            shift = bias.double() if shift is None else shift + bias.double()
        return folded.to(weight.dtype).contiguous(), None if shift is None else shift.to(weight.dtype)


def lookup_table(embedding: nn.Module) -> torch.Tensor:
    """The (V, d) table of an embedding module whose output for a token depends on that token only, so that
    ``embedding(tokens) == table[tokens]``: a learned matrix, one assembled from blocks, a frozen table through a
    map. ``V`` is the module's ``num_embeddings``; the module must be in evaluation mode."""
    if embedding.training:
        raise ValueError("lookup_table needs the module in evaluation mode (model.eval())")
    with torch.no_grad():
        ids = torch.arange(embedding.num_embeddings).unsqueeze(0)
        return embedding(ids).squeeze(0).contiguous()
