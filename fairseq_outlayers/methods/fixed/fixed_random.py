"""Fixed random target embeddings: a frozen, randomly drawn classifier (Shalev, Shalev & Keshet, 2021).

The paper writes the next-word distribution as ``softmax(W f + b)`` (section 2, eq. 1), where ``f`` is the
decoder's context vector and the rows ``w_j`` of ``W`` are the target word vectors. Its proposal is to draw
``W`` once at random -- every entry uniform in [-10, 10] (section 3.1), each row divided by its L2 norm for
translation -- and to keep both ``W`` and ``b`` fixed, so that only ``f`` is learned: the model can then raise a
word's probability only by turning ``f`` towards that word's vector. The classifier's ``|V| x d`` weights are no
longer trained (Table 3: 19-33 % fewer learnable parameters), and the classifier dimension need not be the
decoder's (section 3.3), which a learned projection in front of the fixed matrix provides here. Section 3.3 also
points to Hadamard rows as fixed targets (Hoffer et al., 2018), offered here next to a Gaussian draw.

Everything fixed is a *persistent buffer*: saved in the checkpoint (so generation, resuming, checkpoint
averaging and every data-parallel worker see the same matrix), moved with ``.to(device)``, never handed to the
optimiser. The matrix is drawn on the CPU from a private ``torch.Generator``, so it depends only on its seed,
never on the model's seed, the device or the order in which other modules are initialised.

The pure functions below draw the matrix; ``FixedRandomOutput`` is the output layer.
"""
import hashlib
import logging
import math
from typing import Optional

import torch
import torch.nn as nn

from fairseq_outlayers.core.output_layer import FactorisedSoftmaxOutput

logger = logging.getLogger(__name__)

INITS = ("uniform", "gaussian", "hadamard")


def is_power_of_two(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def hadamard_rows(num_rows: int, dim: int) -> torch.Tensor:
    """The first ``num_rows`` rows of the Sylvester Hadamard matrix of order ``dim`` (entries +1/-1, float32).

    Sylvester's construction gives ``H[i, j] = (-1) ** popcount(i & j)`` for a power-of-two order; its rows are
    mutually orthogonal, so at most ``dim`` of them exist. Only the requested rows are materialised.
    """
    if not is_power_of_two(dim):
        raise ValueError(f"a Sylvester Hadamard matrix needs a power-of-two order, got {dim}")
    if not 0 < num_rows <= dim:
        raise ValueError(f"a Hadamard matrix of order {dim} has {dim} rows; {num_rows} were asked for")
    anded = torch.arange(num_rows).unsqueeze(1) & torch.arange(dim).unsqueeze(0)
    parity = torch.zeros_like(anded)
    while bool(anded.any()):
        parity ^= anded & 1
        anded = anded >> 1
    return (1 - 2 * parity).to(torch.float32)


def normalise_rows(matrix: torch.Tensor) -> torch.Tensor:
    """Each row divided by its L2 norm (the norm computed in float64), as the paper does for translation."""
    norms = torch.linalg.vector_norm(matrix, dim=1, keepdim=True, dtype=torch.float64)
    if bool((norms == 0).any()):
        raise ValueError("a fixed target vector is all zeros and cannot be normalised")
    return (matrix.double() / norms).to(matrix.dtype)


def draw_fixed_targets(num_words: int, dim: int, init: str = "uniform", value_range: float = 10.0,
                       normalize: bool = True, seed: int = 1) -> torch.Tensor:
    """The fixed ``num_words x dim`` target matrix (float32, CPU), a function of its arguments only.

    * ``uniform``  -- i.i.d. entries from U[-a, a] with a = ``value_range`` (paper section 3.1: a = 10);
    * ``gaussian`` -- i.i.d. N(0, a^2/3) entries, the variance of U[-a, a] (after normalisation the rows are
      uniformly distributed on the unit sphere, whatever a);
    * ``hadamard`` -- rows 0 .. num_words-1 of the Sylvester Hadamard matrix of order ``dim`` times a/sqrt(3)
      (same per-entry variance); needs ``dim`` a power of two and ``num_words <= dim`` (orthogonal codes exist
      only up to the dimension; no padding rule: rows beyond ``dim`` would repeat);
    * ``normalize`` divides every row by its L2 norm (paper section 3.1, the setting it found best for MT), which
      makes the result independent of a.

    The numbers come from a private ``torch.Generator`` seeded with ``seed``, on the CPU.
    """
    if init not in INITS:
        raise ValueError(f"--fixed-targets-init '{init}' is unknown; choose one of: {', '.join(INITS)}")
    if not (value_range > 0 and math.isfinite(value_range)):
        raise ValueError(f"--fixed-targets-range must be a positive number (the targets are drawn from [-R, R]); "
                         f"got {value_range}")
    if num_words <= 0 or dim <= 0:
        raise ValueError(f"fixed targets need a positive shape, got {num_words} x {dim}")
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    if init == "uniform":
        matrix = torch.rand(num_words, dim, generator=generator, dtype=torch.float32)
        matrix = matrix.mul_(2.0 * value_range).sub_(value_range)
    elif init == "gaussian":
        matrix = torch.randn(num_words, dim, generator=generator, dtype=torch.float32)
        matrix = matrix.mul_(value_range / math.sqrt(3.0))
    else:
        matrix = hadamard_rows(num_words, dim).mul_(value_range / math.sqrt(3.0))
    return normalise_rows(matrix) if normalize else matrix


def _within_rounding(loaded: torch.Tensor, exact: torch.Tensor, ulps: float = 8.0) -> bool:
    """True when ``loaded`` is ``exact`` up to a few rounding steps of the coarser of their float types (relative to
    the largest entry): an average of identical tensors, or the matrix saved in half precision."""
    if not loaded.is_floating_point():
        return False
    scale = float(exact.abs().max()) if exact.numel() else 0.0
    eps = max(torch.finfo(loaded.dtype).eps, torch.finfo(exact.dtype).eps)
    atol = ulps * eps * max(scale, 1e-30)
    return bool(torch.allclose(loaded.double(), exact.double(), rtol=0.0, atol=atol))


def fingerprint(tensor: torch.Tensor) -> str:
    """First 12 hex digits of the SHA-256 of a tensor's float32 bytes: compare classifiers across runs."""
    data = tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes()
    return hashlib.sha256(data).hexdigest()[:12]


class FixedRandomOutput(FactorisedSoftmaxOutput):
    """``logits = W (s P h) + b`` with ``W`` (|V| x d_f) and ``b`` fixed buffers; ``P`` learned, only if d_f != d;
    ``s`` a learned scalar only with ``learned_scale`` (else 1).

    Shalev et al. (2021), eq. 1 with ``W`` and ``b`` frozen. ``P`` is a bias-free linear map from the decoder
    output size ``input_dim`` to the classifier size ``target_dim`` (section 3.3: the targets may be
    lower-dimensional); without a bias, so that no per-word bias ``W c`` is learned through it. ``s`` (initialised
    to 1) is the one learned scale of Hoffer et al. (2018), "Fix your classifier": with unit-norm rows a logit is at
    most ``||P h||``, a bound a tanh-limited decoder state (the attention LSTM's) can only reach by saturating. As a
    factorised softmax layer it also serves the sampled softmax (only the sampled rows of ``W`` are used).
    """

    def __init__(self, dictionary_size: int, input_dim: int, target_dim: Optional[int] = None,
                 init: str = "uniform", value_range: float = 10.0, normalize: bool = True,
                 bias_value: float = 0.0, seed: int = 1, learned_scale: bool = False):
        super().__init__(dictionary_size, input_dim)
        target_dim = input_dim if target_dim is None else target_dim
        self.target_dim = target_dim
        self.init, self.value_range, self.normalize, self.seed = init, value_range, normalize, seed
        self.bias_value = float(bias_value)
        self.register_buffer("weight", draw_fixed_targets(dictionary_size, target_dim, init, value_range,
                                                          normalize, seed), persistent=True)
        self.register_buffer("bias", torch.full((dictionary_size,), self.bias_value), persistent=True)
        self._zero_bias = self.bias_value == 0.0  # a zero bias is skipped in the matrix product (same logits)
        if target_dim != input_dim:
            self.proj = nn.Linear(input_dim, target_dim, bias=False)
            nn.init.xavier_uniform_(self.proj.weight)
        else:
            self.proj = None
        self.scale = nn.Parameter(torch.ones(())) if learned_scale else None

    def context(self, features: torch.Tensor) -> torch.Tensor:
        context = features if self.proj is None else self.proj(features)
        return context if self.scale is None else context * self.scale.to(context.dtype)

    def target_weights(self, ids: Optional[torch.Tensor] = None):
        if ids is None:
            return self.weight, (None if self._zero_bias else self.bias)
        return self.weight.index_select(0, ids), (None if self._zero_bias else self.bias.index_select(0, ids))

    def frozen_numel(self) -> int:
        return self.weight.numel() + self.bias.numel()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """A checkpoint's classifier wins over the one the options draw (resuming, generating), with a warning
        when they differ. The same tensors up to rounding -- a checkpoint average (fairseq's
        average_checkpoints.py sums and divides) or a half-precision checkpoint -- are restored to the exact draw."""
        drawn = {name: getattr(self, name).clone() for name in ("weight", "bias")}
        differs = False
        for name, exact in drawn.items():
            loaded = state_dict.get(prefix + name)
            if loaded is None or (loaded.shape == exact.shape and _within_rounding(loaded, exact)):
                continue  # the same tensor, possibly averaged or in half precision: restored exactly below
            drawn[name] = None
            differs = differs or name == "weight"
        if differs:
            logger.warning("the fixed classifier in the checkpoint differs from the one these --fixed-targets-* "
                           "options draw; using the checkpoint's (sha256 %s)",
                           fingerprint(state_dict[prefix + "weight"]))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        with torch.no_grad():
            for name, exact in drawn.items():
                if exact is not None and prefix + name in state_dict:
                    getattr(self, name).copy_(exact)
        self._zero_bias = not bool(self.bias.any())

    def describe(self) -> str:
        """One line for the training log: shape, init, seed and the matrix's fingerprint."""
        scale = "row-normalised" if self.normalize else "unnormalised"
        init = "hadamard" if self.init == "hadamard" else f"{self.init}[-{self.value_range:g}, {self.value_range:g}]"
        if self.init == "gaussian":
            init = f"gaussian(std {self.value_range / math.sqrt(3.0):.4g})"
        proj = "" if self.proj is None else f"; learned projection {self.input_dim} -> {self.target_dim}"
        proj += "" if self.scale is None else "; learned logit scale (initial 1)"
        return (f"fixed targets {self.dictionary_size} x {self.target_dim} {init}, {scale}, bias "
                f"{self.bias_value:g}, seed {self.seed}, sha256 {fingerprint(self.weight)}{proj}")

    def extra_repr(self) -> str:
        return (f"{self.dictionary_size} x {self.target_dim}, init={self.init}, range={self.value_range:g}, "
                f"normalize={self.normalize}, bias={self.bias_value:g}, seed={self.seed}, "
                f"learned_scale={self.scale is not None}")
