"""The structure-aware output layer: a joint input-output embedding (Pappas, Miculicich Werlen & Henderson, WMT 2018).

A softmax linear unit scores word j by the dot product of a decoder state h and a row of an output matrix that
knows nothing about the other words; weight tying makes that row the word's input embedding e_j but forces the
context into the embedding space. The joint layer instead maps both sides into a shared space of size d_j with
their own non-linear projections and scores them there (paper eq. 12-14):

    g_out(e_j) = sigma(U e_j + b_u)          U: d_j x d    (output structure, shared across all words)
    g_inp(h)   = sigma(V h + b_v)            V: d_j x d_h  (context structure)
    logit_j    = g_out(e_j) . g_inp(h) + b_j

E is the decoder's input embedding itself (held by reference, so it is one tensor trained by both uses). The
owned parameters are d*d_j + d_j*d_h + |V| plus the two projection biases (eq. 16). With sigma = identity,
U = V = I and zero biases the layer is exactly weight tying (eq. 18).

The paper's ablations (Table 3) are the same layer with one side switched off:

* ``full``     -- eq. 15, both projections (the default);
* ``output``   -- eq. 7a, sigma(E W) h: only the output side is projected (into the decoder's d_h space);
* ``context``  -- eq. 7b, E sigma(W h): only the context side is projected (into the embedding's d space);
* ``bilinear`` -- eq. 6, E W h: one linear map, no activation and no bias (the classic joint-embedding form).

As in the paper's equations (and its Table 3, where the three ablations have the same size), the ablations'
single projection W (d x d_h) has no bias; all forms keep the per-word bias b. Projections are initialised with
Xavier-uniform weights (suited to tanh) and zero biases.

In the three ablations the size of the shared space is fixed by the side that is not projected, so ``joint_dim``
applies to ``full`` only.

Cost: g_out(E) is a |V| x d_j matrix. Training computes it once per forward pass (one batch, not per token);
in evaluation mode with gradients off (validation, ``fairseq-generate``) it is computed once and reused while
the weights it depends on hold the same values (compared with a copy), so beam search does not recompute it at
every decoding step. Under negative sampling only the sampled rows are projected (``target_weights(ids)``).
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from fairseq_outlayers.core.output_layer import FactorisedSoftmaxOutput, TiedReference

ACTIVATIONS = ("tanh", "relu", "sigmoid", "identity")
STRUCTURES = ("full", "output", "context", "bilinear")


def joint_activation(name: str):
    """The element-wise sigma of eq. 12-13 by name (``identity`` gives the linear special cases)."""
    if name == "tanh":
        return torch.tanh
    if name == "relu":
        return F.relu
    if name == "sigmoid":
        return torch.sigmoid
    if name == "identity":
        return lambda x: x
    raise ValueError(f"--joint-activation '{name}' is unknown; choose one of {', '.join(ACTIVATIONS)}")


def joint_logits(embeddings: torch.Tensor, features: torch.Tensor, out_proj: Optional[nn.Linear],
                 ctx_proj: Optional[nn.Linear], word_bias: Optional[torch.Tensor], activation: str = "tanh",
                 ) -> torch.Tensor:
    """Reference form of eq. 14 for the given rows of E: ``sigma(E U^T + b_u) sigma(V h + b_v)^T + b``.

    A projection given as None is the identity and its activation is skipped too (the ablations); in the
    ``bilinear`` form pass ``activation='identity'``. Written for clarity, used by the tests as the reference.
    """
    act = joint_activation(activation)
    out = embeddings if out_proj is None else act(out_proj(embeddings))
    ctx = features if ctx_proj is None else act(ctx_proj(features))
    return F.linear(ctx, out, word_bias)


def _same_tensors(old: Tuple[torch.Tensor, ...], new: Tuple[torch.Tensor, ...]) -> bool:
    return len(old) == len(new) and all(
        a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and torch.equal(a, b)
        for a, b in zip(old, new))


class JointOutputLayer(TiedReference, FactorisedSoftmaxOutput):
    """Joint input-output embedding output layer (Pappas et al. 2018, eq. 14-15) with the ablations of Table 3.

    Args:
        embedding: the decoder's input embedding module (|V| x d); referenced, never copied.
        input_dim: d_h, the size of the decoder features fed to the output layer.
        joint_dim: d_j, the size of the joint space (``structure='full'`` only; paper grid 512/2048/4096).
        activation: sigma, one of ``tanh`` (paper), ``relu``, ``sigmoid``, ``identity``.
        structure: ``full`` (eq. 15), ``output`` (eq. 7a), ``context`` (eq. 7b) or ``bilinear`` (eq. 6).
        dropout: dropout applied to the projected context g_inp(h) in the joint space during training.
        word_bias: learn the per-word bias b (paper: yes).
    """

    def __init__(self, embedding: nn.Module, input_dim: int, joint_dim: int = 512, activation: str = "tanh",
                 structure: str = "full", dropout: float = 0.0, word_bias: bool = True):
        num_words, embed_dim = embedding.weight.shape
        super().__init__(num_words, input_dim)
        # the one check of each option (messages name the command-line option: that is where values come from)
        if structure not in STRUCTURES:
            raise ValueError(f"--joint-structure '{structure}' is unknown; choose one of {', '.join(STRUCTURES)}")
        if joint_dim <= 0:
            raise ValueError(f"--joint-dim must be a positive integer, got {joint_dim}; the paper uses 512, 2048 "
                             "or 4096")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"--joint-dropout must be in [0, 1), got {dropout}")
        self._set_tied_embedding(embedding)
        self.embed_dim = embed_dim
        self.structure = structure
        self.activation = activation
        self._act = joint_activation(activation)
        self.dropout = dropout
        # which side is projected, and into which space (the unprojected side fixes the joint size)
        if structure == "full":
            self.joint_dim = joint_dim
            self.out_proj = nn.Linear(embed_dim, joint_dim)  # U, b_u
            self.ctx_proj = nn.Linear(input_dim, joint_dim)  # V, b_v
        elif structure == "output":  # sigma(E W) h: W maps the embeddings into the decoder's space, no bias
            self.joint_dim = input_dim
            self.out_proj = nn.Linear(embed_dim, input_dim, bias=False)
            self.ctx_proj = None
        elif structure == "context":  # E sigma(W h): W maps the decoder state into the embedding space, no bias
            self.joint_dim = embed_dim
            self.out_proj = None
            self.ctx_proj = nn.Linear(input_dim, embed_dim, bias=False)
        else:  # bilinear: E W h, one linear map without bias or activation
            self.joint_dim = embed_dim
            self.out_proj = None
            self.ctx_proj = nn.Linear(input_dim, embed_dim, bias=False)
        for proj in (self.out_proj, self.ctx_proj):
            if proj is not None:
                nn.init.xavier_uniform_(proj.weight)
                if proj.bias is not None:
                    nn.init.zeros_(proj.bias)
        self.bias = nn.Parameter(torch.zeros(num_words)) if word_bias else None
        # evaluation-mode cache: (copies of E, U, b_u, g_out(E)); a plain attribute, not part of the state dict
        self._cache: Optional[Tuple[Tuple[torch.Tensor, ...], torch.Tensor]] = None
        self.cache_stats = {"hits": 0, "misses": 0}

    # -- the two projections -------------------------------------------------------------------------------
    def _project_outputs(self, rows: torch.Tensor) -> torch.Tensor:
        """g_out on embedding rows (eq. 12); the identity when the output side is not projected."""
        if self.out_proj is None:
            return rows
        return self._act(self.out_proj(rows))

    def context(self, features: torch.Tensor) -> torch.Tensor:
        """g_inp(h) (eq. 13), with dropout in the joint space while training."""
        if self.ctx_proj is None:
            ctx = features
        elif self.structure == "bilinear":
            ctx = self.ctx_proj(features)
        else:
            ctx = self._act(self.ctx_proj(features))
        return F.dropout(ctx, p=self.dropout, training=self.training)

    # -- the output matrix g_out(E), cached in evaluation -----------------------------------------------------
    def _cache_inputs(self) -> Tuple[torch.Tensor, ...]:
        tensors = [self.tied_embedding.weight]
        if self.out_proj is not None:
            tensors += [t for t in (self.out_proj.weight, self.out_proj.bias) if t is not None]
        return tuple(t.detach() for t in tensors)

    def output_matrix(self) -> torch.Tensor:
        """E' = g_out(E), |V| x joint_dim. Computed once per call in training; in evaluation mode with gradients
        disabled it is cached and reused while E, U and b_u hold the values it was computed from (compared with a
        copy: fairseq's optimizers write through ``.data``, which changes neither storage nor version, so only
        the values tell; comparing reads |V| x d numbers, recomputing multiplies |V| x d by d x d_j)."""
        embedding = self.tied_embedding.weight
        if self.out_proj is None:
            return embedding
        if self.training or torch.is_grad_enabled():
            return self._project_outputs(embedding)
        inputs = self._cache_inputs()
        if self._cache is not None and _same_tensors(self._cache[0], inputs):
            self.cache_stats["hits"] += 1
            return self._cache[1]
        self.cache_stats["misses"] += 1
        value = self._project_outputs(embedding)
        self._cache = (tuple(t.clone() for t in inputs), value)
        return value

    def clear_cache(self):
        self._cache = None

    def train(self, mode: bool = True):
        self.clear_cache()  # training changes the weights: free the cached copy
        return super().train(mode)

    def _apply(self, fn, *args, **kwargs):
        self.clear_cache()  # .to(), .half(), .cuda() ... move or convert the weights
        return super()._apply(fn, *args, **kwargs)

    def target_weights(self, ids: Optional[torch.Tensor] = None):
        if ids is None:
            return self.output_matrix(), self.bias
        bias = None if self.bias is None else self.bias.index_select(0, ids)
        return self._project_outputs(self._tied_rows(ids)), bias

    def closed_form_parameter_count(self) -> Dict[str, int]:
        """Eq. 16 and its ablation analogues: projection weights, projection biases and per-word bias."""
        d, d_h, d_j, v = self.embed_dim, self.input_dim, self.joint_dim, self.dictionary_size
        weights = {"full": d * d_j + d_j * d_h, "output": d * d_h, "context": d * d_h, "bilinear": d * d_h}
        biases = {"full": 2 * d_j, "output": 0, "context": 0, "bilinear": 0}
        word = v if self.bias is not None else 0
        return {"projections": weights[self.structure], "projection_biases": biases[self.structure],
                "word_bias": word,
                "total": weights[self.structure] + biases[self.structure] + word}

    def extra_repr(self) -> str:
        return (f"structure={self.structure}, joint_dim={self.joint_dim}, activation={self.activation}, "
                f"dropout={self.dropout}, embed_dim={self.embed_dim}, input_dim={self.input_dim}, "
                f"words={self.dictionary_size}")
