"""Part 1 of scripts/bench_continuous.py across processes: each measurement in a fresh subprocess (``python -m
fairseq_outlayers.lab.bench.continuous_probes``), the medians over a method's probes, and the loop over (V, H) that
alternates the methods."""
import json
import statistics
import subprocess
import sys

from .continuous_layer import GiB, LAYER_METHODS, MiB, choose_chunks, layer_probe

def probe_in_subprocess(args, method, vocab, dim, chunks, steps):
    cmd = [sys.executable, "-m", __name__, method, str(vocab), str(dim), str(chunks), str(steps), str(args.tokens),
           str(args.continuous_dim), str(args.threads), args.device]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"method": method, "vocab": vocab, "dim": dim, "chunks": chunks,
                "error": (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarise_layer(probes, method, vocab, dim):
    """Median forward/backward/total seconds over every timed step of a method's probes (for the continuous
    layers the first, memory-measured step of each probe is left out: it is the first full-size step of a fresh
    process), the median peak, and the layer's memory."""
    mine = [p for p in probes if p["method"] == method and p["vocab"] == vocab and p["dim"] == dim]
    ok = [p for p in mine if "error" not in p]
    if not ok:
        return {"method": method, "vocab": vocab, "dim": dim, "error": mine[0]["error"] if mine else "not run"}
    steps = [t for p in ok for t in (p["times"][1:] if len(p["times"]) > 1 else p["times"])]
    first = ok[0]
    row = {k: first[k] for k in ("method", "vocab", "dim", "tokens", "chunks", "loss", "trained_params",
                                 "param_bytes", "buffer_bytes", "grad_bytes", "adam_state_bytes")}
    row.update({
        "fwd": statistics.median(t[0] for t in steps), "bwd": statistics.median(t[1] for t in steps),
        "total": statistics.median(t[0] + t[1] for t in steps), "n_steps": len(steps), "n_probes": len(ok),
        "peak_step_bytes": statistics.median(p["peak_step_bytes"] for p in ok),
    })
    # everything the layer needs at the step's peak: weights and frozen table, Adam state, the step's growth
    row["peak_total_bytes"] = row["param_bytes"] + row["buffer_bytes"] + row["adam_state_bytes"] + row[
        "peak_step_bytes"]
    return row


def run_layer_benchmark(args, log=print):
    """Part 1: alternate softmax / vmf_nll / cosine probes, one fresh process each, for every (V, H)."""
    rows = []
    avail = mem_available()
    max_bytes = args.max_memory_gb * GiB if avail is None else min(args.max_memory_gb * GiB, avail - 2 * GiB)
    for vocab in args.vocab:
        for dim in args.dims:
            chunks = choose_chunks(args.tokens, vocab, dim, max_bytes)
            reps = args.reps if vocab < args.large_vocab else args.reps_large
            probes = []
            for rep in range(reps):
                order = LAYER_METHODS if rep % 2 == 0 else LAYER_METHODS[::-1]
                for method in order:
                    soft = method == "softmax"
                    p = probe_in_subprocess(args, method, vocab, dim, chunks if soft else 1,
                                            1 if soft else args.continuous_steps)
                    probes.append(p)
                    if "error" in p:
                        log(f"V={vocab} H={dim} {method}: FAILED ({p['error']})")
                    else:
                        tot = [f + b for f, b in p["times"]]
                        log(f"V={vocab:>6} H={dim:>4} rep {rep + 1}/{reps} {method:<8} step {statistics.median(tot) * 1e3:9.1f} ms  "
                            f"peak {p['peak_step_bytes'] / MiB:9.1f} MiB" + (f"  ({chunks} chunks)" if soft and chunks > 1 else ""),
                            flush=True)
            for method in LAYER_METHODS:
                rows.append(summarise_layer(probes, method, vocab, dim))
    return rows


def mem_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def main(argv=None):
    """One measurement of ``continuous_layer.layer_probe`` in this process, printed as one JSON line:
    ``METHOD V H CHUNKS STEPS TOKENS M THREADS DEVICE``."""
    import torch

    method, vocab, dim, chunks, steps, tokens, m, threads, device = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(int(threads))
    print(json.dumps(layer_probe(method, int(vocab), int(dim), int(tokens), int(m), int(chunks), int(steps), device)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
