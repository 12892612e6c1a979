"""The vMF normaliser of continuous outputs (Kumar & Tsvetkov 2019, "Von Mises-Fisher Loss for Training Sequence to
Sequence Models with Continuous Outputs", ICLR): log C_m(κ), its exact gradient and the Bessel functions behind them.
The losses built on it are in ``vmf_losses.py``, the nearest-neighbour search in ``nn_search.py``.

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

``log_cm`` is a ``torch.autograd.Function`` whose backward is exactly ``-I_(m/2)(κ)/I_(m/2-1)(κ)``. For m >= 32
it runs the fast path (``log_cm_fast``): the same Debye expansion with its log taken term by term, so that
log C_m and (through the exact derivative of that truncated expansion) the Bessel ratio are two fixed
polynomials in p = (1+z²)^(-1/2) plus a few closed-form terms. Every power of p comes from one running product,
both polynomials, the constant and the two logarithms from one weighted sum over the columns [p, p², ..., 1,
log(1 + s), log p], instead of Horner's rule term by term: 13 tensor operations for value and gradient together
(each a kernel on a GPU) instead of about 380. It computes in float32
for fp16/bf16/fp32 input and in float64 for float64 input. Measured against mpmath over κ in [1e-3, 1e3]
(m in {32, 64, 128, 300, 512, 1024}): float32 value within 2.5e-7 x max|log C_m| (relative error up to 2e-5
only where log C_m crosses 0), ratio within 2.3e-7 relative; float64 within 9e-16 x max|log C_m|, ratio
within 4.5e-16 (1.5e-12 at m = 32, the series' truncation at ν = 15); ``tests/test_vmf.py`` holds the bounds.
m < 32 takes the float64 recurrence above (no fast path). The result comes back in float32 (float64 for float64
input), the gradient in the input's dtype. ``OUTLAYERS_COMPILE_LOG_CM=1`` runs the fast path through
``torch.compile``.

``log_cm_approx`` is the paper's appendix approximation (the authors' released code uses it as
``approximate_vmf``), anchored so that it equals the exact value at κ = 0.

``neg_log_cm_and_ratio`` gives -log C_m(κ) and its κ-derivative together, without autograd: the vMF losses
(``vmf_losses.py``) fold that derivative into their own hand-written gradient.
"""
import functools
import logging
import math
import os
from fractions import Fraction
from typing import Dict, List, Tuple

import torch

logger = logging.getLogger(__name__)

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


# ------------------------------------------------------------------------------------------------------------
# the fast path: log C_m and the Bessel ratio as two polynomials in p, all powers at once
# ------------------------------------------------------------------------------------------------------------

#: the smallest m that the fast path serves (ν = m/2 - 1 >= DEBYE_MIN_ORDER); below it the float64 recurrence
FAST_MIN_DIM = 2 * int(DEBYE_MIN_ORDER) + 2


@functools.lru_cache(maxsize=None)
def log_debye_polynomials(terms: int = DEBYE_TERMS) -> Tuple[Dict[int, Fraction], ...]:
    """ℓ_0..ℓ_terms with ``log Σ_k U_k(p) ε^k = Σ_k ℓ_k(p) ε^k + O(ε^(terms+1))`` (ε = 1/ν), exactly: the series
    log(1 + X) = X - X²/2 + X³/3 - ... of X = Σ_(k>=1) U_k ε^k, every product truncated at ε^terms."""
    polys = debye_polynomials(terms)
    x = {(k, j): c for k in range(1, terms + 1) for j, c in polys[k].items()}
    out: Dict[Tuple[int, int], Fraction] = {}
    power = dict(x)
    for n in range(1, terms + 1):
        for key, c in power.items():
            out[key] = out.get(key, 0) + Fraction((-1) ** (n + 1), n) * c
        nxt: Dict[Tuple[int, int], Fraction] = {}
        for (ka, ja), ca in power.items():
            for (kb, jb), cb in x.items():
                if ka + kb <= terms:
                    nxt[(ka + kb, ja + jb)] = nxt.get((ka + kb, ja + jb), 0) + ca * cb
        power = nxt
    ells: List[Dict[int, Fraction]] = [{} for _ in range(terms + 1)]
    for (k, j), c in out.items():
        if c != 0:
            ells[k][j] = c
    return tuple(ells)


@functools.lru_cache(maxsize=None)
def fast_coefficients(m: int, terms: int = DEBYE_TERMS) -> Tuple[Tuple[float, ...], Tuple[float, ...]]:
    """(a, g): the coefficients of p^0, p^1, ... of the two polynomials of the fast path (m >= FAST_MIN_DIM).

    With ν = m/2 - 1, z = κ/ν, s = (1+z²)^(1/2), u = z/(1+s), t = z·u = s - 1, p = 1/s and
    ``L(p) = Σ_k ℓ_k(p)/ν^k`` (log of the Debye series):

    * ``log C_m(κ) = A(p) + ν (log(1 + s) - t) - log(p)/2`` with ``A(p) = c - L(p)``, c = -(m/2) log 2π
      + ν log ν - ν + log(2πν)/2 (``log_cm_float64``'s constant, its ν log 2 moved into log(1 + s) = log 2 +
      log1p(t/2));
    * ``I_(m/2)(κ)/I_(m/2-1)(κ) = -d/dκ log C_m(κ) = u - z·G(p)`` with ``G(p) = (p²/2 + p³ L'(p))/ν``: the
      derivative of the same truncated expansion (dt/dκ = z/(νs), dp/dκ = -z p³/ν), so value and gradient agree
      to rounding. Exact rational sums, rounded once to float."""
    _check_dim(m)
    if m < FAST_MIN_DIM:
        raise ValueError(f"the fast path of log C_m needs m >= {FAST_MIN_DIM}, got {m}")
    nu = Fraction(m, 2) - 1
    ell: Dict[int, Fraction] = {}
    for k, poly in enumerate(log_debye_polynomials(terms)):
        for j, c in poly.items():
            ell[j] = ell.get(j, 0) + c / nu ** k
    degree = max(ell) + 2
    nu_f = float(nu)
    const = -(m / 2) * math.log(2 * math.pi) + nu_f * math.log(nu_f) - nu_f + 0.5 * math.log(2 * math.pi * nu_f)
    a = [0.0] * (degree + 1)
    g = [Fraction(0)] * (degree + 1)
    g[2] += Fraction(1, 2) / nu
    for j, c in ell.items():
        a[j] = float(-c)
        if j:
            g[j + 2] += j * c / nu
    a[0] += const
    return tuple(a), tuple(float(x) for x in g)


_FAST_TABLES: Dict[Tuple[int, torch.dtype, str, float], Tuple[torch.Tensor, ...]] = {}


def _fast_tables(m: int, dtype: torch.dtype, device: torch.device, sign: float = 1.0):
    """(weights (D+3, 2), 1, 1/ν, the dtype's largest finite value) on ``device`` in ``dtype``, made once. The
    weights take the columns [p^1 .. p^D, 1, log(1 + s), log p] of ``_fast_eager`` to [sign·(A(p) + ν log(1 + s)
    - log(p)/2), -G(p)]; the constants are 0-d tensors of the same dtype and device, so that no operation wraps a
    Python number."""
    key = (m, dtype, str(device), sign)
    if key not in _FAST_TABLES:
        a, g = fast_coefficients(m)
        assert g[0] == 0
        nu = m / 2 - 1
        value = [sign * c for c in a[1:]] + [sign * a[0], sign * nu, -0.5 * sign]
        neg_g = [-c for c in g[1:]] + [0.0, 0.0, 0.0]
        with torch.no_grad():
            _FAST_TABLES[key] = (torch.tensor([value, neg_g], dtype=dtype, device=device).t().contiguous(),
                                 *(torch.tensor(c, dtype=dtype, device=device)
                                   for c in (1.0, 1.0 / nu, torch.finfo(dtype).max)))
    return _FAST_TABLES[key]


def fast_log_cm_and_ratio(kappa: torch.Tensor, m: int, sign: float = 1.0, need_ratio: bool = True):
    """(sign·log C_m(κ), I_(m/2)(κ)/I_(m/2-1)(κ) or None) for m >= FAST_MIN_DIM and sign ±1, in ``kappa``'s dtype
    (float32 or float64), without autograd: see ``fast_coefficients`` for the formulas. About 13 element-wise
    operations for both (the losses take -log C_m: sign -1). κ = 0 gives log C_m(0) and ratio 0; κ = inf gives
    -inf and ratio 1; NaN stays NaN."""
    return _fast_kernel()(kappa, *_fast_tables(m, kappa.dtype, kappa.device, float(sign)), float(sign), need_ratio)


def log_cm_fast(kappa: torch.Tensor, m: int, need_ratio: bool = True):
    """(log C_m(κ), -I_(m/2)(κ)/I_(m/2-1)(κ) or None) for m >= FAST_MIN_DIM, in ``kappa``'s dtype (float32 or
    float64), without autograd (``fast_log_cm_and_ratio`` with the ratio negated: d/dκ log C_m(κ))."""
    value, ratio = fast_log_cm_and_ratio(kappa, m, need_ratio=need_ratio)
    return value, (ratio.neg() if need_ratio else None)


def _fast_eager(kappa, weights, one, inv_nu, largest, sign: float, need_ratio: bool):
    z = kappa.clamp_max(largest).mul(inv_nu)  # κ = inf is clamped here; the term -κu below makes it -inf
    s = torch.hypot(z, one)  # finite for every finite z (z² would overflow from z ≈ 1e19 in float32)
    s1 = s.add(one)
    u = z.div(s1)  # in [0, 1)
    p = s.reciprocal()
    # p^1 .. p^D by a running product (a few ulps on p^D, whose terms are tiny; 10x cheaper than pow on a CPU),
    # then [powers | 1 | 1 + s | p] with the last two logged: one weighted sum gives value and G together
    p_column = p.unsqueeze(-1)
    powers = p_column.expand(*p.shape, weights.size(0) - 3).cumprod(-1)
    columns = torch.cat([powers, one.expand(*p.shape, 1), s1.unsqueeze(-1), p_column], -1)
    columns[..., -2:].log_()
    sums = (columns.unsqueeze(-1) * weights).sum(-2)
    value, neg_g = sums[..., 0], sums[..., 1]
    value = torch.addcmul(value, kappa, u, value=-sign)  # -ν t = -κu (t = zu = s - 1, exact at small z)
    return value, (torch.addcmul(u, z, neg_g) if need_ratio else None)


#: ``OUTLAYERS_COMPILE_LOG_CM=1`` runs the fast path through ``torch.compile`` (on a GPU: a fused kernel or two
#: instead of about 20). Read at each call; any failure (no compiler, an old torch) warns once and stays eager.
COMPILE_ENV = "OUTLAYERS_COMPILE_LOG_CM"
_COMPILED = {"kernel": None, "failed": False}


def compiled_or_eager(fn, state: dict, what: str):
    """``fn`` through ``torch.compile(dynamic=True)`` (one graph for every batch size), made once into
    ``state["kernel"]``. Any failure, at compile time or later (no C++ compiler, no Triton, an old torch), logs one
    warning naming ``what`` and runs ``fn`` eagerly from then on (``state["failed"]``): it computes the same."""
    if state["failed"]:
        return fn
    if state["kernel"] is None:
        compiled = torch.compile(fn, dynamic=True) if hasattr(torch, "compile") else None

        def kernel(*args):
            if compiled is not None and not state["failed"]:
                try:
                    return compiled(*args)
                except Exception as err:  # noqa: BLE001  (any compiler failure: the eager path computes the same)
                    logger.warning(f"torch.compile of {what} failed, running it eagerly ({type(err).__name__}: "
                                   f"{str(err).splitlines()[0] if str(err) else ''})")
            state["failed"] = True
            return fn(*args)

        state["kernel"] = kernel
    return state["kernel"]


def _fast_kernel():
    if os.environ.get(COMPILE_ENV, "") != "1":
        return _fast_eager
    return compiled_or_eager(_fast_eager, _COMPILED, "the log C_m fast path")


class LogCm(torch.autograd.Function):
    """log C_m(κ) with the exact backward ``d/dκ log C_m(κ) = -I_(m/2)(κ) / I_(m/2-1)(κ)`` (paper, app. 8.2).

    m >= FAST_MIN_DIM: the fast path, which computes the ratio together with the value (when κ needs a
    gradient) and keeps it for the backward; smaller m: the float64 recurrence, ratio in the backward."""

    @staticmethod
    def forward(ctx, kappa: torch.Tensor, m: int):
        ctx.m, ctx.input_dtype = m, kappa.dtype
        if m >= FAST_MIN_DIM:
            work = _out_dtype(kappa.dtype)
            x = kappa.detach() if kappa.dtype == work else kappa.detach().to(work)
            value, ratio = fast_log_cm_and_ratio(x, m, need_ratio=ctx.needs_input_grad[0])
            ctx.save_for_backward(ratio)
            return value
        ctx.save_for_backward(kappa)
        return log_cm_float64(kappa.detach(), m).to(_out_dtype(kappa.dtype))

    @staticmethod
    def backward(ctx, grad_output):
        if ctx.m >= FAST_MIN_DIM:
            (ratio,) = ctx.saved_tensors
            grad = (grad_output * ratio).neg_()
            return (grad if grad.dtype == ctx.input_dtype else grad.to(ctx.input_dtype)), None
        (kappa,) = ctx.saved_tensors
        ratio = bessel_iv_ratio(ctx.m / 2 - 1, kappa.detach())
        return (-(grad_output.to(torch.float64) * ratio)).to(kappa.dtype), None


def log_cm(kappa: torch.Tensor, m: int) -> torch.Tensor:
    """log C_m(κ), the log normaliser of the m-dimensional vMF distribution (paper, eq. 1), differentiable.

    ``kappa`` >= 0 of any shape and floating dtype; computed in float32 for m >= 32 (the fast path; float64 for
    float64 input) and by the float64 recurrence below m = 32, returned in float32 (float64 input: float64).
    Accuracy against mpmath: see the module's docstring and ``tests/test_vmf.py``; finite everywhere on κ in
    [0, 1e5].
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
    Plain torch ops (autograd), computed and returned like ``log_cm`` (float32, float64 for float64 input).
    """
    v, c = _approx_parts(m)
    out = _out_dtype(kappa.dtype)
    x = kappa if kappa.dtype == out else kappa.to(out)
    root = torch.hypot(x, constant_like(v + 1, x))
    # log C_m(0) - (g - g0) = (log C_m(0) + g0) - root + (v-1) log(v-1 + root)
    return (root + constant_like(v - 1, x)).log() * constant_like(v - 1, x) - root + constant_like(c, x)


def _approx_parts(m: int):
    """(v, log C_m(0) + g0) of ``log_cm_approx``."""
    _check_dim(m)
    v = m / 2 - 1
    if v <= 1:
        raise ValueError(f"the appendix approximation of log C_m needs m > 4, got m = {m}")
    return v, log_cm_at_zero(m) + (v + 1) - (v - 1) * math.log(2 * v)


def neg_log_cm_and_ratio(kappa: torch.Tensor, m: int, approximate: bool = False, need_ratio: bool = True):
    """(-log C_m(κ), d/dκ of it = I_(m/2)(κ)/I_(m/2-1)(κ), or None) in ``kappa``'s dtype (float32 or float64),
    without autograd: what the vMF losses need for their value and their hand-written gradient. m >= 32: the fast
    path; smaller m: the float64 recurrence. ``approximate``: ``log_cm_approx`` and its derivative, the paper's
    bound κ / (v - 1 + ((v+1)² + κ²)^(1/2))."""
    if approximate:
        v, c = _approx_parts(m)
        root = torch.hypot(kappa, constant_like(v + 1, kappa))
        shifted = root.add(constant_like(v - 1, kappa))
        value = root.sub(shifted.log(), alpha=v - 1).sub_(constant_like(c, kappa))
        return value, (kappa.div(shifted) if need_ratio else None)
    _check_dim(m)
    if m >= FAST_MIN_DIM:
        return fast_log_cm_and_ratio(kappa, m, sign=-1.0, need_ratio=need_ratio)
    value = log_cm_float64(kappa, m).neg_().to(kappa.dtype)
    return value, (bessel_iv_ratio(m / 2 - 1, kappa).to(kappa.dtype) if need_ratio else None)


_CONSTANTS: Dict[Tuple[float, torch.dtype, str], torch.Tensor] = {}
_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def constant_like(value: float, like: torch.Tensor) -> torch.Tensor:
    """``value`` as a 0-d tensor of ``like``'s dtype and device, made once. A Python number as an operand (or as
    ``alpha``/``value``, whose backward multiplies by it) is wrapped into a new tensor at every call: four more
    operations each. The losses use these instead. Inside ``torch.compile`` it is a constant of the traced graph
    (no lookup in this process's table, which the compiler would otherwise guard on)."""
    if _is_compiling():
        return like.new_full((), float(value))
    key = (float(value), like.dtype, str(like.device))
    if key not in _CONSTANTS:
        _CONSTANTS[key] = torch.tensor(float(value), dtype=like.dtype, device=like.device)
    return _CONSTANTS[key]
