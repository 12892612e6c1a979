"""The Markdown tables of scripts/bench_continuous.py, one per part, with the verdicts on their targets."""
from . import benchlib
from .continuous_layer import LAYER_METHODS, MiB, softmax_peak_model

# the targets the verdicts check
TARGET_SPEEDUP = {50000: 100.0, 300000: 500.0}  # vmf_nll fwd+bwd, softmax time / continuous time
TARGET_MEMORY_300K = 0.05  # continuous peak / softmax peak at V = 300k
TARGET_TRAIN_SPEEDUP = 2.0  # whole-model training tokens/s, continuous / softmax
TARGET_LOSS_OPS = 2.0  # aten operations of a vMF variant's fwd+bwd / cosine_loss's
TARGET_LOSS_TIME = 1.5  # time of a vMF variant's fwd+bwd / cosine_loss's


def met(ok):
    return "**met**" if ok else "**not met**"


def _find(rows, method, vocab, dim):
    return next((r for r in rows if r["method"] == method and r["vocab"] == vocab and r["dim"] == dim), None)


def step_flops(method, tokens, vocab, dim, m=300):
    """FLOP of one fwd+bwd of part 1 (fairseq_outlayers/lab/bench/benchlib.py): 6 N H V softmax, 6 N H m continuous."""
    if method == "softmax":
        return benchlib.softmax_step_flops(tokens, dim, vocab)
    return benchlib.continuous_step_flops(tokens, dim, m)


def loss_tables(rows, tokens, m, device, dispatch_tokens=None):
    """Markdown lines of part 0, with the verdicts of the two targets."""
    cos = rows["cosine"]
    cuda = cos["kernels"] is not None
    small = dispatch_tokens is not None and "time_small" in cos
    lines = ["| loss | aten ops (fwd+bwd) | ratio to cosine |" + (" CUDA kernels | ratio to cosine |" if cuda else "")
             + f" fwd+bwd ms (median), {tokens} tokens | ratio to cosine |"
             + (f" fwd+bwd us, {dispatch_tokens} tokens | ratio to cosine |" if small else ""),
             "| --- | ---: | ---: |" + (" ---: | ---: |" if cuda else "") + " ---: | ---: |"
             + (" ---: | ---: |" if small else "")]
    for name, r in rows.items():
        kern = (f" {r['kernels']} | {benchlib.ratio(r['kernels'], cos['kernels']):.2f}x |" if cuda else "")
        tiny = (f" {r['time_small'] * 1e6:.0f} | {benchlib.ratio(r['time_small'], cos['time_small']):.2f}x |"
                if small else "")
        lines.append(f"| {name} | {r['ops']} | {benchlib.ratio(r['ops'], cos['ops']):.2f}x |{kern} "
                     f"{r['time'] * 1e3:.3f} | {benchlib.ratio(r['time'], cos['time']):.2f}x |{tiny}")
    vmf = [(n, r) for n, r in rows.items() if n != "cosine"]
    worst_ops = max(vmf, key=lambda x: x[1]["ops"])
    worst_time = max(vmf, key=lambda x: x[1]["time"])
    ops_x = benchlib.ratio(worst_ops[1]["ops"], cos["ops"])
    time_x = benchlib.ratio(worst_time[1]["time"], cos["time"])
    default = benchlib.ratio(rows["vmf released (default)"]["time"], cos["time"])
    lines += ["", f"Targets ({tokens} x {m}, float32, `{device}`):", "",
              f"- every vMF variant <= {TARGET_LOSS_OPS:g}x the cosine loss's aten operations: worst "
              f"{worst_ops[0]}, {ops_x:.2f}x -> {met(ops_x <= TARGET_LOSS_OPS)}.",
              f"- vMF fwd+bwd <= {TARGET_LOSS_TIME:g}x the cosine loss's time: released default {default:.2f}x; "
              f"worst {worst_time[0]}, {time_x:.2f}x -> {met(time_x <= TARGET_LOSS_TIME)}."]
    if small:
        tiny = {n: benchlib.ratio(r["time_small"], cos["time_small"]) for n, r in vmf}
        worst = max(tiny, key=tiny.get)
        compiled = [f"{n} {x:.2f}x" for n, x in tiny.items() if "--vmf-compile" in n]
        lines.append(f"- the same at {dispatch_tokens} tokens (dispatch-bound): released default "
                     f"{tiny['vmf released (default)']:.2f}x" + (f"; {'; '.join(compiled)}" if compiled else "")
                     + f"; worst {worst}, {tiny[worst]:.2f}x -> {met(tiny[worst] <= TARGET_LOSS_TIME)}.")
    return lines
def layer_tables(rows, vocabs, dims, tokens, m=300):
    """Markdown lines: per-layer measurements and the ratio table of part 1, with the targets' verdicts."""
    lines = ["| V | H | layer + loss | token chunks | forward ms | backward ms | fwd+bwd ms | steps timed "
             "| peak step MiB | peak step MiB, model | trained params | weights+frozen+Adam MiB | peak total MiB "
             "| achieved GFLOP/s |",
             "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for vocab in vocabs:
        for dim in dims:
            for method in LAYER_METHODS:
                r = _find(rows, method, vocab, dim)
                name = {"softmax": "softmax + cross_entropy", "vmf_nll": "continuous + vmf_nll",
                        "cosine": "continuous + cosine"}[method]
                if r is None or "error" in r:
                    why = "not run" if r is None else r["error"]
                    lines.append(f"| {vocab} | {dim} | {name} | | failed: {why} | | | | | | | | | |")
                    continue
                model = (f"{softmax_peak_model(tokens, vocab, dim, r['chunks']) / MiB:.1f}"
                         if method == "softmax" else "")
                kept = r["param_bytes"] + r["buffer_bytes"] + r["adam_state_bytes"]
                lines.append(f"| {vocab} | {dim} | {name} | {r['chunks']} | {r['fwd'] * 1e3:.1f} | "
                             f"{r['bwd'] * 1e3:.1f} | {r['total'] * 1e3:.1f} | {r['n_steps']} | "
                             f"{r['peak_step_bytes'] / MiB:.1f} | {model} | {r['trained_params']:,} | "
                             f"{kept / MiB:.1f} | {r['peak_total_bytes'] / MiB:.1f} | "
                             f"{benchlib.gflops(step_flops(method, tokens, vocab, dim, m) / r['total'])} |")
    lines += ["", "Ratios (time: softmax / continuous, above 1 = continuous faster; memory: continuous / softmax, "
              "below 1 = continuous smaller). Where the softmax ran in token chunks, \"full\" compares with the "
              "full-batch softmax peak from the peak model (3 x tokens x V x 4 bytes).", "",
              "| V | H | vmf_nll speed-up | cosine speed-up | vmf_nll peak step memory | vmf_nll peak total memory "
              "| cosine peak step memory | vmf_nll time / cosine time |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for vocab in vocabs:
        for dim in dims:
            s, v, c = (_find(rows, m, vocab, dim) for m in LAYER_METHODS)
            if any(r is None or "error" in r for r in (s, v, c)):
                lines.append(f"| {vocab} | {dim} | n/a | n/a | n/a | n/a | n/a | n/a |")
                continue
            step_mem = benchlib.ratio(v["peak_step_bytes"], s["peak_step_bytes"])
            total_mem = benchlib.ratio(v["peak_total_bytes"], s["peak_total_bytes"])
            cos_mem = benchlib.ratio(c["peak_step_bytes"], s["peak_step_bytes"])
            if s["chunks"] > 1:
                full = softmax_peak_model(tokens, vocab, dim, 1)
                full_total = s["param_bytes"] + s["adam_state_bytes"] + full
                step_txt = (f"{step_mem:.4f} (chunked); {benchlib.ratio(v['peak_step_bytes'], full):.4f} (full)")
                total_txt = (f"{total_mem:.4f} (chunked); "
                             f"{benchlib.ratio(v['peak_total_bytes'], full_total):.4f} (full)")
                cos_txt = f"{cos_mem:.4f} (chunked); {benchlib.ratio(c['peak_step_bytes'], full):.4f} (full)"
            else:
                step_txt, total_txt, cos_txt = f"{step_mem:.4f}", f"{total_mem:.4f}", f"{cos_mem:.4f}"
            lines.append(f"| {vocab} | {dim} | {benchlib.ratio(s['total'], v['total']):.1f}x | "
                         f"{benchlib.ratio(s['total'], c['total']):.1f}x | {step_txt} | {total_txt} | {cos_txt} | "
                         f"{benchlib.ratio(v['total'], c['total']):.2f}x |")
    return lines


def target_verdicts(rows, vocabs, dims):
    """Markdown bullet lines: each issue-6 target of part 1 and whether every measured H meets it."""
    lines = []
    for vocab, target in sorted(TARGET_SPEEDUP.items()):
        if vocab not in vocabs:
            continue
        got = []
        for dim in dims:
            s, v = _find(rows, "softmax", vocab, dim), _find(rows, "vmf_nll", vocab, dim)
            if s and v and "error" not in s and "error" not in v:
                got.append((dim, benchlib.ratio(s["total"], v["total"])))
        if got:
            txt = ", ".join(f"{x:.1f}x at H = {d}" for d, x in got)
            lines.append(f"- vmf_nll fwd+bwd speed-up >= {target:.0f}x at V = {vocab}: {txt} -> "
                         f"{met(all(x >= target for _, x in got))}")
    if 300000 in vocabs:
        got = []
        for dim in dims:
            s, v = _find(rows, "softmax", 300000, dim), _find(rows, "vmf_nll", 300000, dim)
            if s and v and "error" not in s and "error" not in v:
                got.append((dim, benchlib.ratio(v["peak_total_bytes"], s["peak_total_bytes"]),
                            benchlib.ratio(v["peak_step_bytes"], s["peak_step_bytes"])))
        if got:
            txt = ", ".join(f"{t:.4f} total / {st:.4f} step at H = {d}" for d, t, st in got)
            lines.append(f"- vmf_nll peak memory <= {TARGET_MEMORY_300K}x softmax at V = 300000 (against the "
                         f"softmax as measured, chunked where it had to be): {txt} -> "
                         f"{met(all(t <= TARGET_MEMORY_300K and st <= TARGET_MEMORY_300K for _, t, st in got))}")
    return lines


def model_tables(train, decode, args):
    """Markdown lines of parts 2 and 3: one row per (architecture, model), ratios to the softmax model."""
    lines = ["| arch | model | trained params | step ms (median) | target tokens/s | ratio continuous / softmax "
             "| achieved GFLOP/s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    verdicts = []
    for arch, t in train.items():
        s = t["softmax"]
        for name in ("softmax", "continuous"):
            r = t[name]
            achieved = benchlib.gflops(r["flops"] / r["step"]) if "flops" in r else ""
            lines.append(f"| {arch} | {name} | {r['params']:,} | {r['step'] * 1e3:.1f} | {r['tok_s']:.0f} | "
                         f"{benchlib.ratio(r['tok_s'], s['tok_s']):.2f} | {achieved} |")
        x = benchlib.ratio(t["continuous"]["tok_s"], s["tok_s"])
        verdicts.append(f"- {arch}: whole-model training tokens/s >= {TARGET_TRAIN_SPEEDUP:.0f}x softmax: "
                        f"{x:.2f}x -> {met(x >= TARGET_TRAIN_SPEEDUP)}")
    lines += ["", "Target:", ""] + verdicts + [""]
    if decode:
        lines += ["Decoding (part 3):", "",
                  "| arch | beam | model | batch seconds (median) | sentences/s | ratio continuous / softmax |",
                  "| --- | ---: | --- | ---: | ---: | ---: |"]
        for arch, by_beam in decode.items():
            for beam in sorted(by_beam):
                d = by_beam[beam]
                for name in ("softmax", "continuous"):
                    lines.append(f"| {arch} | {beam} | {name} | {d[name]['batch']:.3f} | {d[name]['sent_s']:.1f} | "
                                 f"{benchlib.ratio(d[name]['sent_s'], d['softmax']['sent_s']):.2f} |")
    return lines
