"""log C_m(κ), its gradient and the continuous losses against float64 / mpmath references."""
import math

import mpmath
import numpy as np
import pytest
import scipy.special
import torch
import torch.nn.functional as F

from fairseq_outlayers.methods.continuous.bessel import (FAST_MIN_DIM, bessel_iv_ratio, log_bessel_iv, log_cm, log_cm_approx,
                                              log_cm_at_zero, log_cm_fast, log_cm_float64)
from fairseq_outlayers.methods.continuous.nn_search import nearest_neighbours
from fairseq_outlayers.methods.continuous.vmf_losses import (cosine_loss, cosine_similarity, l2_loss, max_margin_loss,
                                                  most_informative_negatives, synthetic_margin_loss,
                                                  synthetic_negatives, vmf_nll_loss, vmf_released_loss)

DIMS = [32, 64, 128, 300, 512, 1024]
KAPPAS = [10 ** (e / 4) for e in range(-16, 21)]  # 1e-4 .. 1e5, four points per decade


def mp_log_cm_and_ratio(m, kappa):
    """mpmath reference: log C_m(κ) and I_(m/2)(κ)/I_(m/2-1)(κ), at 40 significant digits."""
    with mpmath.workdps(40):
        nu, k = mpmath.mpf(m) / 2 - 1, mpmath.mpf(kappa)
        i_nu = mpmath.besseli(nu, k)
        log_c = nu * mpmath.log(k) - mpmath.mpf(m) / 2 * mpmath.log(2 * mpmath.pi) - mpmath.log(i_nu)
        return float(log_c), float(mpmath.besseli(nu + 1, k) / i_nu)


@pytest.fixture(scope="module")
def references():
    return {m: [mp_log_cm_and_ratio(m, k) for k in KAPPAS] for m in DIMS + [2, 3, 5, 17, 31]}


@pytest.mark.parametrize("m", DIMS + [2, 3, 5, 17, 31])
def test_log_cm_and_gradient_match_mpmath(m, references):
    kappa = torch.tensor(KAPPAS, dtype=torch.float64, requires_grad=True)
    value = log_cm(kappa, m)
    value.sum().backward()
    ref = np.array(references[m])
    rel_value = np.abs(value.detach().numpy() - ref[:, 0]) / np.abs(ref[:, 0])
    rel_grad = np.abs(-kappa.grad.numpy() - ref[:, 1]) / ref[:, 1]
    assert rel_value.max() <= 1e-6, (m, KAPPAS[rel_value.argmax()], rel_value.max())
    assert rel_grad.max() <= 1e-6, (m, KAPPAS[rel_grad.argmax()], rel_grad.max())
    # the helpers agree with the same reference
    assert np.allclose(bessel_iv_ratio(m / 2 - 1, kappa.detach()).numpy(), ref[:, 1], rtol=1e-9, atol=0)


def test_small_kappa_large_m_where_scipy_underflows():
    m, kappa = 1024, 1e-4
    assert scipy.special.ive(m / 2 - 1, kappa) == 0.0  # the reference code's log(ive) would be -inf here
    ref_value, ref_ratio = mp_log_cm_and_ratio(m, kappa)
    k = torch.tensor([kappa], dtype=torch.float64, requires_grad=True)
    v = log_cm(k, m)
    v.backward()
    assert abs(v.item() - ref_value) <= 1e-12 * abs(ref_value)
    assert abs(-k.grad.item() - ref_ratio) <= 1e-9 * ref_ratio
    with mpmath.workdps(30):
        ref_log_i = float(mpmath.log(mpmath.besseli(511, mpmath.mpf("1e-4"))))
    got = log_bessel_iv(511, torch.tensor([1e-4], dtype=torch.float64)).item()
    assert abs(got - ref_log_i) <= 1e-12 * abs(ref_log_i)


@pytest.mark.parametrize("m", DIMS)
def test_finite_everywhere_and_limit_at_zero(m):
    kappa = torch.tensor([0.0, 1e-300, 1e-30, 1e-8, 0.5, 1e3, 1e5, 3e5], dtype=torch.float64, requires_grad=True)
    v = log_cm(kappa, m)
    v.sum().backward()
    assert torch.isfinite(v).all() and torch.isfinite(kappa.grad).all()
    assert v[0].item() == pytest.approx(log_cm_at_zero(m), rel=1e-13)  # 1 / area of the unit sphere S^(m-1)
    assert kappa.grad[0].item() == 0.0
    assert (kappa.grad <= 0).all()  # log C_m decreases in κ
    assert ((kappa.grad[1:] > -1) & (kappa.grad[1:] < 0)).all()  # 0 < I_(ν+1)/I_ν < 1


def test_backward_agrees_with_finite_differences():
    for m in (7, 64, 300):
        kappa = torch.tensor([0.3, 4.0, 50.0, 700.0], dtype=torch.float64, requires_grad=True)
        # eps 1e-4: log C_300 is about 427, whose float64 spacing (5.7e-14) divided by 2 eps must stay well
        # below atol (with eps 1e-6 the rounding of the value alone gives up to 3e-8)
        assert torch.autograd.gradcheck(lambda k: log_cm(k, m), (kappa,), eps=1e-4, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_inputs_are_computed_wide(dtype):
    kappa = torch.tensor([0.0, 0.7, 30.0, 300.0, 6e4], dtype=dtype, requires_grad=True)
    v = log_cm(kappa, 300)
    v.sum().backward()
    assert v.dtype == torch.float32 and kappa.grad.dtype == dtype
    exact = log_cm(kappa.detach().double(), 300)  # same (rounded) κ, float64 path
    assert torch.allclose(v.double(), exact, rtol=1e-6, atol=0)
    assert torch.isfinite(kappa.grad.float()).all()


@pytest.mark.parametrize("m", [32, 300, 1024])
def test_appendix_approximation(m):
    v = m / 2 - 1
    kappa = torch.tensor([0.0] + KAPPAS, dtype=torch.float64, requires_grad=True)
    approx = log_cm_approx(kappa, m)
    approx.sum().backward()
    assert approx[0].item() == pytest.approx(log_cm_at_zero(m), rel=1e-14)  # anchored at κ = 0
    # derivative is the paper's bound -κ / (v - 1 + sqrt((v+1)² + κ²)) ...
    k = kappa.detach()
    bound = -k / (v - 1 + torch.sqrt((v + 1) ** 2 + k * k))
    assert torch.allclose(kappa.grad, bound, rtol=1e-12, atol=0)
    # ... which is never smaller in magnitude than the exact -I_(m/2)/I_(m/2-1)
    exact_ratio = bessel_iv_ratio(m / 2 - 1, k[1:])
    assert (-bound[1:] >= exact_ratio * (1 - 1e-12)).all()
    with pytest.raises(ValueError, match="m > 4"):
        log_cm_approx(kappa, 4)


# ------------------------------------------------------------------------------------------------------------
# losses against float64 hand computations
# ------------------------------------------------------------------------------------------------------------

def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    m, n = 40, 6
    e_hat = rng.standard_normal((n, m)) * rng.uniform(0.1, 8, size=(n, 1))
    target = _unit(rng.standard_normal((n, m)))
    return e_hat, target


def _ref_log_cm(m, kappa):
    return np.array([mp_log_cm_and_ratio(m, k)[0] for k in kappa])


@pytest.mark.parametrize("lambda1,lambda2", [(0.0, 1.0), (0.2, 1.0), (0.0, 0.1), (0.2, 0.1)])
def test_vmf_nll_against_hand_computation(batch, lambda1, lambda2):
    e_hat, target = batch
    m = e_hat.shape[1]
    kappa = np.linalg.norm(e_hat, axis=1)
    expected = -_ref_log_cm(m, kappa) - lambda2 * (e_hat * target).sum(1) + lambda1 * kappa
    got = vmf_nll_loss(torch.tensor(e_hat), torch.tensor(target), lambda1, lambda2)
    assert np.allclose(got.numpy(), expected, rtol=1e-10, atol=1e-10)


def test_vmf_released_variant_against_hand_computation(batch):
    e_hat, target = batch
    m = e_hat.shape[1]
    kappa = np.linalg.norm(e_hat, axis=1)
    cos = (e_hat * target).sum(1) / kappa
    expected = -_ref_log_cm(m, kappa) + np.log1p(kappa) * (0.2 - cos)
    got = vmf_released_loss(torch.tensor(e_hat), torch.tensor(target), 0.2)
    assert np.allclose(got.numpy(), expected, rtol=1e-10, atol=1e-10)


def test_vmf_gradient_against_finite_differences(batch):
    e_hat, target = batch
    x = torch.tensor(e_hat, requires_grad=True)
    t = torch.tensor(target)
    assert torch.autograd.gradcheck(lambda e: vmf_nll_loss(e, t, 0.2, 0.1), (x,), eps=1e-6, atol=1e-7)
    assert torch.autograd.gradcheck(lambda e: vmf_released_loss(e, t, 0.2), (x,), eps=1e-6, atol=1e-7)


def _composite_loss(e_hat, target, variant, approximate):
    """The vMF losses written as autograd graphs of torch operations (the form before ``RowLoss``), float64."""
    m = e_hat.size(-1)
    kappa = torch.linalg.vector_norm(e_hat, dim=-1)
    logc = log_cm_approx(kappa, m) if approximate else log_cm(kappa, m)
    if variant == "released":
        cos = (e_hat * target).sum(-1) / (kappa * torch.linalg.vector_norm(target, dim=-1).detach()).clamp_min(1e-12)
        return torch.log1p(kappa) * (0.2 - cos) - logc
    lambda1, lambda2 = variant
    return -logc - lambda2 * (e_hat * target).sum(-1) + lambda1 * kappa


@pytest.mark.parametrize("m", [17, 40, 300])
@pytest.mark.parametrize("approximate", [False, True])
@pytest.mark.parametrize("variant", ["released", (0.0, 1.0), (0.2, 1.0), (0.0, 0.1), (0.02, 0.1)])
def test_hand_written_vmf_gradients_equal_autograd_of_the_composite_loss(m, approximate, variant):
    """float64: value and gradients (in ê and in e) of ``RowLoss`` against autograd through the loss written as
    torch operations, on rows with κ from 0 (ê = 0) and 1e-13 (the released cosine's clamped denominator) to 1e3,
    and targets of norm 1 and 2; ``gradcheck`` on the regular rows."""
    gen = torch.Generator().manual_seed(m)
    scale = torch.tensor([0.0, 1e-13, 1e-3, 0.5, 3.0, 40.0, 1e3], dtype=torch.float64).unsqueeze(-1)
    e_hat = F.normalize(torch.randn(7, m, generator=gen, dtype=torch.float64), dim=-1) * scale
    target = F.normalize(torch.randn(7, m, generator=gen, dtype=torch.float64), dim=-1)
    target[::2] *= 2
    weights = torch.rand(7, generator=gen, dtype=torch.float64)
    loss_fn = ((lambda e, t: vmf_released_loss(e, t, 0.2, approximate)) if variant == "released"
               else (lambda e, t: vmf_nll_loss(e, t, *variant, approximate=approximate)))
    results = []
    for fn in (loss_fn, lambda e, t: _composite_loss(e, t, variant, approximate)):
        e, t = e_hat.clone().requires_grad_(True), target.clone().requires_grad_(True)
        loss = fn(e, t)
        (loss * weights).sum().backward()
        results.append((loss.detach(), e.grad, t.grad))
    (got, got_e, got_t), (want, want_e, want_t) = results
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(got_e, want_e, rtol=1e-11, atol=1e-13)
    torch.testing.assert_close(got_t, want_t, rtol=1e-11, atol=1e-13)
    x = e_hat[2:5].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda e: loss_fn(e, target[2:5]), (x,), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_vmf_losses_compute_low_precision_inputs_in_float32(dtype):
    gen = torch.Generator().manual_seed(0)
    e_hat = (torch.randn(5, 300, generator=gen) * 0.6).to(dtype)
    target = F.normalize(torch.randn(5, 300, generator=gen), dim=-1).to(dtype)
    for fn in (lambda e, t: vmf_released_loss(e, t, 0.2), lambda e, t: vmf_nll_loss(e, t, 0.2, 0.1)):
        e = e_hat.clone().requires_grad_(True)
        loss = fn(e, target)
        loss.sum().backward()
        e32 = e_hat.float().clone().requires_grad_(True)
        loss32 = fn(e32, target.float())
        loss32.sum().backward()
        assert loss.dtype == torch.float32 and e.grad.dtype == dtype
        assert torch.equal(loss, loss32) and torch.equal(e.grad, e32.grad.to(dtype))
        assert torch.equal(fn(e_hat, target), loss32.detach())  # without a gradient: the same values


def test_cosine_and_l2_against_hand_computation(batch):
    e_hat, target = batch
    cos = (e_hat * target).sum(1) / (np.linalg.norm(e_hat, axis=1) * np.linalg.norm(target, axis=1))
    got = cosine_loss(torch.tensor(e_hat), torch.tensor(target)).numpy()
    assert np.allclose(got, 1 - cos, rtol=0, atol=1e-13)
    got = l2_loss(torch.tensor(e_hat), torch.tensor(target)).numpy()
    assert np.allclose(got, np.sqrt(((e_hat - target) ** 2).sum(1)), rtol=1e-13, atol=0)
    # no NaN gradient at a perfect prediction or at a zero prediction
    for pred in (torch.tensor(target), torch.zeros_like(torch.tensor(target))):
        pred.requires_grad_(True)
        (l2_loss(pred, torch.tensor(target)).sum() + cosine_loss(pred, torch.tensor(target)).sum()).backward()
        assert torch.isfinite(pred.grad).all()


def test_max_margin_against_brute_force():
    rng = np.random.default_rng(1)
    V, m, n, gamma = 23, 12, 9, 0.5
    table = _unit(rng.standard_normal((V, m)))
    table[1] = 0.0  # padding row
    candidates = np.ones(V, dtype=bool)
    candidates[[0, 1, 5]] = False
    e_hat = rng.standard_normal((n, m))
    target = rng.choice([i for i in range(V) if candidates[i]], size=n)
    expected_neg, expected_loss = [], []
    for i in range(n):
        u = e_hat[i] / np.linalg.norm(e_hat[i])
        best, best_j = -np.inf, None
        for j in range(V):
            if j == target[i] or not candidates[j]:
                continue
            score = u @ table[j] - table[target[i]] @ table[j]  # cos(ê, e_j) - cos(e_w, e_j)
            if score > best:
                best, best_j = score, j
        expected_neg.append(best_j)
        expected_loss.append(max(0.0, gamma + u @ table[best_j] - u @ table[target[i]]))
    assert max(expected_loss) > 0  # the margin is violated for some rows
    args = (torch.tensor(e_hat), torch.tensor(target), torch.tensor(table))
    for chunk in (4, 7, 1000):  # chunking over the vocabulary changes nothing
        negs = most_informative_negatives(*args, candidates=torch.tensor(candidates), chunk_size=chunk)
        assert negs.tolist() == expected_neg
        loss = max_margin_loss(*args, gamma=gamma, candidates=torch.tensor(candidates), chunk_size=chunk)
        assert np.allclose(loss.numpy(), expected_loss, rtol=0, atol=1e-13)


def test_synthetic_margin_against_hand_computation():
    """syn-margin (Bhat, Kumar & Tsvetkov 2019): u_orth = the part of ê orthogonal to e(w), normalised; the loss
    max(0, γ + cos(ê, u_orth) - cos(ê, e(w))), here on 3-4-5 and 5-12-13 triangles (float64, exact numbers)."""
    target = torch.tensor([[1.0, 0, 0]] * 6 + [[0, 0.6, 0.8], [0, 1.2, 1.6]], dtype=torch.float64)
    e_hat = torch.tensor([[3.0, 4, 0],      # cos 0.6, sin 0.8: 0.5 + 0.8 - 0.6
                          [4, 3, 0],        # cos 0.8, sin 0.6: 0.5 + 0.6 - 0.8
                          [2, 0, 0],        # parallel: u_orth = 0, max(0, 0.5 + 0 - 1)
                          [5, 0, 12],       # cos 5/13, sin 12/13
                          [0, 0, 0],        # zero prediction: both cosines 0
                          [-1, 0, 0],       # opposite: 0.5 + 0 + 1
                          [1, 0.6, 0.8],    # 45 degrees: sin = cos, the loss is γ
                          [1, 0.6, 0.8]],   # the same with a target of norm 2: projected on e(w)/|e(w)|
                         dtype=torch.float64)
    expected = [0.7, 0.3, 0.0, 0.5 + 7 / 13, 0.5, 1.5, 0.5, 0.5]
    assert np.allclose(synthetic_margin_loss(e_hat, target, 0.5).numpy(), expected, rtol=0, atol=1e-15)
    neg = synthetic_negatives(e_hat, target)
    assert np.allclose(neg.numpy(), [[0, 1, 0], [0, 1, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0], [1, 0, 0],
                                     [1, 0, 0]], rtol=0, atol=1e-15)
    assert synthetic_margin_loss(e_hat, target, 0.2)[:2].tolist() == pytest.approx([0.4, 0.0], abs=1e-15)


def test_synthetic_margin_special_cases_and_gradients():
    """The loss is a function of the angle only, max(0, γ + sin θ - cos θ); it is the max-margin loss whose one
    candidate negative is u_orth; its gradient is the one through u_orth, and the one with u_orth held fixed."""
    rng = np.random.default_rng(7)
    n, m, gamma = 40, 9, 0.3
    target = torch.tensor(_unit(rng.standard_normal((n, m))))
    direction = _unit(rng.uniform(-1, 4, (n, 1)) * target.numpy() + rng.standard_normal((n, m)) / 3)
    e_hat = torch.tensor(direction * rng.uniform(0.1, 20, (n, 1)))  # angles from near 0 to near 180 degrees
    loss = synthetic_margin_loss(e_hat, target, gamma)
    cos = cosine_similarity(e_hat, target)
    assert torch.allclose(loss, torch.clamp(gamma + (1 - cos ** 2).sqrt() - cos, min=0), rtol=0, atol=1e-14)
    assert 0 < (loss > 0).sum() < n  # both sides of the hinge
    neg = synthetic_negatives(e_hat, target)
    for i in range(n):  # the table [e(w), u_orth]: the most informative (only) negative is u_orth
        table = torch.stack([target[i], neg[i]])
        args = (e_hat[i:i + 1], torch.tensor([0]), table)
        assert most_informative_negatives(*args).tolist() == [1]
        assert torch.allclose(max_margin_loss(*args, gamma=gamma), loss[i:i + 1], rtol=0, atol=1e-14)
    grads = []
    for held in (None, False, True):  # the function; autograd through u_orth; u_orth held fixed
        pred = e_hat.clone().requires_grad_(True)
        if held is None:
            out = synthetic_margin_loss(pred, target, gamma)
        else:
            u = synthetic_negatives(pred, target)
            u = u.detach() if held else u
            out = torch.clamp(gamma + cosine_similarity(pred, u) - cosine_similarity(pred, target), min=0)
        out.sum().backward()
        grads.append(pred.grad)
    assert torch.allclose(grads[0], grads[1], rtol=0, atol=1e-12)
    assert torch.allclose(grads[0], grads[2], rtol=0, atol=1e-12)
    # finite gradients at the degenerate predictions, float32 included: zero, parallel, opposite, almost parallel
    unit = torch.tensor([0.6, 0.8, 0.0])
    for dtype in (torch.float64, torch.float32):
        pred = torch.stack([torch.zeros(3), 3 * unit, -unit, 5 * unit + torch.tensor([0, 0, 1e-7]),
                            torch.tensor([1e-30, 0, 0])]).to(dtype).requires_grad_(True)
        out = synthetic_margin_loss(pred, unit.expand(5, 3).to(dtype), 1.0)
        out.sum().backward()
        assert torch.isfinite(out).all() and torch.isfinite(pred.grad).all(), dtype
        assert pred.grad[1:4].abs().max() < 1  # no 1/|ê - (êᵀe)e| blow-up at or near the target direction
        assert out[0].item() == 1.0 and out[1].item() == pytest.approx(0.0, abs=1e-6)


def test_nearest_neighbours_chunked_equals_full_argmax():
    gen = torch.Generator().manual_seed(0)
    table = F.normalize(torch.randn(1001, 30, generator=gen), dim=-1)
    e_hat = torch.randn(17, 30, generator=gen) * 3
    full = F.linear(e_hat, table)
    for chunk in (64, 333, 5000):
        scores, ids = nearest_neighbours(e_hat, table, k=5, chunk_size=chunk)
        ref_scores, ref_ids = full.topk(5, dim=-1)
        assert torch.equal(ids, ref_ids) and torch.allclose(scores, ref_scores)
    # the same word is nearest by dot product, by cosine, and by L2 distance (unit table)
    cos_ids = F.linear(F.normalize(e_hat, dim=-1), table).argmax(-1)
    l2_ids = torch.cdist(e_hat, table).argmin(-1)
    assert torch.equal(cos_ids, full.argmax(-1)) and torch.equal(l2_ids, full.argmax(-1))
    assert math.isfinite(float(scores.sum()))


EDGE_KAPPAS = [10.0 ** e for e in range(-8, 20)] + [10.0 ** e for e in range(20, 301, 20)]


@pytest.mark.parametrize("m", [2, 3, 50, 300, 1000])
def test_log_cm_and_gradient_at_the_edges_match_mpmath(m):
    """κ from 1e-8 to 1e300: value and gradient within 1e-10 of mpmath (50 digits). The gradient used to come
    from a difference of two O(κ) exponents and was wrong above κ ≈ 1e12 (m = 300, κ = 1e17: -8.9e6)."""
    kappa = torch.tensor(EDGE_KAPPAS, dtype=torch.float64, requires_grad=True)
    value = log_cm(kappa, m)
    value.sum().backward()
    with mpmath.workdps(50):
        nu = mpmath.mpf(m) / 2 - 1
        for k, got, grad in zip(EDGE_KAPPAS, value.tolist(), kappa.grad.tolist()):
            i_nu = mpmath.besseli(nu, mpmath.mpf(k))
            ref = nu * mpmath.log(k) - mpmath.mpf(m) / 2 * mpmath.log(2 * mpmath.pi) - mpmath.log(i_nu)
            ratio = mpmath.besseli(nu + 1, mpmath.mpf(k)) / i_nu
            assert abs(got - float(ref)) <= 1e-10 * abs(float(ref)), (m, k, got, float(ref))
            assert abs(-grad - float(ratio)) <= 1e-10 * float(ratio), (m, k, -grad, float(ratio))
            assert -1.0 <= grad < 0.0


@pytest.mark.parametrize("m", [2, 3, 50, 300, 1000])
def test_log_cm_limits_at_zero_and_infinity(m):
    kappa = torch.tensor([0.0, math.inf], dtype=torch.float64, requires_grad=True)
    value = log_cm(kappa, m)
    value.sum().backward()
    assert value[0].item() == pytest.approx(log_cm_at_zero(m), rel=1e-12)  # the uniform density on the sphere
    assert value[1].item() == -math.inf
    assert kappa.grad.tolist() == [0.0, -1.0]  # -A_m(0) = 0, -A_m(inf) = -1
    assert bessel_iv_ratio(m / 2 - 1, torch.tensor([0.0, math.inf])).tolist() == [0.0, 1.0]


# ------------------------------------------------------------------------------------------------------------
# the fast path (m >= 32): accuracy in float32 and float64, limits, and how many operations a loss step runs
# ------------------------------------------------------------------------------------------------------------

TRAINING_KAPPAS = [10 ** (e / 8) for e in range(-24, 25)]  # 1e-3 .. 1e3, the range seen in training


@pytest.mark.parametrize("m", [32, 128, 300, 512, 1024])
def test_fast_path_against_mpmath_in_float32_and_float64(m):
    """Measured over κ in [1e-3, 1e3] (121 points, 2026-11-27): float32 value within 2.5e-7 x max|log C_m| of
    mpmath (relative error up to 2.3e-5 only where log C_m crosses 0), ratio within 2.3e-7 relative; float64
    within 4e-16 x max|log C_m| and ratio 4.5e-16 (1.5e-12 at m = 32: the Debye series' truncation at ν = 15)."""
    for dtype, value_tol, ratio_tol in ((torch.float32, 1e-6, 5e-7), (torch.float64, 1e-13, 5e-12)):
        kappa = torch.tensor(TRAINING_KAPPAS, dtype=dtype)
        value, neg_ratio = log_cm_fast(kappa, m)
        assert value.dtype == dtype and neg_ratio.dtype == dtype
        ref = np.array([mp_log_cm_and_ratio(m, k) for k in kappa.double().tolist()])  # at the rounded κ
        scale = np.maximum(np.abs(ref[:, 0]), m)
        err_value = np.abs(value.double().numpy() - ref[:, 0]) / scale
        err_ratio = np.abs(-neg_ratio.double().numpy() - ref[:, 1]) / ref[:, 1]
        assert err_value.max() <= value_tol, (dtype, TRAINING_KAPPAS[err_value.argmax()], err_value.max())
        assert err_ratio.max() <= ratio_tol, (dtype, TRAINING_KAPPAS[err_ratio.argmax()], err_ratio.max())


def test_log_cm_takes_the_fast_path_from_m_32_and_computes_half_inputs_in_float32():
    kappa = torch.tensor([0.0, 1e-3, 0.7, 30.0, 300.0, 6e4])
    for m in (32, 300):
        assert torch.equal(log_cm(kappa, m), log_cm_fast(kappa, m)[0])
        assert torch.equal(log_cm(kappa.double(), m), log_cm_fast(kappa.double(), m)[0])
    assert FAST_MIN_DIM == 32
    assert torch.equal(log_cm(kappa, 31), log_cm_float64(kappa, 31).float())  # below: the float64 recurrence
    for dtype in (torch.float16, torch.bfloat16):
        k = kappa.to(dtype).requires_grad_(True)
        value = log_cm(k, 300)
        value.sum().backward()
        assert value.dtype == torch.float32 and k.grad.dtype == dtype
        value32, neg_ratio32 = log_cm_fast(k.detach().float(), 300)
        assert torch.equal(value, value32) and torch.equal(k.grad, neg_ratio32.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fast_path_limits(dtype):
    info = torch.finfo(dtype)
    kappa = torch.tensor([0.0, info.tiny, 1e30, info.max, math.inf, math.nan], dtype=dtype, requires_grad=True)
    value = log_cm(kappa, 300)
    value.sum().backward()
    assert value[0].item() == pytest.approx(log_cm_at_zero(300), rel=1e-7 if dtype == torch.float32 else 1e-14)
    assert torch.isfinite(value[:4]).all() and value[4].item() == -math.inf and math.isnan(value[5].item())
    assert kappa.grad[0].item() == 0.0 and kappa.grad[4].item() == -1.0 and math.isnan(kappa.grad[5].item())
    assert ((kappa.grad[1:4] < 0) & (kappa.grad[1:4] >= -1)).all()


#: aten operations that launch no kernel of their own: views, allocations, dtype/shape queries and wrappers whose
#: work shows up as a nested operation (``to`` as its ``copy_``, ``stack`` as its ``cat``)
NON_KERNEL_OPS = frozenset(
    "aten::" + name for name in (
        "empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "zeros_like", "ones_like",
        "full_like", "view", "_unsafe_view", "reshape", "_reshape_alias", "view_as", "expand", "expand_as",
        "as_strided", "unsqueeze", "squeeze", "t", "transpose", "permute", "select", "slice", "narrow", "unbind",
        "split", "chunk", "alias", "detach", "lift_fresh", "resolve_conj", "resolve_neg", "contiguous", "to",
        "_to_copy", "stack", "result_type", "promote_types", "item", "_local_scalar_dense", "is_nonzero"))


def _op_counts(loss_fn, e_hat, target):
    """(aten operations, kernel-like operations) of one forward + backward of ``loss_fn``, counted with torch's
    profiler. aten: every one it lists, nested calls too. Kernel-like: those not in NON_KERNEL_OPS with no such
    operation nested below them, i.e. about one kernel launch each on a GPU (a CPU reduction shows up as its
    nested ``fill_``)."""
    from torch.profiler import ProfilerActivity, profile

    loss_fn(e_hat, target).sum().backward()  # first call: lazy set-up (tables, constants) is not counted
    e_hat.grad = None
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss_fn(e_hat, target).sum().backward()
    e_hat.grad = None
    events = [event for event in prof.events() if event.name.startswith("aten::")]
    above_a_kernel = set()
    for event in events:
        parent = event.cpu_parent if event.name not in NON_KERNEL_OPS else None
        while parent is not None:
            above_a_kernel.add(parent.id)
            parent = parent.cpu_parent
    kernels = sum(1 for event in events if event.name not in NON_KERNEL_OPS and event.id not in above_a_kernel)
    return len(events), kernels


VMF_VARIANTS = {
    "released": lambda e, t: vmf_released_loss(e, t, 0.2),
    "plain": lambda e, t: vmf_nll_loss(e, t),
    "reg1": lambda e, t: vmf_nll_loss(e, t, 0.2, 1.0),
    "reg2": lambda e, t: vmf_nll_loss(e, t, 0.0, 0.1),
    "reg1+reg2": lambda e, t: vmf_nll_loss(e, t, 0.02, 0.1),
    "released, approx": lambda e, t: vmf_released_loss(e, t, 0.2, approximate=True),
    "reg1, approx": lambda e, t: vmf_nll_loss(e, t, 0.2, 1.0, approximate=True),
}


@pytest.mark.parametrize("variant", list(VMF_VARIANTS))
def test_vmf_loss_runs_at_most_one_and_a_half_times_the_kernels_of_the_cosine_loss(variant):
    """Pinned: one forward + backward of every vMF variant (m = 300, float32) runs at most 1.5x the kernel-like
    operations of ``cosine_loss`` (on a GPU each is a kernel launch) and 1.6x its aten operations. Before the fast
    path the released default ran 446 aten operations against cosine's 62; before the hand-written gradient
    (``RowLoss``) 105 aten and 57 kernel-like against cosine's 62 and 27 (now 94 and 37, torch 2.13)."""
    gen = torch.Generator().manual_seed(0)
    e_hat = (torch.randn(64, 300, generator=gen) * 0.6).requires_grad_(True)
    target = F.normalize(torch.randn(64, 300, generator=gen), dim=-1)
    cosine, cosine_kernels = _op_counts(cosine_loss, e_hat, target)
    ops, kernels = _op_counts(VMF_VARIANTS[variant], e_hat, target)
    assert 40 <= cosine <= 80 and 20 <= cosine_kernels <= 35, (cosine, cosine_kernels)  # the yardstick (62, 27)
    assert kernels <= 1.5 * cosine_kernels, (variant, kernels, cosine_kernels)
    assert ops <= 1.6 * cosine, (variant, ops, cosine)


@pytest.mark.parametrize("variant", list(VMF_VARIANTS))
def test_vmf_losses_are_unchanged_under_autocast(variant):
    """Under ``--amp`` the criterion runs inside autocast. No operation of a vMF loss may drop to half precision
    there (a matrix product would: the log C_m sums are hundreds, so bf16 would be off by about 1). Value and
    gradient under CPU autocast (bfloat16) equal those outside it, bit for bit."""
    gen = torch.Generator().manual_seed(3)
    e_hat = (torch.randn(32, 300, generator=gen) * 3).requires_grad_(True)
    target = F.normalize(torch.randn(32, 300, generator=gen), dim=-1)
    results = []
    for enabled in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
            loss = VMF_VARIANTS[variant](e_hat, target)
        loss.sum().backward()
        results.append((loss.detach().clone(), e_hat.grad.clone()))
        e_hat.grad = None
    assert results[1][0].dtype == torch.float32
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


def _broken_compile(fn, **kwargs):
    """A torch.compile whose result fails when called, as one without a C++ compiler does."""
    def call(*args):
        raise RuntimeError("no C++ compiler\nsecond line")
    return call


def test_compiled_fast_path_falls_back_to_eager_with_one_warning(monkeypatch, caplog):
    from fairseq_outlayers.methods.continuous import bessel

    monkeypatch.setattr(torch, "compile", _broken_compile)
    monkeypatch.setitem(bessel._COMPILED, "kernel", None)
    monkeypatch.setitem(bessel._COMPILED, "failed", False)
    monkeypatch.setenv(bessel.COMPILE_ENV, "1")
    kappa = torch.tensor([0.5, 20.0, 400.0])
    with caplog.at_level("WARNING"):
        first, again = log_cm(kappa, 300), log_cm(kappa, 300)
    monkeypatch.setenv(bessel.COMPILE_ENV, "0")
    assert torch.equal(first, log_cm(kappa, 300)) and torch.equal(again, first)
    assert caplog.text.count("torch.compile of the log C_m fast path failed") == 1 and "no C++ compiler" in caplog.text


@pytest.mark.slow
def test_compiled_fast_path_agrees_with_eager(monkeypatch):
    """torch.compile on the CPU (needs a C++ compiler; about a minute): the same values to float32 rounding
    (of the terms' size m)."""
    from fairseq_outlayers.methods.continuous import bessel

    monkeypatch.setitem(bessel._COMPILED, "kernel", None)
    monkeypatch.setitem(bessel._COMPILED, "failed", False)
    kappa = torch.tensor(TRAINING_KAPPAS, requires_grad=True)
    monkeypatch.setenv(bessel.COMPILE_ENV, "1")
    compiled = log_cm(kappa, 300)
    compiled.sum().backward()
    grad = kappa.grad.clone()
    assert not bessel._COMPILED["failed"]
    kappa.grad = None
    monkeypatch.setenv(bessel.COMPILE_ENV, "0")
    eager = log_cm(kappa, 300)
    eager.sum().backward()
    # log C_m is a sum of terms of size ~m that cancel near its zero: the error scale is m, as in the mpmath test
    torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=1e-6 * 300)
    torch.testing.assert_close(grad, kappa.grad, rtol=1e-6, atol=0)


# ------------------------------------------------------------------------------------------------------------
# the compiled vMF losses (--vmf-compile)
# ------------------------------------------------------------------------------------------------------------

COMPILED_LOSSES = {
    "released": lambda e, t, c: vmf_released_loss(e, t, 0.2, compiled=c),
    "reg1": lambda e, t, c: vmf_nll_loss(e, t, 0.2, 1.0, compiled=c),
    "reg1+reg2": lambda e, t, c: vmf_nll_loss(e, t, 0.02, 0.1, compiled=c),
}


@pytest.mark.parametrize("name,rows,args", [("released", "_released_rows", (0.2,)), ("nll", "_nll_rows", (0.2, 1.0))])
@pytest.mark.parametrize("need_grad", [True, False], ids=["train", "valid"])
def test_compiled_rows_are_one_graph_without_breaks(name, rows, args, need_grad):
    """What --vmf-compile hands to torch.compile traces as a single graph (no graph break, so on a GPU it is a
    few fused kernels, not the eager ops in pieces). Traced only, not compiled: about a second."""
    import torch._dynamo

    from fairseq_outlayers.methods.continuous import bessel, vmf_losses

    e, t = torch.randn(8, 300), F.normalize(torch.randn(8, 300), dim=-1)
    tables = bessel._fast_tables(300, e.dtype, e.device, -1.0)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(getattr(vmf_losses, rows))(e, t, need_grad, False, tables, *args)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_compiled_losses_equal_eager_for_every_batch_size():
    """torch.compile on the CPU (a C++ compiler; about 20 s): one compiled graph serves every batch size and both
    dtypes, with the eager values and gradients to float32 rounding (float64: to 1e-13), zero and huge
    predictions included."""
    from fairseq_outlayers.methods.continuous import vmf_losses

    for state in vmf_losses.COMPILED_ROWS.values():
        state.update(kernel=None, failed=False)
    for n, dtype in ((5, torch.float32), (64, torch.float32), (7, torch.float64)):
        gen = torch.Generator().manual_seed(n)
        e = torch.randn(n, 300, generator=gen, dtype=dtype) * torch.logspace(-2, 2, n, dtype=dtype).unsqueeze(-1)
        e[0] = 0.0  # a zero prediction: loss finite, gradient 0 in its direction
        t = F.normalize(torch.randn(n, 300, generator=gen, dtype=dtype), dim=-1)
        for name, loss in COMPILED_LOSSES.items():
            grads = []
            for compiled in (True, False):
                x = e.clone().requires_grad_(True)
                value = loss(x, t, compiled)
                value.sum().backward()
                grads.append((value.detach(), x.grad))
            (v_c, g_c), (v_e, g_e) = grads
            tol = 1e-13 if dtype == torch.float64 else 2e-6
            assert torch.isfinite(v_c).all() and torch.isfinite(g_c).all(), (name, n)
            torch.testing.assert_close(v_c, v_e, rtol=tol, atol=tol * 300, msg=f"{name} n={n} {dtype}")
            torch.testing.assert_close(g_c, g_e, rtol=tol, atol=tol, msg=f"{name} n={n} {dtype}")
    assert all(state["kernel"] is not None and not state["failed"] for state in vmf_losses.COMPILED_ROWS.values())


def test_compiled_losses_fall_back_to_eager_with_one_warning(monkeypatch, caplog):
    from fairseq_outlayers.methods.continuous import vmf_losses

    monkeypatch.setattr(torch, "compile", _broken_compile)
    monkeypatch.setitem(vmf_losses.COMPILED_ROWS, "released", {"kernel": None, "failed": False})
    e, t = torch.randn(6, 64), F.normalize(torch.randn(6, 64), dim=-1)
    with caplog.at_level("WARNING"):
        first, again = (vmf_released_loss(e, t, 0.2, compiled=True) for _ in range(2))
    assert torch.equal(first, vmf_released_loss(e, t, 0.2)) and torch.equal(again, first)
    assert caplog.text.count("torch.compile of the vMF loss (released) failed") == 1
    assert "no C++ compiler" in caplog.text and vmf_losses.COMPILED_ROWS["released"]["failed"]
    # the approximation and m < 32 are never compiled: torch.compile is not even asked
    monkeypatch.setitem(vmf_losses.COMPILED_ROWS, "released", {"kernel": None, "failed": False})
    small = torch.randn(6, 16)
    assert torch.equal(vmf_released_loss(small, F.normalize(small, dim=-1), 0.2, compiled=True),
                       vmf_released_loss(small, F.normalize(small, dim=-1), 0.2))
    vmf_released_loss(e, t, 0.2, approximate=True, compiled=True)
    assert vmf_losses.COMPILED_ROWS["released"]["kernel"] is None
