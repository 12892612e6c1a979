"""The training losses of continuous outputs (Kumar & Tsvetkov 2019, sections 3 and 4.2; syn-margin: Bhat, Kumar &
Tsvetkov 2019) and what κ says about the cosine under each vMF loss (the κ alarms). Per token: ``e_hat`` (N, m)
predictions, ``target`` (N, m) unit target vectors, a loss (N,). log C_m(κ) comes from ``bessel.py``.
"""
import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from .bessel import (FAST_MIN_DIM, _fast_eager, _fast_tables, _out_dtype, bessel_iv_ratio, compiled_or_eager,
                     neg_log_cm_and_ratio)
from .bessel import constant_like as _constant


# ------------------------------------------------------------------------------------------------------------
# losses: e_hat (N, m) predictions, target (N, m) unit target vectors; each returns a per-token loss (N,)
# ------------------------------------------------------------------------------------------------------------

def vmf_nll_loss(e_hat: torch.Tensor, target: torch.Tensor, lambda1: float = 0.0, lambda2: float = 1.0,
                 approximate: bool = False, compiled: bool = False) -> torch.Tensor:
    """NLLvMF with the paper's regularisers (section 3):

    ``-log C_m(‖ê‖) - λ2 êᵀe(w) + λ1 ‖ê‖``.

    λ1 = 0, λ2 = 1: plain NLLvMF; λ1 > 0: NLLvMF_reg1 (the paper uses λ1 = 0.2); λ2 < 1: NLLvMF_reg2 (eq. 3,
    λ2 = 0.1); both: NLLvMF_reg1+reg2. ``approximate`` uses the appendix approximation of log C_m. Computed in
    float32 (float64 for float64 input) with a hand-written gradient (``RowLoss``). ``compiled`` runs the row
    computation through ``torch.compile`` (see ``COMPILED_ROWS``).
    """
    return RowLoss.apply(e_hat, target, _nll_parts, float(lambda1), float(lambda2), bool(approximate),
                         bool(compiled))


def vmf_released_loss(e_hat: torch.Tensor, target: torch.Tensor, lam: float = 0.2,
                      approximate: bool = False, compiled: bool = False) -> torch.Tensor:
    """The variant the authors' released code trains with (it is not the paper's printed reg1/reg2):

    ``-log C_m(κ) + log(1 + κ) (λ - cos(ê, e(w)))`` with κ = ‖ê‖ and λ = 0.2.

    The cosine reuses κ: ``êᵀe / max(κ ‖e‖, 1e-12)`` (0 for a zero prediction, no NaN); ‖e‖ takes no gradient.
    Computed like ``vmf_nll_loss``.
    """
    return RowLoss.apply(e_hat, target, _released_parts, float(lam), bool(approximate), bool(compiled))


#: the smallest κ‖e‖ that divides the released loss's cosine (below it: this value, no gradient through it)
COSINE_FLOOR = 1e-12

#: ``compiled=True``: the whole row computation of a vMF loss (the norms, -log C_m and its derivative, the loss and
#: the gradient's coefficients) is one ``torch.compile`` graph: fused kernels on a GPU instead of one launch per operation.
#: It serves the exact log C_m for m >= FAST_MIN_DIM; the approximation and smaller m run eagerly. Any compiler
#: failure warns once and runs eagerly from then on (``bessel.compiled_or_eager``).
COMPILED_ROWS = {"nll": {"kernel": None, "failed": False}, "released": {"kernel": None, "failed": False}}


def _neg_log_cm(kappa, m: int, approximate: bool, need_grad: bool, tables):
    """(-log C_m(κ), its κ-derivative or None): from the fast path's ``tables`` when given (the compiled rows),
    else ``neg_log_cm_and_ratio``."""
    if tables is None:
        return neg_log_cm_and_ratio(kappa, m, approximate, need_grad)
    return _fast_eager(kappa, *tables, -1.0, need_grad)


def _rows(name: str, rows, e, target, need_grad: bool, approximate: bool, compiled: bool, *args):
    """Run ``rows(e, target, need_grad, approximate, tables, *args)`` eagerly, or compiled (``COMPILED_ROWS``)."""
    m = e.size(-1)
    if compiled and not approximate and m >= FAST_MIN_DIM:
        kernel = compiled_or_eager(rows, COMPILED_ROWS[name], f"the vMF loss ({name})")
        return kernel(e, target, need_grad, False, _fast_tables(m, e.dtype, e.device, -1.0), *args)
    return rows(e, target, need_grad, approximate, None, *args)


def _radial(d: torch.Tensor, kappa: torch.Tensor) -> torch.Tensor:
    """α = d/κ, the coefficient of ê in a gradient whose κ-derivative is d: 0 at κ = 0 (ê = 0, as torch's norm
    gives), and also where d/κ overflows (κ below the dtype's smallest normal number, a zero prediction)."""
    return torch.div(d, kappa).nan_to_num_(0.0, 0.0, 0.0)


def _nll_parts(e, target, need_grad: bool, lambda1: float, lambda2: float, approximate: bool, compiled: bool):
    return _rows("nll", _nll_rows, e, target, need_grad, approximate, compiled, lambda1, lambda2)


def _nll_rows(e, target, need_grad: bool, approximate: bool, tables, lambda1: float, lambda2: float):
    """(loss, α, γ) of ``vmf_nll_loss``: the gradient in ê is α ê - γ e with α = (A_m(κ) + λ1)/κ, γ = λ2."""
    kappa = torch.linalg.vector_norm(e, dim=-1)
    loss, ratio = _neg_log_cm(kappa, e.size(-1), approximate, need_grad, tables)
    loss = loss.add_((e * target).sum(-1), alpha=-lambda2)
    if lambda1:
        loss = loss.add_(kappa, alpha=lambda1)
    if not need_grad:
        return loss, None, None
    return loss, _radial(ratio.add_(_constant(lambda1, ratio)) if lambda1 else ratio, kappa), lambda2


def _released_parts(e, target, need_grad: bool, lam: float, approximate: bool, compiled: bool):
    return _rows("released", _released_rows, e, target, need_grad, approximate, compiled, lam)


def _released_rows(e, target, need_grad: bool, approximate: bool, tables, lam: float):
    """(loss, [α, γ], None) of ``vmf_released_loss``, with γ = c = log(1 + κ) / max(κ‖e‖, 1e-12): the gradient in
    ê is α ê - γ e with ``α κ = (λ - cos)/(1 + κ) + A_m(κ) + c cos ‖e‖`` (the last term only where
    κ‖e‖ >= 1e-12: it comes through the clamped denominator)."""
    kappa = torch.linalg.vector_norm(e, dim=-1)
    target_norm = torch.linalg.vector_norm(target, dim=-1)
    neg_log_c, ratio = _neg_log_cm(kappa, e.size(-1), approximate, need_grad, tables)
    product = kappa * target_norm
    floor = _constant(COSINE_FLOOR, kappa)
    denominator = product.clamp_min(floor)
    cos = (e * target).sum(-1).div_(denominator)
    log1p = torch.log1p(kappa)
    lam_cos = torch.sub(_constant(lam, cos), cos)
    loss = torch.addcmul(neg_log_c, log1p, lam_cos)
    if not need_grad:
        return loss, None, None
    c = torch.div(log1p, denominator)
    unclamped_norm = torch.where(product >= floor, target_norm, _constant(0.0, kappa))
    d = torch.addcmul(ratio, c * cos, unclamped_norm).addcdiv_(lam_cos, kappa + _constant(1.0, kappa))
    return loss, torch.stack([_radial(d, kappa), c], -1), None


class RowLoss(torch.autograd.Function):
    """A per-row loss ℓ(ê, e) whose gradient in ê is ``g (α ê - γ e)`` and in e ``-g γ ê``, from
    ``parts(ê, e, need_grad, *args) -> (loss, α, γ)`` with γ one number, or ``(loss, [α, γ], None)`` with [α, γ]
    per row on the last dimension. The forward computes α and γ with the loss, so the backward is three
    operations (the autograd graph of the same loss: about 25). Inputs are cast to float32 (float64 stays
    float64); gradients come back in the inputs' dtypes."""

    @staticmethod
    def forward(ctx, e_hat, target, parts, *args):
        work = torch.float64 if torch.float64 in (e_hat.dtype, target.dtype) else torch.float32
        e = e_hat if e_hat.dtype == work else e_hat.to(work)
        t = target if target.dtype == work else target.to(work)
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        loss, coefficients, gamma = parts(e, t, need_grad, *args)
        if need_grad:
            ctx.dtypes, ctx.gamma = (e_hat.dtype, target.dtype), gamma
            ctx.save_for_backward(e, t, coefficients)
        return loss

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        e, t, coefficients = ctx.saved_tensors
        if ctx.gamma is None:  # [α, γ] per row
            scaled = coefficients * grad.unsqueeze(-1)
            grad_alpha, grad_gamma, gamma = scaled[..., :1], scaled[..., 1:], 1.0
        else:
            grad_alpha, grad_gamma, gamma = (coefficients * grad).unsqueeze(-1), grad.unsqueeze(-1), ctx.gamma
        grad_e = grad_t = None
        if ctx.needs_input_grad[0]:
            grad_e = torch.addcmul(grad_alpha * e, grad_gamma, t, value=-gamma)
            grad_e = grad_e if grad_e.dtype == ctx.dtypes[0] else grad_e.to(ctx.dtypes[0])
        if ctx.needs_input_grad[1]:
            grad_t = (grad_gamma * e).mul_(-gamma)
            grad_t = grad_t if grad_t.dtype == ctx.dtypes[1] else grad_t.to(ctx.dtypes[1])
        return (grad_e, grad_t, None) + (None,) * (len(ctx.needs_input_grad) - 3)


def cosine_similarity(e_hat: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """cos(ê, e) per row; 0 for a zero prediction (no NaN). ``F.normalize``'s value and gradient (norms clamped
    at 1e-12), divided once per row rather than once per element: 2.5x faster on the CPU."""
    norms = torch.linalg.vector_norm(e_hat, dim=-1).clamp_min(1e-12) * torch.linalg.vector_norm(target, dim=-1
                                                                                                ).clamp_min(1e-12)
    return (e_hat * target).sum(-1) / norms


def cosine_loss(e_hat: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``1 - cos(ê, e(w))`` (section 4.2)."""
    return 1.0 - cosine_similarity(e_hat, target)


def l2_loss(e_hat: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``‖ê - e(w)‖``, the square-rooted squared error of section 4.2 (gradient 0 where ê = e(w), not NaN)."""
    return torch.linalg.vector_norm(e_hat - target, dim=-1)


@torch.no_grad()
def most_informative_negatives(e_hat: torch.Tensor, target_ids: torch.Tensor, table: torch.Tensor,
                               candidates: Optional[torch.Tensor] = None, chunk_size: int = 16384
                               ) -> torch.Tensor:
    """For each row, ``argmax_(j ≠ w) cos(ê, e_j) - cos(e_w, e_j)`` over the unit table (Lazaridou et al. 2015,
    as used in section 4.2): the word closest to the prediction and farthest from the target. ``candidates``
    (V,) bool restricts j (padding and other never-predicted entries are excluded by the caller). Chunked over
    the vocabulary: memory N x chunk_size."""
    direction = F.normalize(e_hat.to(table.dtype), dim=-1) - table.index_select(0, target_ids)
    best_val = torch.full((e_hat.size(0),), -math.inf, dtype=torch.float32, device=e_hat.device)
    best_idx = torch.zeros(e_hat.size(0), dtype=torch.long, device=e_hat.device)
    for start in range(0, table.size(0), chunk_size):
        part = table[start:start + chunk_size]
        scores = F.linear(direction, part).float()
        if candidates is not None:
            scores.masked_fill_(~candidates[start:start + chunk_size].unsqueeze(0), -math.inf)
        # the target itself is no negative (written without boolean indexing: no device-to-host sync)
        local = (target_ids - start).unsqueeze(1)
        inside = (local >= 0) & (local < part.size(0))
        local = local.clamp(0, part.size(0) - 1)
        scores.scatter_(1, local, torch.where(inside, -math.inf, scores.gather(1, local)))
        val, idx = scores.max(dim=-1)
        better = val > best_val
        best_val = torch.where(better, val, best_val)
        best_idx = torch.where(better, idx + start, best_idx)
    return best_idx


def max_margin_loss(e_hat: torch.Tensor, target_ids: torch.Tensor, table: torch.Tensor, gamma: float = 0.5,
                    candidates: Optional[torch.Tensor] = None, chunk_size: int = 16384) -> torch.Tensor:
    """``max(0, γ + cos(ê, e_neg) - cos(ê, e_w))`` with the single most informative negative (section 4.2,
    γ = 0.5). ``table`` is the unit target table (V, m); the negative search costs O(V) per token."""
    negatives = most_informative_negatives(e_hat, target_ids, table, candidates, chunk_size)
    pos = cosine_similarity(e_hat, table.index_select(0, target_ids).to(e_hat.dtype))
    neg = cosine_similarity(e_hat, table.index_select(0, negatives).to(e_hat.dtype))
    return torch.clamp(gamma + neg - pos, min=0.0)


def synthetic_negatives(e_hat: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The synthetic negative of Bhat, Kumar & Tsvetkov (WNGT 2019, figure 1, "by projection"): the component of
    ê orthogonal to e(w), normalised, ``u_orth = (ê - (êᵀe)e) / ‖ê - (êᵀe)e‖`` with e = e(w)/‖e(w)‖. The zero
    vector where ê is parallel to e(w) or zero (no NaN)."""
    unit = F.normalize(target.to(e_hat.dtype), dim=-1)
    return F.normalize(e_hat - (e_hat * unit).sum(-1, keepdim=True) * unit, dim=-1)


def synthetic_margin_loss(e_hat: torch.Tensor, target: torch.Tensor, gamma: float = 0.5) -> torch.Tensor:
    """syn-margin (Bhat, Kumar & Tsvetkov, WNGT 2019): the max-margin loss with the synthetic negative u_orth of
    ``synthetic_negatives`` in place of a searched word,

    ``max(0, γ + cos(ê, u_orth) - cos(ê, e(w)))`` = ``max(0, γ + sin θ - cos θ)``, θ the angle between ê and e(w).

    No vocabulary search: it reads the target row only. cos(ê, u_orth) is computed as ‖ê - (êᵀe)e‖ / ‖ê‖, its
    value. The gradient is the one through u_orth, and also the one with u_orth held constant (êᵀ∂u_orth = 0),
    without normalising a near-zero vector when ê is almost parallel to e(w). A zero prediction gives γ (no NaN).
    """
    unit = F.normalize(target.to(e_hat.dtype), dim=-1)
    dot = (e_hat * unit).sum(-1)
    kappa = torch.linalg.vector_norm(e_hat, dim=-1).clamp_min(1e-12)
    sin = torch.linalg.vector_norm(e_hat - dot.unsqueeze(-1) * unit, dim=-1) / kappa  # cos(ê, u_orth)
    return torch.clamp(gamma + sin - dot / kappa, min=0.0)



# ------------------------------------------------------------------------------------------------------------
# what κ says about the cosine: the stationary point of each vMF loss in κ, and the κ alarms
# ------------------------------------------------------------------------------------------------------------

def implied_cosine(kappa: torch.Tensor, m: int, variant: str, lambda1: float = 0.0, lambda2: float = 1.0,
                   released_lambda: float = 0.2) -> torch.Tensor:
    """The cosine ĉ(κ) at which the κ-derivative of the loss vanishes, i.e. the expected cos(ê, e(w)) that a
    prediction of norm κ stands for once the loss has settled κ (A_m = I_(m/2)/I_(m/2-1)):

    * plain: A_m(κ) = ĉ;  reg1: A_m(κ) + λ1 = ĉ;  reg2: A_m(κ) = λ2 ĉ;  reg1+reg2: A_m(κ) + λ1 = λ2 ĉ;
    * released: A_m(κ) + (λ - ĉ)/(1 + κ) = 0, so ĉ = λ + (1 + κ) A_m(κ).

    Since A_m(κ) ≈ κ/m for κ ≪ m, the exact forms need κ ≈ m·ĉ (about 100-200 for m = 300) and the released
    form only κ ≈ (m ĉ)^(1/2) (about 10). Float64."""
    a = bessel_iv_ratio(m / 2 - 1, torch.as_tensor(kappa, dtype=torch.float64))
    if variant == "released":
        return released_lambda + (1 + torch.as_tensor(kappa, dtype=torch.float64)) * a
    if variant in ("reg1", "reg1+reg2", "plain", "reg2"):
        return (a + lambda1) / lambda2
    raise ValueError(f"unknown vMF variant {variant!r}")


def kappa_alarm_bounds(m: int, variant: str, lambda1: float = 0.0, lambda2: float = 1.0,
                       released_lambda: float = 0.2) -> Tuple[float, float]:
    """(κ_low, κ_high) of the κ alarms, from ``implied_cosine`` ĉ(κ) (increasing in κ) and the cosine of a
    random direction in R^m, ε = m^(-1/2) (its standard deviation):

    * κ < κ_low where ĉ(κ) - ĉ(0) < ε: the norm encodes less agreement with the target than a random direction
      has; the loss has pulled ê to the origin, where its direction is whatever the last updates left (the
      word is lost for nearest-neighbour decoding);
    * κ > κ_high where ĉ(κ) > 1 - ε: the norm claims a cosine that no word of a table with that resolution can
      be told apart from a perfect match by; beam scores log_softmax(êᵀe) are then one-hot and each update
      turns ê by about 1/κ of its step (the norm has run away). inf when ĉ never gets there.
    Found by bisection in float64."""
    eps = m ** -0.5

    def c(k):
        return float(implied_cosine(torch.tensor([k], dtype=torch.float64), m, variant, lambda1, lambda2,
                                    released_lambda)[0])

    def solve(target):
        lo, hi = 0.0, 1.0
        while c(hi) < target:
            hi *= 2
            if hi > 1e12:
                return math.inf
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if c(mid) < target else (lo, mid)
        return hi

    return solve(c(0.0) + eps), solve(1.0 - eps)
