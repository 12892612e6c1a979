"""Cross-entropy of ``logits = x W^T + b`` without the N x V logits: the maths of ``--criterion fused_cross_entropy``.

Every softmax-type output layer scores word j by ``x . w_j + b_j`` (``FactorisedSoftmaxOutput.logit_factors``). The
label-smoothed cross-entropy of fairseq (``label_smoothed_nll_loss``) per target position, with ``lse`` the
log-sum-exp of the logits, ``z_t`` the target's logit, ``S`` the sum of all V logits and ``e = eps / (V - 1)``, is

    nll  = lse - z_t
    loss = (1 - eps - e) * nll + e * (V * lse - S)  =  nll + e * (V * z_t - S)

(the coefficients of ``lse`` add up to 1). ``z_t`` needs one row of W per position and ``S = x . sum_j w_j +
sum_j b_j`` one sum over the vocabulary, so ordinary autograd handles both; only ``lse`` needs all V logits. It
comes from either

* ``chunked_logsumexp`` (any device): blocks of at most ``block_elements`` logits, an online log-sum-exp over the
  vocabulary blocks, and a backward pass that recomputes each block's logits (the softmax is the gradient); or
* Cut Cross-Entropy's CUDA kernel (``cut_cross_entropy.linear_cross_entropy``, optional package
  ``cut-cross-entropy``), which returns ``nll`` directly.

Half-precision inputs are computed in float32 inside the blocks; the results are float32 (float64 for float64).
"""
import inspect
import math
from typing import Optional, Tuple

import torch

IMPLS = ("auto", "cce", "chunked", "torch")
DEFAULT_BLOCK_ELEMENTS = 1 << 24  # 16M logits: 64 MiB per block in float32
MIN_VOCAB_BLOCK = 256


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def block_sizes(num_tokens: int, vocab_size: int, block_elements: int = DEFAULT_BLOCK_ELEMENTS) -> Tuple[int, int]:
    """(token block, vocabulary block) with token block x vocabulary block <= ``block_elements`` where possible:
    all tokens at once and the vocabulary split when the budget allows, else blocks of both."""
    if block_elements < 1:
        raise ValueError(f"block_elements must be positive, got {block_elements}")
    vocab_block = min(vocab_size, max(min(MIN_VOCAB_BLOCK, block_elements), block_elements // max(num_tokens, 1)))
    token_block = min(max(num_tokens, 1), max(1, block_elements // vocab_block))
    return token_block, vocab_block


def _block_logits(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], dtype) -> torch.Tensor:
    w = weight.to(dtype)
    if bias is None:
        return x @ w.t()
    return torch.addmm(bias.to(dtype), x, w.t())


class ChunkedLogSumExp(torch.autograd.Function):
    """``(logsumexp(x W^T + b, -1), argmax)`` over blocks; gradients for x, W and b (argmax has none and is
    computed only when ``want_argmax``, else returned empty)."""

    @staticmethod
    def forward(ctx, x, weight, bias, block_elements, want_argmax):
        with torch.autocast(x.device.type, enabled=False):  # the blocks stay in float32 under --amp
            return ChunkedLogSumExp._forward(ctx, x, weight, bias, block_elements, want_argmax)

    @staticmethod
    def _forward(ctx, x, weight, bias, block_elements, want_argmax):
        dtype = _compute_dtype(x.dtype)
        n, v = x.size(0), weight.size(0)
        nb, vb = block_sizes(n, v, block_elements)
        lse = torch.full((n,), -math.inf, dtype=dtype, device=x.device)
        argmax = torch.zeros(n if want_argmax else 0, dtype=torch.long, device=x.device)
        best = torch.full((n if want_argmax else 0,), -math.inf, dtype=dtype, device=x.device)
        for n0 in range(0, n, nb):
            xs = x[n0:n0 + nb].to(dtype)
            for v0 in range(0, v, vb):
                z = _block_logits(xs, weight[v0:v0 + vb], None if bias is None else bias[v0:v0 + vb], dtype)
                if want_argmax:
                    block_max, block_arg = z.max(dim=1)
                    better = block_max > best[n0:n0 + nb]  # strict: the first of equal scores wins, as argmax
                    argmax[n0:n0 + nb] = torch.where(better, block_arg + v0, argmax[n0:n0 + nb])
                    best[n0:n0 + nb] = torch.where(better, block_max, best[n0:n0 + nb])
                # online log-sum-exp: combine the running value with this block's
                lse[n0:n0 + nb] = torch.logaddexp(lse[n0:n0 + nb], torch.logsumexp(z, dim=1))
        ctx.save_for_backward(x, weight, bias, lse)
        ctx.block_elements = block_elements
        ctx.mark_non_differentiable(argmax)
        return lse, argmax

    @staticmethod
    def backward(ctx, grad_lse, _grad_argmax):
        with torch.autocast(grad_lse.device.type, enabled=False):
            return ChunkedLogSumExp._backward(ctx, grad_lse)

    @staticmethod
    def _backward(ctx, grad_lse):
        x, weight, bias, lse = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        dtype = lse.dtype
        n, v = x.size(0), weight.size(0)
        nb, vb = block_sizes(n, v, ctx.block_elements)
        gx = torch.zeros(x.shape, dtype=dtype, device=x.device) if need_x else None
        gw = torch.zeros(weight.shape, dtype=dtype, device=x.device) if need_w else None
        gb = torch.zeros(v, dtype=dtype, device=x.device) if (need_b and bias is not None) else None
        grad_lse = grad_lse.to(dtype)
        for n0 in range(0, n, nb):
            xs = x[n0:n0 + nb].to(dtype)
            for v0 in range(0, v, vb):
                wv = weight[v0:v0 + vb]
                z = _block_logits(xs, wv, None if bias is None else bias[v0:v0 + vb], dtype)
                # d lse / d z = softmax(z), scaled by the incoming gradient of each position (in place)
                p = z.sub_(lse[n0:n0 + nb].unsqueeze(1)).exp_().mul_(grad_lse[n0:n0 + nb].unsqueeze(1))
                if gx is not None:
                    gx[n0:n0 + nb].addmm_(p, wv.to(dtype))
                if gw is not None:
                    gw[v0:v0 + vb].addmm_(p.t(), xs)
                if gb is not None:
                    gb[v0:v0 + vb] += p.sum(dim=0)
        return (None if gx is None else gx.to(x.dtype), None if gw is None else gw.to(weight.dtype),
                None if gb is None else gb.to(bias.dtype), None, None)


def chunked_logsumexp(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                      block_elements: int = DEFAULT_BLOCK_ELEMENTS, want_argmax: bool = True
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(log-sum-exp, argmax) of the rows of ``x W^T + b`` (x: N x d, W: V x d, b: V or None), never holding more
    than about ``block_elements`` logits; the argmax is empty unless ``want_argmax``."""
    return ChunkedLogSumExp.apply(x, weight, bias, int(block_elements), bool(want_argmax))


# -- torch's own linear_cross_entropy ---------------------------------------------------------------------------
def torch_rows(num_tokens: int, vocab_size: int, block_elements: int = DEFAULT_BLOCK_ELEMENTS) -> int:
    """Token rows per chunk of torch's chunked path: about ``block_elements`` logits a chunk, at least one row."""
    return max(1, min(num_tokens, block_elements // max(vocab_size, 1)))


def torch_nll(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], target: torch.Tensor,
              block_elements: int = DEFAULT_BLOCK_ELEMENTS, reduce: bool = True) -> torch.Tensor:
    """``lse - z_t`` from torch's chunked ``F.linear_cross_entropy`` (summed, or one value per position), computed
    in float32 at least; chunks of ``torch_rows`` token rows."""
    dtype = _compute_dtype(x.dtype)
    options = torch.nn.LinearCrossEntropyOptions(
        chunking_method=None, batch_chunk_size=torch_rows(x.size(0), weight.size(0), block_elements))
    return torch.nn.functional.linear_cross_entropy(
        x.to(dtype), weight.to(dtype), target, linear_bias=None if bias is None else bias.to(dtype),
        reduction="sum" if reduce else "none", options=options)


def chunked_argmax(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                   block_elements: int = DEFAULT_BLOCK_ELEMENTS) -> torch.Tensor:
    """Each row's best-scoring word of ``x W^T + b``, in chunks of ``torch_rows`` rows (no gradient)."""
    with torch.no_grad():
        rows = torch_rows(x.size(0), weight.size(0), block_elements)
        return torch.cat([_block_logits(x[i:i + rows], weight, bias, x.dtype).argmax(dim=1)
                          for i in range(0, x.size(0), rows)]) if x.size(0) else x.new_zeros(0, dtype=torch.long)


# -- Cut Cross-Entropy ---------------------------------------------------------------------------------------------
def cce_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("cut_cross_entropy") is not None


CCE_MISSING = ("needs the cut-cross-entropy package (Linux with a CUDA GPU): pip install 'fairseq_outlayers[cce]'")


def _fold_bias(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
    """``[x, 1, 0..] . [w_j, b_j, 0..] = x . w_j + b_j``, padded to a multiple of 16 columns (for the kernel's
    tiles), for versions of Cut Cross-Entropy without a bias argument."""
    extra = 16 - x.size(1) % 16
    ones = x.new_zeros(x.size(0), extra)
    ones[:, 0] = 1
    columns = torch.cat([bias.to(weight.dtype).unsqueeze(1), weight.new_zeros(weight.size(0), extra - 1)], dim=1)
    return torch.cat([x, ones], dim=1), torch.cat([weight, columns], dim=1)


def cce_nll(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], target: torch.Tensor
            ) -> torch.Tensor:
    """Per-position ``lse - z_t`` from Cut Cross-Entropy (CUDA tensors; x and W in one dtype), float32."""
    try:
        from cut_cross_entropy import linear_cross_entropy
    except ImportError as e:
        raise RuntimeError(f"the cce implementation {CCE_MISSING}") from e
    if not x.is_cuda:
        raise RuntimeError("the cce implementation runs on CUDA tensors only; use the chunked implementation on "
                           "the CPU")
    weight = weight.to(x.dtype)
    kwargs = {}
    if bias is not None:
        if "bias" in inspect.signature(linear_cross_entropy).parameters:
            kwargs["bias"] = bias.to(x.dtype)
        else:
            x, weight = _fold_bias(x, weight, bias)
    nll = linear_cross_entropy(x.contiguous(), weight.contiguous(), target, reduction="none", **kwargs)
    return nll.float()


_CCE_CHECKS = {}


def check_cce(device: torch.device, dtype: torch.dtype, nll_fn=None) -> Optional[str]:
    """None when Cut Cross-Entropy gives the chunked path's loss (to 1 %) and a finite gradient on a small problem
    on ``device`` in ``dtype``; else why not, in a few words. Checked once per device and dtype: a kernel that
    fails to build (a Triton it was not written for) or computes wrong values is found before training uses it."""
    key = (str(device), dtype)
    if key not in _CCE_CHECKS:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 32, generator=g).to(device, dtype).requires_grad_()
        w = (0.1 * torch.randn(300, 32, generator=g)).to(device, dtype)
        b = (0.1 * torch.randn(300, generator=g)).to(device)
        t = torch.randint(0, 300, (64,), generator=g).to(device)
        try:
            with torch.enable_grad(), torch.autocast(x.device.type, enabled=False):
                got = (nll_fn or cce_nll)(x, w, b, t).sum()
                got.backward()
            want = float(chunked_logsumexp(x.detach().float(), w.float(), b.float())[0].sum()
                         - (x.detach().float() * w.float()[t]).sum() - b.float()[t].sum())
            if not bool(torch.isfinite(x.grad).all()):
                _CCE_CHECKS[key] = "its gradient is not finite"
            elif abs(float(got) - want) > 0.01 * abs(want):
                _CCE_CHECKS[key] = f"its loss {float(got):.4g} differs from the chunked path's {want:.4g}"
            else:
                _CCE_CHECKS[key] = None
        except Exception as e:  # noqa: BLE001  (any failure of the optional kernel means: do not use it)
            _CCE_CHECKS[key] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    return _CCE_CHECKS[key]


# -- the loss ------------------------------------------------------------------------------------------------------
def resolve_impl(impl: str, device: torch.device, dtype: Optional[torch.dtype] = None) -> str:
    """``auto``: Cut Cross-Entropy on CUDA when it is installed (and, given ``dtype``, passes ``check_cce``), else
    ``chunked``."""
    if impl not in IMPLS:
        raise ValueError(f"unknown implementation {impl!r}; choose one of {', '.join(IMPLS)}")
    if impl == "auto":
        usable = device.type == "cuda" and cce_available()
        return "cce" if usable and (dtype is None or check_cce(device, dtype) is None) else "chunked"
    return impl


def linear_cross_entropy(features: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                         target: torch.Tensor, epsilon: float = 0.0, ignore_index: Optional[int] = None,
                         reduce: bool = True, impl: str = "auto", block_elements: int = DEFAULT_BLOCK_ELEMENTS,
                         return_argmax: bool = False):
    """fairseq's ``label_smoothed_nll_loss(log_softmax(F.linear(features, weight, bias)), target, epsilon,
    ignore_index, reduce)`` without the logits: ``(loss, nll_loss)``, summed over the positions (``reduce``) or one
    value per position of ``target`` (0 where ``target == ignore_index``). ``features``: (..., d); ``target``:
    (...). With ``return_argmax`` a third output holds each kept position's best-scoring word (no gradient) and the
    kept positions' targets, as ``(argmax, target)``: what an accuracy needs. Autocast (``--amp``) is switched off
    inside: the loss is computed from the tensors as they are, in float32 at least."""
    with torch.autocast(features.device.type, enabled=False):
        return _linear_cross_entropy(features, weight, bias, target, epsilon, ignore_index, reduce, impl,
                                     block_elements, return_argmax)


def _linear_cross_entropy(features, weight, bias, target, epsilon, ignore_index, reduce, impl, block_elements,
                          return_argmax):
    d, v = weight.size(1), weight.size(0)
    x = features.reshape(-1, d)
    t = target.reshape(-1)
    keep = None
    if ignore_index is not None:
        mask = t.ne(ignore_index)
        if not bool(mask.all()):
            keep = mask.nonzero().squeeze(1)
            x, t = x.index_select(0, keep), t.index_select(0, keep)
    dtype = _compute_dtype(x.dtype)
    impl = resolve_impl(impl, x.device)
    argmax = z_t = None
    if impl == "chunked" or epsilon != 0.0:  # the target's logit: one row of W per position
        z_t = (x.to(dtype) * weight.index_select(0, t).to(dtype)).sum(dim=1)
        if bias is not None:
            z_t = z_t + bias.index_select(0, t).to(dtype)
    if impl == "chunked":
        lse, argmax = chunked_logsumexp(x, weight, bias, block_elements, want_argmax=return_argmax)
        nll = lse - z_t
    else:
        if impl == "cce":
            nll = cce_nll(x, weight, bias, t).to(dtype)
        else:  # torch's chunked op; summed inside when the sum is all that is asked for
            nll = torch_nll(x, weight, bias, t, block_elements, reduce=reduce).to(dtype)
        if return_argmax:
            argmax = chunked_argmax(x.detach(), weight.detach(), None if bias is None else bias.detach(),
                                    block_elements)
    loss = nll
    if epsilon != 0.0:
        eps_i = epsilon / (v - 1)
        total = x.to(dtype) @ weight.to(dtype).sum(dim=0)
        if bias is not None:
            total = total + bias.to(dtype).sum()
        smooth = eps_i * (v * z_t - total)
        loss = nll + (smooth.sum() if nll.dim() == 0 else smooth)
    if reduce:
        loss, nll = loss.sum(), nll.sum()
    elif keep is not None:
        loss = loss.new_zeros(target.numel()).index_copy(0, keep, loss).view(target.shape)
        nll = nll.new_zeros(target.numel()).index_copy(0, keep, nll).view(target.shape)
    else:
        loss, nll = loss.view(target.shape), nll.view(target.shape)
    if return_argmax:
        return loss, nll, (argmax, t)
    return loss, nll
