"""The maths of continuous outputs (Kumar & Tsvetkov 2019, "Von Mises-Fisher Loss for Training Sequence to
Sequence Models with Continuous Outputs", ICLR): the vMF normaliser and the four training losses.

The decoder predicts a vector ê in R^m; the target is the unit word vector e(w). The vMF density of e(w) with
mean direction ê/‖ê‖ and concentration κ = ‖ê‖ is ``C_m(κ) exp(êᵀe(w))`` (paper, eq. 2) with

    C_m(κ) = κ^(m/2-1) / ((2π)^(m/2) I_(m/2-1)(κ)),

I_ν the modified Bessel function of the first kind, and ``d/dκ log C_m(κ) = -I_(m/2)(κ) / I_(m/2-1)(κ)``
(paper, appendix 8.2).

How log C_m is computed here (all in torch, float64, on the tensor's own device, no host round trip):

* For orders ν >= 15 we use the uniform asymptotic (Debye) expansion of I_ν(νz) (DLMF 10.41.3),
  ``I_ν(νz) ~ exp(νη) / ((2πν)^(1/2) (1+z²)^(1/4)) · Σ_k U_k(p) / ν^k`` with ``p = (1+z²)^(-1/2)`` and
  ``η = (1+z²)^(1/2) + log(z / (1 + (1+z²)^(1/2)))``. It is uniform in z on (0, ∞), so one formula covers tiny
  κ (where ``scipy.special.ive`` underflows for large m) and huge κ alike. The polynomials U_k come from their
  recurrence (DLMF 10.41.9) in exact rational arithmetic; 10 terms reach ~1e-13 absolute error in log I_ν for
  ν >= 15. In log C_m the term ν·log κ cancels analytically, so nothing cancels numerically at small κ.
* For ν < 15 (m < 32) we start the Debye expansion at a higher order N >= 15 and run the three-term recurrence
  ``I_(μ-1) = (2μ/x) I_μ + I_(μ+1)`` downwards (the stable direction for I_ν), in ratio form.
* The Bessel ratio I_(ν+1)/I_ν (the gradient) comes from the same expansion, with the difference of the two
  O(κ) exponents written in closed form (no cancellation), so it stays in (0, 1) up to κ = 1.8e308; κ = inf
  gives log C_m = -inf and ratio 1, κ = 0 gives log C_m(0) and ratio 0.

``log_cm`` is a ``torch.autograd.Function`` whose backward is exactly ``-I_(m/2)(κ)/I_(m/2-1)(κ)``. Inputs in
fp16/bf16/fp32 are promoted to float64 inside; the result comes back in float32 (float64 for float64 input).

``log_cm_approx`` is the paper's appendix approximation (the authors' released code uses it as
``approximate_vmf``), anchored so that it equals the exact value at κ = 0.
"""
import functools
import math
from fractions import Fraction
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

#: Debye terms kept (U_0 .. U_DEBYE_TERMS) and the smallest order at which the expansion is used directly.
DEBYE_TERMS = 10
DEBYE_MIN_ORDER = 15.0
#: κ is clamped below at this value; C_m is flat there (relative change < 1e-190 for every m >= 2).
KAPPA_FLOOR = 1e-100


# ------------------------------------------------------------------------------------------------------------
# modified Bessel functions of the first kind, in log space
# ------------------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def debye_polynomials(terms: int = DEBYE_TERMS) -> Tuple[Dict[int, Fraction], ...]:
    """U_0..U_terms of the Debye expansion as {power of p: exact coefficient}.

    Recurrence (DLMF 10.41.9): ``U_(k+1)(p) = p²(1-p²)/2 · U_k'(p) + 1/8 ∫_0^p (1 - 5t²) U_k(t) dt``, U_0 = 1.
    """
    polys: List[Dict[int, Fraction]] = [{0: Fraction(1)}]
    for _ in range(terms):
        prev, nxt = polys[-1], {}
        for j, c in prev.items():
            if j:  # p²(1-p²)/2 · j c p^(j-1)
                nxt[j + 1] = nxt.get(j + 1, 0) + Fraction(1, 2) * j * c
                nxt[j + 3] = nxt.get(j + 3, 0) - Fraction(1, 2) * j * c
            nxt[j + 1] = nxt.get(j + 1, 0) + Fraction(1, 8) * c / (j + 1)  # ∫ t^j / 8
            nxt[j + 3] = nxt.get(j + 3, 0) - Fraction(5, 8) * c / (j + 3)  # ∫ -5 t^(j+2) / 8
        polys.append({j: c for j, c in nxt.items() if c != 0})
    return tuple(polys)


@functools.lru_cache(maxsize=None)
def _debye_series_coefficients(nu: float, terms: int = DEBYE_TERMS) -> Tuple[float, ...]:
    """Coefficients c_j (highest power first) of the polynomial ``Σ_k U_k(p) ν^(-k)`` in p, summed exactly."""
    nu_q = Fraction(nu)
    total: Dict[int, Fraction] = {}
    for k, poly in enumerate(debye_polynomials(terms)):
        scale = nu_q ** -k
        for j, c in poly.items():
            total[j] = total.get(j, 0) + c * scale
    degree = max(total)
    return tuple(float(total.get(j, 0)) for j in range(degree, -1, -1))


def _debye_parts(nu: float, x: torch.Tensor):
    """(r, log(x / (ν + r)), log Σ_k U_k(p)/ν^k) with r = (ν² + x²)^(1/2) = ν(1+z²)^(1/2) and p = ν/r; x float64
    > 0. ``hypot`` keeps r finite up to x = 1.8e308 (z² would overflow from x ≈ 1e154)."""
    r = torch.hypot(torch.full_like(x, nu), x)
    acc = torch.zeros_like(x)
    p = nu / r
    for c in _debye_series_coefficients(float(nu)):
        acc = acc * p + c
    return r, torch.log(x / (nu + r)), torch.log(acc)


def _debye_log_iv(nu: float, x: torch.Tensor) -> torch.Tensor:
    """log I_ν(x) from the Debye expansion (accurate for ν >= DEBYE_MIN_ORDER); x float64 > 0.

    With r = νs: ``νη = r + ν log(x/(ν + r))`` and ``(2πν)^(1/2)(1+z²)^(1/4) = (2πr)^(1/2)``."""
    r, log_q, log_series = _debye_parts(nu, x)
    return r + nu * log_q - 0.5 * torch.log(2 * math.pi * r) + log_series


def _debye_log_ratio(nu: float, x: torch.Tensor) -> torch.Tensor:
    """log I_(ν+1)(x) - log I_ν(x) from the Debye expansion, without subtracting the two O(x) exponents: their
    difference r_(ν+1) - r_ν is written as (2ν+1)/(r_(ν+1) + r_ν). Differencing the two logs instead loses
    everything above x ≈ 1e12 (at x = 1e17 the ratio came out as 8.9e6 where it lies in (0, 1))."""
    r0, log_q0, log_s0 = _debye_parts(nu, x)
    r1, log_q1, log_s1 = _debye_parts(nu + 1, x)
    return ((2 * nu + 1) / (r1 + r0) + (nu + 1) * log_q1 - nu * log_q0 - 0.5 * torch.log(r1 / r0)
            + log_s1 - log_s0)


def _log_iv_and_ratio(nu: float, x: torch.Tensor, need_log: bool = True, need_ratio: bool = True):
    """(log I_ν(x), I_(ν+1)(x)/I_ν(x)) in float64 for ν >= 0, finite x > 0 (either may be skipped -> None)."""
    if nu >= DEBYE_MIN_ORDER:
        log_i = _debye_log_iv(nu, x) if need_log else None
        ratio = torch.exp(_debye_log_ratio(nu, x)) if need_ratio else None
        return log_i, ratio
    steps = math.ceil(DEBYE_MIN_ORDER - nu)
    top = nu + steps
    log_i = _debye_log_iv(top, x)  # log I_top
    ratio = torch.exp(_debye_log_ratio(top, x))  # I_(top+1) / I_top
    for i in range(steps):  # μ = top, top-1, ..., ν+1: I_μ/I_(μ-1) = 1 / (2μ/x + I_(μ+1)/I_μ)
        mu = top - i
        ratio = 1.0 / (2.0 * mu / x + ratio)
        log_i = log_i - torch.log(ratio)  # log I_(μ-1)
    return log_i, ratio  # ratio is now I_(ν+1)/I_ν


def log_bessel_iv(nu: float, x: torch.Tensor) -> torch.Tensor:
    """log I_ν(x) for a real order ν >= 0 and x > 0, computed in float64 (returned in float64)."""
    if nu < 0:
        raise ValueError(f"log_bessel_iv: order {nu} < 0 is not supported")
    x = torch.as_tensor(x).to(torch.float64).clamp_min(KAPPA_FLOOR)
    return _log_iv_and_ratio(float(nu), x, need_ratio=False)[0]


def bessel_iv_ratio(nu: float, x: torch.Tensor) -> torch.Tensor:
    """I_(ν+1)(x) / I_ν(x) for ν >= 0, x >= 0, in float64 (0 at x = 0)."""
    if nu < 0:
        raise ValueError(f"bessel_iv_ratio: order {nu} < 0 is not supported")
    x64 = torch.as_tensor(x).to(torch.float64)
    finite = torch.where(torch.isinf(x64), 1.0, x64).clamp_min(KAPPA_FLOOR)
    ratio = _log_iv_and_ratio(float(nu), finite, need_log=False)[1]
    ratio = torch.where(torch.isinf(x64), 1.0, ratio)  # I_(ν+1)/I_ν -> 1 as x -> inf
    return torch.where(x64 > 0, ratio, torch.zeros_like(ratio))


# ------------------------------------------------------------------------------------------------------------
# log C_m(κ)
# ------------------------------------------------------------------------------------------------------------

def _check_dim(m: int):
    if int(m) != m or m < 2:
        raise ValueError(f"the vMF dimension m must be an integer >= 2, got {m}")


def log_cm_at_zero(m: int) -> float:
    """log C_m(0) = -log(surface area of the unit sphere in R^m) = log Γ(m/2) - log 2 - (m/2) log π."""
    _check_dim(m)
    return math.lgamma(m / 2) - math.log(2.0) - (m / 2) * math.log(math.pi)


def log_cm_float64(kappa: torch.Tensor, m: int) -> torch.Tensor:
    """log C_m(κ) in float64 without autograd (see the module docstring for the method); κ = 0 gives
    log C_m(0) (the uniform density), κ = inf gives -inf, NaN stays NaN."""
    _check_dim(m)
    nu = m / 2 - 1
    k64 = kappa.to(torch.float64)
    x = torch.where(torch.isinf(k64), 1.0, k64).clamp_min(KAPPA_FLOOR)  # inf is set below
    const = -(m / 2) * math.log(2 * math.pi)
    if nu >= DEBYE_MIN_ORDER:
        # ν log κ - log I_ν(κ) with the ν log κ terms cancelled by hand. With z = κ/ν, s = (1+z²)^(1/2) and
        # t = s - 1 it is  c - νt + ν log1p(t/2) + log1p(t)/2 - log S(p),  c = const + ν log 2ν - ν + log(2πν)/2:
        # every term that varies with κ vanishes at κ = 0, so the value carries no rounding noise of the O(ν)
        # constant (finite differences of it agree with the exact gradient), and hypot keeps s finite to 1.8e308
        z = x / nu
        s_ = torch.hypot(torch.ones_like(z), z)
        t = torch.where(z < 1, z * z / (1 + s_), s_ - 1)
        p = 1.0 / s_
        acc = torch.zeros_like(x)
        for c in _debye_series_coefficients(float(nu)):
            acc = acc * p + c
        c0 = const + nu * math.log(2 * nu) - nu + 0.5 * math.log(2 * math.pi * nu)
        value = c0 - nu * t + nu * torch.log1p(t / 2) + 0.5 * torch.log1p(t) - torch.log(acc)
    else:
        log_i, _ = _log_iv_and_ratio(nu, x, need_ratio=False)
        value = const + nu * torch.log(x) - log_i
    return torch.where(torch.isinf(k64), -math.inf, value)


def _out_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


class LogCm(torch.autograd.Function):
    """log C_m(κ) with the exact backward ``d/dκ log C_m(κ) = -I_(m/2)(κ) / I_(m/2-1)(κ)`` (paper, app. 8.2)."""

    @staticmethod
    def forward(ctx, kappa: torch.Tensor, m: int):
        ctx.m = m
        ctx.save_for_backward(kappa)
        return log_cm_float64(kappa.detach(), m).to(_out_dtype(kappa.dtype))

    @staticmethod
    def backward(ctx, grad_output):
        (kappa,) = ctx.saved_tensors
        ratio = bessel_iv_ratio(ctx.m / 2 - 1, kappa.detach())
        return (-(grad_output.to(torch.float64) * ratio)).to(kappa.dtype), None


def log_cm(kappa: torch.Tensor, m: int) -> torch.Tensor:
    """log C_m(κ), the log normaliser of the m-dimensional vMF distribution (paper, eq. 1), differentiable.

    ``kappa`` >= 0 of any shape and floating dtype; computed in float64, returned in float32 (float64 input:
    float64). Relative error <= 1e-6 against an mpmath reference for m in [32, 1024] and κ in [1e-4, 1e5]
    (tested), the same for its gradient; finite everywhere on κ in [0, 1e5].
    """
    _check_dim(m)
    return LogCm.apply(kappa, int(m))


def log_cm_approx(kappa: torch.Tensor, m: int) -> torch.Tensor:
    """The appendix approximation of log C_m(κ) (Kumar & Tsvetkov 2019, app. 8.2; ``approximate_vmf`` in the
    authors' code), with v = m/2 - 1 as in that code:

        -log C_m(κ) ≈ g(κ) + const,   g(κ) = sqrt((v+1)² + κ²) - (v-1) log(v - 1 + sqrt((v+1)² + κ²)).

    Its derivative, -κ / (v - 1 + sqrt((v+1)² + κ²)), is the paper's bound on -I_(m/2)/I_(m/2-1). The
    constant, which the paper leaves out, is chosen here so that the approximation equals log C_m(0) at κ = 0
    (loss values are then comparable with the exact form; gradients do not depend on it). Needs m > 4.
    Plain torch ops (autograd), computed in float64 and returned like ``log_cm``.
    """
    _check_dim(m)
    v = m / 2 - 1
    if v <= 1:
        raise ValueError(f"the appendix approximation of log C_m needs m > 4, got m = {m}")
    x = kappa.to(torch.float64)
    root = torch.sqrt((v + 1) ** 2 + x * x)
    g = root - (v - 1) * torch.log(v - 1 + root)
    g0 = (v + 1) - (v - 1) * math.log(2 * v)
    return (log_cm_at_zero(m) - (g - g0)).to(_out_dtype(kappa.dtype))


# ------------------------------------------------------------------------------------------------------------
# losses: e_hat (N, m) predictions, target (N, m) unit target vectors; each returns a per-token loss (N,)
# ------------------------------------------------------------------------------------------------------------

def vmf_nll_loss(e_hat: torch.Tensor, target: torch.Tensor, lambda1: float = 0.0, lambda2: float = 1.0,
                 approximate: bool = False) -> torch.Tensor:
    """NLLvMF with the paper's regularisers (section 3):

    ``-log C_m(‖ê‖) - λ2 êᵀe(w) + λ1 ‖ê‖``.

    λ1 = 0, λ2 = 1: plain NLLvMF; λ1 > 0: NLLvMF_reg1 (the paper uses λ1 = 0.2); λ2 < 1: NLLvMF_reg2 (eq. 3,
    λ2 = 0.1); both: NLLvMF_reg1+reg2. ``approximate`` uses the appendix approximation of log C_m.
    """
    m = e_hat.size(-1)
    kappa = torch.linalg.vector_norm(e_hat, dim=-1)
    logc = log_cm_approx(kappa, m) if approximate else log_cm(kappa, m)
    loss = -logc - lambda2 * (e_hat * target).sum(-1)
    if lambda1:
        loss = loss + lambda1 * kappa
    return loss


def vmf_released_loss(e_hat: torch.Tensor, target: torch.Tensor, lam: float = 0.2,
                      approximate: bool = False) -> torch.Tensor:
    """The variant the authors' released code trains with (it is not the paper's printed reg1/reg2):

    ``-log C_m(κ) + log(1 + κ) (λ - cos(ê, e(w)))`` with κ = ‖ê‖ and λ = 0.2.
    """
    m = e_hat.size(-1)
    kappa = torch.linalg.vector_norm(e_hat, dim=-1)
    logc = log_cm_approx(kappa, m) if approximate else log_cm(kappa, m)
    return -logc + torch.log1p(kappa) * (lam - cosine_similarity(e_hat, target))


def cosine_similarity(e_hat: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """cos(ê, e) per row; 0 for a zero prediction (no NaN)."""
    return (F.normalize(e_hat, dim=-1) * F.normalize(target, dim=-1)).sum(-1)


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


@torch.no_grad()
def nearest_neighbours(e_hat: torch.Tensor, table: torch.Tensor, k: int = 1,
                       candidates: Optional[torch.Tensor] = None, chunk_size: int = 16384):
    """Top-k words by ``êᵀe_j`` (= largest cosine = highest vMF density = smallest ‖ê - e_j‖ for unit e_j), by
    a chunked matrix product with a running top-k, so a 300k-word table needs only N x chunk_size scores.
    Returns (scores (N, k), ids (N, k))."""
    query = e_hat.to(table.dtype)
    best_val = best_idx = None
    for start in range(0, table.size(0), chunk_size):
        scores = F.linear(query, table[start:start + chunk_size]).float()
        if candidates is not None:
            scores.masked_fill_(~candidates[start:start + chunk_size].unsqueeze(0), -math.inf)
        val, idx = scores.topk(min(k, scores.size(-1)), dim=-1)
        idx = idx + start
        if best_val is not None:
            val, order = torch.cat([best_val, val], -1).topk(k, dim=-1)
            idx = torch.cat([best_idx, idx], -1).gather(-1, order)
        best_val, best_idx = val, idx
    return best_val, best_idx


# ------------------------------------------------------------------------------------------------------------
# decoding over the K best words only (optionally found by faiss)
# ------------------------------------------------------------------------------------------------------------

def import_faiss():
    """The faiss module, or a one-line error that says how to install it."""
    import logging

    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # it logs every instruction set it tries
    try:
        import faiss
    except ImportError:
        from fairseq_outlayers.errors import OutlayersConfigError

        raise OutlayersConfigError("--continuous-search faiss needs the faiss package: pip install faiss-cpu (or "
                                   "pip install 'fairseq_outlayers[faiss]'), or use --continuous-search exact"
                                   ) from None
    return faiss


#: faiss searches this many queries or more with a BLAS matrix product (faiss's own default before 1.7.3)
BLAS_MIN_QUERIES = 20
#: OpenMP threads of a faiss search. faiss-cpu brings its own OpenMP runtime; its threads and torch's (which
#: spin for a while after each torch operation) oversubscribe the cores: measured on 2 cores, a 300k-word
#: search took 3.6 s with 2 faiss threads and 0.18 s with 1.
FAISS_THREADS = 1


class FaissInnerProductIndex:
    """Exact maximum-inner-product search with faiss (``IndexFlatIP``, brute force) over the rows of a table
    that ``candidates`` allows: the same top-k as ``nearest_neighbours``, computed by faiss's blocked BLAS
    search instead of torch. The index holds a float32 copy of those rows in host memory (faiss-cpu); queries
    on another device are copied to the host and the results back."""

    def __init__(self, table: torch.Tensor, candidates: Optional[torch.Tensor] = None):
        faiss = import_faiss()
        if candidates is None:
            ids = torch.arange(table.size(0), device=table.device)
        else:
            ids = candidates.nonzero().squeeze(1)
        vectors = table.detach().index_select(0, ids).float().cpu().contiguous().numpy()
        self.index = faiss.IndexFlatIP(vectors.shape[1])
        self.index.add(vectors)
        self.ids = ids.cpu()

    def __len__(self):
        return self.ids.numel()

    @torch.no_grad()
    def search(self, query: torch.Tensor, k: int):
        """(scores (N, k) float32, ids (N, k) long table rows), best first, on the query's device."""
        k = min(k, len(self))
        q = query.detach().float().cpu().contiguous().numpy()
        faiss = import_faiss()
        # recent faiss scores fewer than 128,000 queries at a time without BLAS, which is 10x slower than the
        # matrix product on CPUs where its generic build is loaded; a decoding step has a few hundred queries
        # and faiss's OpenMP threads (its own runtime, not torch's) fight torch's idle-spinning ones: one thread
        threshold, threads = faiss.cvar.distance_compute_blas_threshold, faiss.omp_get_max_threads()
        faiss.cvar.distance_compute_blas_threshold = min(threshold, BLAS_MIN_QUERIES)
        faiss.omp_set_num_threads(FAISS_THREADS)
        try:
            scores, pos = self.index.search(q, k)
        finally:
            faiss.cvar.distance_compute_blas_threshold = threshold
            faiss.omp_set_num_threads(threads)
        ids = self.ids[torch.from_numpy(pos).long()]
        return torch.from_numpy(scores).to(query.device), ids.to(query.device)


def candidate_log_probs(scores: torch.Tensor, ids: torch.Tensor, num_words: int,
                        extra_scores: Optional[torch.Tensor] = None, extra_ids: Optional[torch.Tensor] = None
                        ) -> torch.Tensor:
    """(N, num_words) log-probabilities renormalised over each row's candidates and -inf elsewhere: the
    log-softmax of the candidate scores (N, K) scattered to their ids (N, K). ``extra_scores``/``extra_ids``
    (N, 1) add one more candidate per row (e.g. end of sentence); where that id is already among the K it
    must be given a score of -inf (it is then neither counted twice nor written over the candidate's value)."""
    if extra_scores is not None:
        scores = torch.cat([extra_scores.float(), scores.float()], dim=-1)
        ids = torch.cat([extra_ids, ids], dim=-1)
    logp = F.log_softmax(scores.float(), dim=-1)
    out = torch.full((scores.size(0), num_words), -math.inf, dtype=torch.float32, device=scores.device)
    if extra_scores is not None:  # the extra column first, so that a duplicate id takes the candidate's value
        out.scatter_(1, ids[:, :1], logp[:, :1])
        ids, logp = ids[:, 1:], logp[:, 1:]
    return out.scatter_(1, ids, logp)


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
