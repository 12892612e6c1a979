"""Part 0 of scripts/bench_continuous.py: one forward + backward of every ``vmf_nll`` variant's per-token loss and
of ``cosine_loss`` (no output layer): the aten operations (and CUDA kernels) torch's profiler counts, and the median
time of each, the losses alternating."""
import os
import statistics
import time

import torch

from . import benchlib


def loss_variants(compile_log_cm=False, compiled=False):
    """(name, per-token loss function) for cosine and every vmf_nll variant at the criterion's defaults;
    ``compiled``: also the released and reg1 losses as ``--vmf-compile`` runs them."""
    from fairseq_outlayers.methods.continuous.criterions import VMFNLLConfig
    from fairseq_outlayers.methods.continuous import vmf_losses as vl

    cfg = VMFNLLConfig()
    lam, l1, l2 = cfg.vmf_released_lambda, cfg.vmf_lambda1, cfg.vmf_lambda2
    variants = [
        ("cosine", vl.cosine_loss),
        ("vmf released (default)", lambda e, t: vl.vmf_released_loss(e, t, lam)),
        ("vmf plain", lambda e, t: vl.vmf_nll_loss(e, t)),
        ("vmf reg1", lambda e, t: vl.vmf_nll_loss(e, t, l1, 1.0)),
        ("vmf reg2", lambda e, t: vl.vmf_nll_loss(e, t, 0.0, l2)),
        ("vmf reg1+reg2 (λ1 0.02)", lambda e, t: vl.vmf_nll_loss(e, t, 0.02, l2)),
        ("vmf released, --vmf-log-cm approx", lambda e, t: vl.vmf_released_loss(e, t, lam, approximate=True)),
    ]
    if compile_log_cm:
        def compiled(e, t):
            old = os.environ.get("OUTLAYERS_COMPILE_LOG_CM")
            os.environ["OUTLAYERS_COMPILE_LOG_CM"] = "1"
            try:
                return vl.vmf_released_loss(e, t, lam)
            finally:
                if old is None:
                    del os.environ["OUTLAYERS_COMPILE_LOG_CM"]
                else:
                    os.environ["OUTLAYERS_COMPILE_LOG_CM"] = old
        variants.append(("vmf released, log C_m compiled", compiled))
    if compiled:
        variants += [("vmf released, --vmf-compile", lambda e, t: vl.vmf_released_loss(e, t, lam, compiled=True)),
                     ("vmf reg1, --vmf-compile", lambda e, t: vl.vmf_nll_loss(e, t, l1, 1.0, compiled=True))]
    return variants


def count_loss_ops(loss_fn, e_hat, target):
    """(aten operations, CUDA kernels or None) of one forward + backward of ``loss_fn``, from torch's profiler
    (nested aten calls counted as it lists them; kernels: its CUDA kernel events)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = e_hat.device.type == "cuda"
    loss_fn(e_hat, target).sum().backward()  # lazy set-up is not counted
    e_hat.grad = None
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        loss_fn(e_hat, target).sum().backward()
        benchlib.sync(e_hat.device)
    events = prof.events()
    ops = sum(1 for ev in events if ev.name.startswith("aten::"))
    kernels = None
    if cuda:
        kernels = sum(1 for ev in events if str(getattr(ev, "device_type", "")).endswith("CUDA"))
    e_hat.grad = None
    return ops, kernels


def _inputs(tokens, m, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    e_hat = (torch.randn(tokens, m, generator=g) * 0.6).to(device).requires_grad_(True)
    target = torch.nn.functional.normalize(torch.randn(tokens, m, generator=g), dim=-1).to(device)
    return e_hat, target


def run_loss_benchmark(args, log=print):
    """Part 0: operations and median fwd+bwd time of each loss on the same (tokens, m) batch, alternating; and the
    median time on ``args.dispatch_tokens`` rows, where the time is that of dispatching the operations (the
    regime of a GPU that waits for its host)."""
    device = args.device
    e_hat, target = _inputs(args.tokens, args.continuous_dim, device)
    small = _inputs(args.dispatch_tokens, args.continuous_dim, device, seed=1)
    variants = loss_variants(args.compile_log_cm, getattr(args, "compile", False))
    rows = {}
    for name, fn in variants:
        ops, kernels = count_loss_ops(fn, e_hat, target)
        rows[name] = {"ops": ops, "kernels": kernels, "times": [], "small_times": []}
    for inputs, key, reps in (((e_hat, target), "times", args.loss_reps),
                              (small, "small_times", max(args.loss_reps, 200))):
        for rep in range(reps + 2):  # two warm-up repetitions
            for name, fn in (variants if rep % 2 == 0 else variants[::-1]):
                inputs[0].grad = None
                benchlib.sync(device)
                t0 = time.perf_counter()
                fn(*inputs).sum().backward()
                benchlib.sync(device)
                if rep >= 2:
                    rows[name][key].append(time.perf_counter() - t0)
    from fairseq_outlayers.methods.continuous.vmf_losses import COMPILED_ROWS

    if any(state["failed"] for state in COMPILED_ROWS.values()):  # the compiled rows then measured the eager loss
        rows = {(f"{n} (torch.compile failed: ran eagerly)" if "--vmf-compile" in n else n): r for n, r in rows.items()}
    for name, r in rows.items():
        r["time"], r["time_small"] = statistics.median(r["times"]), statistics.median(r["small_times"])
        log(f"loss {name:<36} {r['ops']:4d} aten ops" + (f" {r['kernels']:4d} kernels" if r["kernels"] else "")
            + f"  {r['time'] * 1e3:8.3f} ms; {r['time_small'] * 1e6:8.1f} us at {args.dispatch_tokens} tokens",
            flush=True)
    return rows
