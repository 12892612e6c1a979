"""Cross-entropy of ``logits = x W^T + b`` without the N x V logits: the maths of ``--criterion fused_cross_entropy``.

Every softmax-type output layer scores word j by ``x . w_j + b_j`` (``FactorisedSoftmaxOutput.logit_factors``). The
label-smoothed cross-entropy of fairseq (``label_smoothed_nll_loss``) per target position, with ``lse`` the
log-sum-exp of the logits, ``z_t`` the target's logit, ``S`` the sum of all V logits and ``e = eps / (V - 1)``, is

    nll  = lse - z_t
    loss = (1 - eps - e) * nll + e * (V * lse - S)  =  nll + e * (V * z_t - S)

(the coefficients of ``lse`` add up to 1). ``z_t`` needs one row of W per position and ``S = x . sum_j w_j +
sum_j b_j`` one sum over the vocabulary, so ordinary autograd handles both; only ``nll`` needs all V logits. It
comes from either

* torch's own chunked ``F.linear_cross_entropy`` (torch >= 2.13, any device), in chunks of token rows of at most
  ``block_elements`` logits, with label smoothing 0: its chunked path takes none, so the smoothing term is added
  here; or
* Cut Cross-Entropy's CUDA kernel (``cut_cross_entropy.linear_cross_entropy``, optional package
  ``cut-cross-entropy``).

``auto`` takes, per device, the implementation that the committed benchmark page of that device found fastest
among the exact ones (``AUTO``; tests/test_fused_cross_entropy.py checks it against the page). Half-precision
inputs are computed in float32; the results are float32 (float64 for float64).
"""
import importlib.util
import inspect
from typing import Optional

import torch

IMPLS = ("auto", "cce", "torch")
DEFAULT_BLOCK_ELEMENTS = 1 << 24  # 16M logits: 64 MiB per chunk in float32
#: ``auto`` per device type: the fastest exact implementation on docs/benchmarks/fused_loss_peers_<device>.md. CUDA has
#: no page yet: there Cut Cross-Entropy is taken when it is installed and passes its check, else torch's op.
AUTO = {"cpu": "torch"}


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def _block_logits(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], dtype) -> torch.Tensor:
    w = weight.to(dtype)
    if bias is None:
        return x.to(dtype) @ w.t()
    return torch.addmm(bias.to(dtype), x.to(dtype), w.t())


# -- torch's own linear_cross_entropy ---------------------------------------------------------------------------
def torch_rows(num_tokens: int, vocab_size: int, block_elements: int = DEFAULT_BLOCK_ELEMENTS) -> int:
    """Token rows per chunk of torch's chunked path: about ``block_elements`` logits a chunk, at least one row."""
    return max(1, min(num_tokens, block_elements // max(vocab_size, 1)))


def torch_op_missing() -> Optional[str]:
    """None when this torch has ``F.linear_cross_entropy`` with its chunked path (torch >= 2.13), else why not."""
    if hasattr(torch.nn.functional, "linear_cross_entropy") and hasattr(torch.nn, "LinearCrossEntropyOptions"):
        return None
    return (f"needs torch >= 2.13 (torch.nn.functional.linear_cross_entropy), but this is torch {torch.__version__}; "
            "pip install torch==2.13.0")


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
        return torch.cat([_block_logits(x[i:i + rows], weight, bias, _compute_dtype(x.dtype)).argmax(dim=1)
                          for i in range(0, x.size(0), rows)]) if x.size(0) else x.new_zeros(0, dtype=torch.long)


# -- Cut Cross-Entropy ---------------------------------------------------------------------------------------------
def cce_available() -> bool:
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
        raise RuntimeError("the cce implementation runs on CUDA tensors only; use the torch implementation on "
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
    """None when Cut Cross-Entropy gives the float64 loss (to 1 %) and a finite gradient on a small problem
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
            xd, wd, bd = x.detach().double(), w.double(), b.double()
            want = float((torch.logsumexp(xd @ wd.t() + bd, dim=1) - (xd * wd[t]).sum(1) - bd[t]).sum())
            if not bool(torch.isfinite(x.grad).all()):
                _CCE_CHECKS[key] = "its gradient is not finite"
            elif abs(float(got) - want) > 0.01 * abs(want):
                _CCE_CHECKS[key] = f"its loss {float(got):.4g} differs from the float64 loss {want:.4g}"
            else:
                _CCE_CHECKS[key] = None
        except Exception as e:  # noqa: BLE001  (any failure of the optional kernel means: do not use it)
            _CCE_CHECKS[key] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    return _CCE_CHECKS[key]


# -- the loss ------------------------------------------------------------------------------------------------------
def resolve_impl(impl: str, device: torch.device, dtype: Optional[torch.dtype] = None) -> str:
    """``auto``: ``AUTO`` of the device type; on CUDA, Cut Cross-Entropy when it is installed (and, given ``dtype``,
    passes ``check_cce``), else ``torch``."""
    if impl not in IMPLS:
        raise ValueError(f"unknown implementation {impl!r}; choose one of {', '.join(IMPLS)}")
    if impl == "auto":
        if AUTO.get(device.type, "cce") != "cce":
            return AUTO[device.type]
        # Cut Cross-Entropy only where it is installed and passes its check, whatever the figures say
        usable = device.type == "cuda" and cce_available()
        return "cce" if usable and (dtype is None or check_cce(device, dtype) is None) else "torch"
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
    if epsilon != 0.0:  # the target's logit: one row of W per position
        z_t = (x.to(dtype) * weight.index_select(0, t).to(dtype)).sum(dim=1)
        if bias is not None:
            z_t = z_t + bias.index_select(0, t).to(dtype)
    if impl == "cce":
        nll = cce_nll(x, weight, bias, t).to(dtype)
    else:  # torch's chunked op; summed inside when the sum is all that is asked for (its gradient comes with it)
        nll = torch_nll(x, weight, bias, t, block_elements, reduce=reduce).to(dtype)
    if return_argmax:
        argmax = chunked_argmax(x.detach(), weight.detach(), None if bias is None else bias.detach(), block_elements)
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
