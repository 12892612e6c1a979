"""The fused loss against every peer a user would pick instead (``scripts/bench_fused_loss.py --peers``).

One problem per size: N token states (d wide, float32, 5 % of the targets padding, Zipf-distributed ids), a V x d
matrix and a bias, all needing gradients. One step is forward and backward of the summed, label-smoothed loss of
fairseq's ``label_smoothed_cross_entropy`` with the padding ignored. The contestants:

* ``plain``: ``F.linear``, float32 ``log_softmax`` and fairseq's ``label_smoothed_nll_loss`` (the baseline);
* ``torch reference``: ``F.linear_cross_entropy(..., options=None)``;
* ``torch chunked, auto``: ``F.linear_cross_entropy(..., options=LinearCrossEntropyOptions())``. Its chunked path
  takes no label smoothing: with smoothing it falls back to the reference path, so it is timed without only;
* ``torch chunked, aspect_ratio``: the same with ``chunking_method="aspect_ratio"``: chunks twice those of auto
  (``aspect_ratio:2`` in float32);
* ``--fused-impl X, B logits``: this package's ``linear_cross_entropy`` with ``impl=X`` and ``block_elements=B``;
* on CUDA, where installed: Cut Cross-Entropy (``--fused-impl cce``) and Liger's
  ``LigerFusedLinearCrossEntropyLoss``.

torch's and Liger's smoothing spreads eps over all V words, fairseq's over the V - 1 others; eps V / (V - 1) in
theirs is fairseq's eps, exactly. Each round runs every contestant once, in an order rotated by one per round;
the table gives the median time, the median of the per-round ratios to ``plain``, the largest peak memory above
the level before the step, and the error against the same loss computed in float64 (in blocks of tokens, so
that it fits): the relative error of the loss and the largest gradient error over x, W and b, relative to that
gradient's largest entry.
"""
import statistics
import time
from typing import Callable, Dict, List, NamedTuple, Optional

PAD = 1
#: a fused implementation is "exact" when its errors against float64 are within these (float32 inputs)
LOSS_RTOL = 1e-4
GRAD_RTOL = 1e-3


class Contestant(NamedTuple):
    name: str
    #: the ``--fused-impl`` value that runs it through the criterion, "" for a peer outside the package
    impl: str
    block_elements: Optional[int]
    step: Callable  # (x, w, b, t, eps) -> scalar loss


def zipf_targets(n: int, vocab: int, generator):
    """``n`` ids in [4, vocab) with frequency ~ 1/rank, 5 % of them padding."""
    import torch

    ranks = torch.arange(1, vocab - 3, dtype=torch.float64)
    ids = torch.multinomial(1.0 / ranks, n, replacement=True, generator=generator) + 4
    ids[torch.rand(n, generator=generator) < 0.05] = PAD
    return ids


def problem(n: int, d: int, v: int, device, seed: int = 0):
    """(x, W, b, target): float32 leaves on ``device``."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(v, d, generator=g) * d ** -0.5
    b = 0.1 * torch.randn(v, generator=g)
    t = zipf_targets(n, v, g)
    return tuple(a.to(device).requires_grad_() for a in (x, w, b)) + (t.to(device),)


def plain_loss(x, w, b, t, eps):
    import torch.nn.functional as F
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

    lprobs = F.log_softmax(F.linear(x, w, b).float(), dim=-1)
    return label_smoothed_nll_loss(lprobs, t, eps, ignore_index=PAD)[0]


def torch_smoothing(eps: float, v: int) -> float:
    """torch's (and Liger's) label_smoothing that gives fairseq's eps: eps V / (V - 1)."""
    return eps * v / (v - 1)


def contestants(device, eps: float, blocks: List[int], impl_blocks: Optional[Dict[str, List[int]]] = None
                ) -> List[Contestant]:
    """Every contestant at this label smoothing; ``impl_blocks`` gives an implementation other block sizes than
    ``blocks``."""
    import torch
    import torch.nn.functional as F

    from fairseq_outlayers.losses import linear_cross_entropy as lce

    def torch_op(options):
        def step(x, w, b, t, eps):
            return F.linear_cross_entropy(x, w, t, linear_bias=b, reduction="sum", ignore_index=PAD,
                                          label_smoothing=torch_smoothing(eps, w.size(0)), options=options)
        return step

    def package(impl, block):
        def step(x, w, b, t, eps):
            return lce.linear_cross_entropy(x, w, b, t, eps, ignore_index=PAD, impl=impl, block_elements=block)[0]
        return step

    out = [Contestant("plain", "", None, plain_loss)]
    torch_op_here = lce.torch_op_missing() is None  # torch >= 2.13; else its rows are left out (the page says why)
    if torch_op_here:
        out.append(Contestant("torch reference", "", None, torch_op(None)))
    if torch_op_here and eps == 0.0:  # torch's chunked path takes no label smoothing (it falls back to the reference)
        out += [Contestant("torch chunked, auto", "", None, torch_op(torch.nn.LinearCrossEntropyOptions())),
                Contestant("torch chunked, aspect_ratio", "", None,
                           torch_op(torch.nn.LinearCrossEntropyOptions(chunking_method="aspect_ratio")))]
    impls = [i for i in lce.IMPLS if i not in ("auto", "cce") and (i != "torch" or torch_op_here)]
    for impl in impls:
        for block in (impl_blocks or {}).get(impl, blocks):
            out.append(Contestant(f"`--fused-impl {impl}`, {block_label(block)} logits", impl, block,
                                  package(impl, block)))
    if str(device).startswith("cuda"):
        if lce.cce_available():
            out.append(Contestant("`--fused-impl cce` (Cut Cross-Entropy)", "cce", None, package("cce", None)))
        liger = liger_loss()
        if liger is not None:
            out.append(Contestant("Liger fused linear cross-entropy", "", None, liger))
    return out


def liger_loss():
    """Liger's fused linear cross-entropy as a step, or None when liger-kernel does not import."""
    try:
        from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss
    except Exception:  # noqa: BLE001  (missing, or Triton missing: not a contestant)
        return None

    def step(x, w, b, t, eps):
        loss = LigerFusedLinearCrossEntropyLoss(ignore_index=PAD, label_smoothing=torch_smoothing(eps, w.size(0)),
                                                reduction="sum")(w, x, t, b)
        return loss[0] if isinstance(loss, tuple) else loss
    return step


def block_label(block: int) -> str:
    return f"{block >> 20}M" if block % (1 << 20) == 0 else f"{block:,}"


def reference(x, w, b, t, eps, rows: int = 256):
    """The loss and the gradients of x, W, b in float64, computed over blocks of ``rows`` tokens."""
    import torch

    xd, wd, bd = (a.detach().double().requires_grad_() for a in (x, w, b))
    total = 0.0
    for i in range(0, xd.size(0), rows):
        loss = plain_loss(xd[i:i + rows], wd, bd, t[i:i + rows], eps)
        loss.backward()
        total += float(loss)
    return total, (xd.grad, wd.grad, bd.grad)


def errors(step, x, w, b, t, eps, ref):
    """(relative loss error, largest relative gradient error) of ``step`` against ``ref``."""
    for a in (x, w, b):
        a.grad = None
    loss = step(x, w, b, t, eps)
    loss.backward()
    ref_loss, ref_grads = ref
    grad_err = max(float((a.grad.double() - g).abs().max() / g.abs().max()) for a, g in zip((x, w, b), ref_grads))
    return abs(float(loss) - ref_loss) / abs(ref_loss), grad_err


def measure(n: int, d: int, v: int, eps: float, device, rounds: int, blocks: List[int], log=print,
            impl_blocks: Optional[Dict[str, List[int]]] = None) -> List[Dict]:
    """One row per contestant: name, impl, block, seconds (median), ratio (median of per-round ratios to plain),
    peak bytes (largest), loss_err, grad_err, exact; a contestant that runs out of memory gets seconds None."""
    import torch

    from fairseq_outlayers.lab.bench import benchlib

    x, w, b, t = problem(n, d, v, device)
    cands = contestants(device, eps, blocks, impl_blocks)
    ref = reference(x, w, b, t, eps)
    rows = []
    for c in cands:
        failed = None
        try:
            loss_err, grad_err = errors(c.step, x, w, b, t, eps, ref)  # also the warm-up
        except torch.cuda.OutOfMemoryError:
            loss_err = grad_err = None
            failed = "OOM"
        except Exception as e:  # noqa: BLE001  (a peer that fails here, say under another Triton, gets a row saying so)
            loss_err = grad_err = None
            failed = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:120].replace("|", "/")
            log(f"{c.name}: {failed}")
        rows.append({"name": c.name, "impl": c.impl, "block": c.block_elements, "loss_err": loss_err,
                     "grad_err": grad_err, "times": [], "peaks": [], "failed": failed,
                     "exact": loss_err is not None and loss_err <= LOSS_RTOL and grad_err <= GRAD_RTOL})
    del ref
    for r in range(rounds):
        order = list(range(len(cands)))
        order = order[r % len(order):] + order[:r % len(order)]
        for i in order:
            if rows[i]["loss_err"] is None:
                continue
            for a in (x, w, b):
                a.grad = None
            try:
                with benchlib.peak_memory(device) as mem:
                    benchlib.sync(device)
                    t0 = time.perf_counter()
                    cands[i].step(x, w, b, t, eps).backward()
                    benchlib.sync(device)
                    rows[i]["times"].append(time.perf_counter() - t0)
                rows[i]["peaks"].append(mem["bytes"])
            except torch.cuda.OutOfMemoryError:
                rows[i]["loss_err"], rows[i]["failed"] = None, "OOM"
            finally:
                if str(device).startswith("cuda"):
                    torch.cuda.empty_cache()
        log(f"N={n} d={d} V={v} eps={eps} round {r + 1}: " + ", ".join(
            f"{row['name']} {row['times'][-1]:.2f}s" for row in rows if row["times"]))
    base = rows[0]["times"]
    for row in rows:
        ok = row["loss_err"] is not None and row["times"]
        row["seconds"] = statistics.median(row["times"]) if ok else None
        row["ratio"] = (statistics.median(a / p for a, p in zip(row["times"], base))
                        if ok and len(base) == len(row["times"]) else None)
        row["peak"] = max(row["peaks"]) if ok else None
    return rows


def fastest_exact(rows: List[Dict]) -> Optional[Dict]:
    """The fastest row that the criterion can run (a ``--fused-impl``) and that is exact; None if none."""
    ok = [r for r in rows if r["impl"] and r["exact"] and r["seconds"] is not None]
    return min(ok, key=lambda r: r["seconds"]) if ok else None


def table(rows: List[Dict], tokens: int, size: str = "") -> str:
    """The rows as a Markdown table; ``size`` (e.g. "N = 2,048, d = 256, V = 50,000, eps = 0") heads its first
    column, so that a table copied without its section heading (a docs bench block) still names its size."""
    first = f"implementation, {size}" if size else "implementation"
    out = [f"| {first} | `--fused-impl` | ms / step | time × plain | peak MiB | memory × plain "
           "| loss error | gradient error | exact |",
           "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    plain = rows[0]
    for r in rows:
        impl = f"`{r['impl']}`" if r["impl"] else ""
        if r["seconds"] is None:
            out.append(f"| {r['name']} | {impl} | {r.get('failed') or 'OOM'} | | | | | | |")
            continue
        mem = f"{r['peak'] / plain['peak']:.2f}" if plain.get("peak") else ""
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        out.append(f"| {r['name']} | {impl} | {r['seconds'] * 1e3:,.0f} | {ratio} | "
                   f"{r['peak'] / 2 ** 20:,.0f} | {mem} | {r['loss_err']:.1e} | {r['grad_err']:.1e} | "
                   f"{'yes' if r['exact'] else 'no'} |")
    return "\n".join(out)


#: a section heading of the page: "## N = 2,048, d = 256, V = 50,000, eps = 0.1"
def heading(n: int, d: int, v: int, eps: float) -> str:
    return f"## N = {n:,}, d = {d}, V = {v:,}, eps = {eps:g}"
