#!/usr/bin/env python
"""Benchmark: whole-model training speed and peak memory of every output layer, through the real fairseq-train.

    python scripts/bench_whole_model.py --device cuda      # base Transformer, V = 50k and 128k, fp16 and fp32,
                                                           # 8,192 and 32,768 tokens per update (one GPU)
    python scripts/bench_whole_model.py --device cpu       # the CPU table: tiny model, V = 50k, fp32, 2,048 tokens

One generated corpus per vocabulary size V (Zipf-distributed words ``w0 .. w{V-5}``, one dictionary for source and
target, binarised by fairseq-preprocess's ``main`` in this process with that dictionary, so every row sees the same batches). Each
method is one ``fairseq-train`` process (``fairseq_cli.train.cli_main``, the function behind the console script,
in a child process that reads the peak memory when it returns): ``--arch`` (default ``outlayers_transformer``,
the base Transformer), the method's ``--output-layer``/``--criterion``, ``--max-tokens``, ``--max-update``,
``--disable-validation --no-save --log-format json``. Speed = median of fairseq's own ``wps`` (target tokens per
second) over the logged intervals after ``--warmup-updates``. Peak memory = ``torch.cuda.max_memory_allocated``
(GPU) or the peak resident set (CPU) of the whole process.

The **bound** row is the same model and corpus with the cheapest possible output layer: the target words are
folded onto a 16-word target dictionary (same sentences, same lengths) and a softmax over those 16 words is
trained. Each method's tokens/s is given as a ratio to the softmax's, to the bound's, and as the share of the
possible gain it takes: (method - softmax) / (bound - softmax).

``--repeats N`` runs every method N times in rounds (each method once, then again): the table gives the median
tokens/s and, for x softmax, the median and range of the per-round ratios. A "Targets" list reads the table
against the package's speed goals: continuous (vmf_nll) at least 1.3x the softmax's tokens/s, joint d_j = d at
least 0.9x the tied layer's.

Results go to ``--output`` (markdown; refused if it exists unless ``--force``). A method that fails (e.g. out of
memory) gets a row saying so; the run goes on.
"""
import argparse
import datetime
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
from fairseq_outlayers import USER_DIR  # noqa: E402
from fairseq_outlayers.lab.bench import benchlib  # noqa: E402

GiB = 2.0 ** 30
BOUND_WORDS = 12  # target words of the bound (+ 4 specials = 16 entries)
CONTINUOUS_DIM = 300

#: method -> fairseq options ("{vec}": the target-vector file, "{pairing}": the pairing file, "{d}": the decoder's
#: embedding size). The fused-loss rows use --criterion fused_cross_entropy (label smoothing 0, as cross_entropy).
METHODS = {
    "softmax": ["--output-layer", "softmax", "--criterion", "cross_entropy"],
    "tied": ["--output-layer", "tied", "--criterion", "cross_entropy"],
    "joint d_j = d": ["--output-layer", "joint", "--joint-dim", "{d}", "--criterion", "cross_entropy"],
    "fixed": ["--output-layer", "fixed", "--criterion", "cross_entropy"],
    "softmax, 25 % sampled": ["--output-layer", "softmax", "--criterion", "sampled_softmax", "--sample-ratio", "0.25"],
    "softmax, fused loss": ["--output-layer", "softmax", "--criterion", "fused_cross_entropy"],
    "tied, fused loss": ["--output-layer", "tied", "--criterion", "fused_cross_entropy"],
    "joint d_j = d, fused loss": ["--output-layer", "joint", "--joint-dim", "{d}",
                                  "--criterion", "fused_cross_entropy"],
    "shared-private": ["--embeddings", "shared-private", "--pairing", "{pairing}", "--output-layer", "tied",
                       "--criterion", "cross_entropy"],
    "continuous, vmf_nll": ["--output-layer", "continuous", "--target-vectors", "{vec}", "--criterion", "vmf_nll"],
    "continuous, cosine": ["--output-layer", "continuous", "--target-vectors", "{vec}", "--criterion", "cosine"],
    "continuous, vmf_nll --vmf-compile": ["--output-layer", "continuous", "--target-vectors", "{vec}", "--criterion",
                                          "vmf_nll", "--vmf-compile"],
    "bound (16-word softmax)": ["--output-layer", "softmax", "--criterion", "cross_entropy"],
    # stock fairseq without --user-dir: --arch transformer at the preset's sizes ("{stock}"), the plugin's overhead
    "stock fairseq, softmax": ["{stock}", "--criterion", "cross_entropy"],
    "stock fairseq, tied": ["{stock}", "--share-decoder-input-output-embed", "--criterion", "cross_entropy"],
}
BOUND = "bound (16-word softmax)"
#: --precision -> fairseq-train options (bf16 on a CUDA GPU needs the package's fix of fairseq 0.12's --tpu)
PRECISIONS = {"fp32": [], "fp16": ["--fp16"], "bf16": ["--bf16"]}
#: (decoder embedding size) of the architectures this script names in its docs
ARCH_DIMS = {"outlayers_transformer": 512, "outlayers_transformer_small": 256, "outlayers_transformer_tiny": 128,
             "outlayers_transformer_wmt_en_de_big": 1024}


def _sizes(dim, ffn, heads, layers):
    return [o for side in ("encoder", "decoder") for o in (
        f"--{side}-embed-dim", str(dim), f"--{side}-ffn-embed-dim", str(ffn), f"--{side}-attention-heads",
        str(heads), f"--{side}-layers", str(layers))]


#: the stock fairseq model of each preset: --arch and the sizes that make it the same model
STOCK_ARCH = {"outlayers_transformer": ["transformer"],
              "outlayers_transformer_small": ["transformer"] + _sizes(256, 1024, 4, 3),
              "outlayers_transformer_tiny": ["transformer"] + _sizes(128, 512, 4, 2),
              "outlayers_transformer_wmt_en_de_big": ["transformer_vaswani_wmt_en_de_big"]}


# ------------------------------------------------------------------------------------------------------------
# the corpus
# ------------------------------------------------------------------------------------------------------------

def zipf_sentences(n_words, n_sentences, min_len, max_len, seed):
    """Sentences of word ids 0..n_words-1 drawn with p(rank r) ∝ 1/(r + 2.7) (a Zipf-like law), lengths uniform."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p = 1.0 / (np.arange(n_words) + 2.7)
    p /= p.sum()
    lengths = rng.integers(min_len, max_len + 1, size=n_sentences)
    ids = rng.choice(n_words, size=int(lengths.sum()), p=p)
    out, pos = [], 0
    for n in lengths:
        out.append(ids[pos:pos + n])
        pos += n
    return out


def write_corpus(directory, vocab, n_sentences, seed=1, min_len=10, max_len=40, workers=1, log=print):
    """Text and binarised data for vocabulary size ``vocab`` (dictionary entries incl. 4 specials) under
    ``directory``: ``bin`` (src/tgt, one dictionary), ``bin-bound`` (the target folded onto BOUND_WORDS words) and
    ``vectors.vec`` (CONTINUOUS_DIM-d random integer vectors, unit-normalised by the loader, for every word) and
    ``pairing.txt`` (shared-private: every word paired with itself, as one dictionary serves both sides).
    Returns (bin, bin-bound, {"vec": vectors, "pairing": pairing file})."""
    import numpy as np

    n_words = vocab - 4
    text = os.path.join(directory, "text")
    os.makedirs(text, exist_ok=True)
    words = [f"w{i}" for i in range(n_words)]
    with open(os.path.join(text, "dict.txt"), "w") as f:
        f.writelines(f"{w} {n_words + 100 - i}\n" for i, w in enumerate(words))
    with open(os.path.join(text, "dict.bound.txt"), "w") as f:
        f.writelines(f"w{i} {BOUND_WORDS + 100 - i}\n" for i in range(BOUND_WORDS))
    for split, n, s in (("train", n_sentences, seed), ("valid", 16, seed + 100)):
        src = zipf_sentences(n_words, n, min_len, max_len, s)
        tgt = zipf_sentences(n_words, n, min_len, max_len, s + 1)
        with open(os.path.join(text, f"{split}.src"), "w") as f:
            f.writelines(" ".join(words[i] for i in sent) + "\n" for sent in src)
        with open(os.path.join(text, f"{split}.tgt"), "w") as f:
            f.writelines(" ".join(words[i] for i in sent) + "\n" for sent in tgt)
        with open(os.path.join(text, f"{split}.bound"), "w") as f:
            f.writelines(" ".join(f"w{i % BOUND_WORDS}" for i in sent) + "\n" for sent in tgt)
    bins = {}
    for name, tgt_lang, tgt_dict in (("bin", "tgt", "dict.txt"), ("bin-bound", "bound", "dict.bound.txt")):
        out = os.path.join(directory, name)
        t0 = time.time()
        binarise(["--source-lang", "src", "--target-lang", tgt_lang,
                  "--trainpref", os.path.join(text, "train"), "--validpref", os.path.join(text, "valid"),
                  "--destdir", out, "--srcdict", os.path.join(text, "dict.txt"),
                  "--tgtdict", os.path.join(text, tgt_dict), "--workers", str(workers)])
        log(f"V={vocab}: {name} binarised in {time.time() - t0:.1f} s", flush=True)
        bins[name] = out
    vec = os.path.join(directory, "vectors.vec")
    rng = np.random.default_rng(seed + 7)
    with open(vec, "w") as f:
        f.write(f"{n_words} {CONTINUOUS_DIM}\n")
        for start in range(0, n_words, 4096):
            block = rng.integers(-99, 100, size=(min(4096, n_words - start), CONTINUOUS_DIM))
            block[block == 0] = 1
            f.writelines(f"{words[start + i]} " + " ".join(map(str, row)) + "\n"
                         for i, row in enumerate(block.tolist()))
    return bins["bin"], bins["bin-bound"], {"vec": vec, "pairing": write_identical_pairing(bins["bin"])}


def binarise(argv):
    """``fairseq-preprocess argv`` in this process: fairseq's own parser and ``main``, without a second start of
    Python, torch and fairseq. Its INFO lines are left out, and the log file it opens in the destination is closed.
    One worker once CUDA is initialised here (the table's device name does it), so that nothing forks this process."""
    import logging

    import torch
    from fairseq import options
    from fairseq_cli import preprocess

    args = options.get_preprocessing_parser().parse_args(argv)
    if torch.cuda.is_initialized():  # fairseq's worker pool forks this process: torch refuses CUDA in such a fork
        args.workers = 1
    logger, before = preprocess.logger, list(preprocess.logger.handlers)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        preprocess.main(args)
    finally:
        logger.setLevel(level)
        for handler in [h for h in logger.handlers if h not in before]:
            logger.removeHandler(handler)
            handler.close()


def write_identical_pairing(data):
    """The shared-private pairing file of a corpus whose source and target share one dictionary."""
    from fairseq.data import Dictionary

    from fairseq_outlayers.methods.shared_private.word_pairs.pairs import pair_identical, write_pairing

    path = os.path.join(data, "pairing.txt")
    src, tgt = (Dictionary.load(os.path.join(data, f"dict.{lang}.txt")) for lang in ("src", "tgt"))
    write_pairing(path, pair_identical(src, tgt), overwrite=True)
    return path


# ------------------------------------------------------------------------------------------------------------
# one fairseq-train run
# ------------------------------------------------------------------------------------------------------------

def train_command(args, data, method, precision, max_tokens, files, save_dir):
    """fairseq-train's options for one run; ``files``: {"vec": target vectors, "pairing": pairing file}."""
    d = ARCH_DIMS.get(args.arch, 512)
    opts = [o.replace("{vec}", files["vec"]).replace("{pairing}", files["pairing"]).replace("{d}", str(d))
            for o in METHODS[method]]
    tgt = "bound" if method == BOUND else "tgt"
    arch = ["--user-dir", USER_DIR, "--arch", args.arch]
    if "{stock}" in opts:
        if args.arch not in STOCK_ARCH:
            raise SystemExit(f"error: {method!r} has no stock fairseq model for --arch {args.arch} "
                             f"({', '.join(STOCK_ARCH)})")
        opts.remove("{stock}")
        arch = ["--arch"] + STOCK_ARCH[args.arch]
    cmd = [data, *arch, "--task", "translation", "-s", "src", "-t", tgt,
           "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "0.0005", "--lr-scheduler",
           "inverse_sqrt", "--warmup-updates", "4000", "--dropout", "0.1", "--max-tokens", str(max_tokens),
           "--max-update", str(args.updates + (1 if getattr(args, "profile", False) else 0)),
           "--disable-validation", "--no-save", "--save-dir", save_dir,
           "--log-format", "json", "--log-interval", str(args.log_interval), "--seed", "1",
           "--num-workers", "1", "--max-source-positions", "256", "--max-target-positions", "256"] + opts
    cmd += PRECISIONS[precision]
    if args.device == "cpu":
        cmd.append("--cpu")
    return cmd + list(args.extra)


def profile_update(update, result):
    """Profile fairseq's ``update``-th ``Trainer.train_step`` (one more than the timed ones) with torch's profiler,
    into ``result["profile"]``: the aten operations it dispatched and, on CUDA, the kernels (and memory copies) it
    ran and their summed device time. Patches the Trainer class of this benchmark's own child process only."""
    import torch
    from fairseq import trainer as fairseq_trainer

    original = fairseq_trainer.Trainer.train_step

    def train_step(self, samples, raise_oom=False):
        if self.get_num_updates() + 1 != update:
            return original(self, samples, raise_oom)
        from torch.profiler import ProfilerActivity, profile

        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        if cuda:
            torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
            out = original(self, samples, raise_oom)
            if cuda:
                torch.cuda.synchronize()
        events = prof.events()
        device = [ev for ev in events if str(getattr(ev, "device_type", "")).endswith("CUDA")]
        result["profile"] = {"update": update, "aten_ops": sum(1 for ev in events if ev.name.startswith("aten::")),
                             "kernels": len(device) if cuda else None,
                             "kernel_ms": sum(ev.time_range.elapsed_us() for ev in device) / 1e3 if cuda else None}
        return out

    fairseq_trainer.Trainer.train_step = train_step


def child_main(result_path, fairseq_args, profile=None):
    """Run fairseq-train's cli_main in this process; write the peak memory and the outcome to ``result_path``."""
    import torch

    sys.argv = ["fairseq-train"] + fairseq_args
    status = "ok"
    extra = {}
    try:
        import logging

        from fairseq_cli.train import cli_main

        import fairseq_outlayers.models  # noqa: F401  (fairseq skips a --user-dir already imported: register here)

        # fairseq-train's log format, which parse_log reads: its own basicConfig is a no-op when an import of
        # fairseq has already given the root logger a handler
        logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                            datefmt="%Y-%m-%d %H:%M:%S", level=os.environ.get("LOGLEVEL", "INFO").upper(),
                            stream=sys.stdout, force=True)

        if profile:
            profile_update(profile, extra)
        cli_main()
    except BaseException as err:  # noqa: BLE001  (recorded, then re-raised as an exit code)
        status = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]
    peak = {"max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peak["cuda_allocated"] = torch.cuda.max_memory_allocated()
        peak["cuda_reserved"] = torch.cuda.max_memory_reserved()
    with open(result_path, "w") as f:
        json.dump({"status": status, **peak, **extra}, f)
    return 0 if status == "ok" else 1


def parse_log(text, warmup, wpb=None, last=math.inf):
    """(median wps after ``warmup`` updates, its intervals, last trained params line, OOM seen) from a json log;
    intervals that end after update ``last`` (the profiled one) are left out; ``wpb``, a list, receives the
    intervals' target tokens per update."""
    wps, params, oom = [], None, False
    for line in text.splitlines():
        if "train_inner | {" in line:
            rec = json.loads(line.split("train_inner | ", 1)[1])
            if warmup < float(rec.get("num_updates", 0)) <= last:
                wps.append(float(rec["wps"]))
                if wpb is not None and "wpb" in rec:
                    wpb.append(float(rec["wpb"]))
        elif "num. trained:" in line or "num. model params:" in line:
            params = line.split("|")[-1].strip()
        if "OOM" in line or "out of memory" in line.lower():
            oom = True
    return (statistics.median(wps) if wps else float("nan")), wps, params, oom


def run_one(args, data, method, precision, max_tokens, files, log=print, profiled=True):
    """One fairseq-train run of ``method``: a row with its tokens/s, peak memory and (``profiled`` and
    ``args.profile``) the profiled update's counts."""
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result.json")
        profile = ["--profile-update", str(args.updates + 1)] if profiled and getattr(args, "profile", False) else []
        cmd = [sys.executable, os.path.abspath(__file__), "--child", result] + profile + ["--"] + train_command(
            args, data, method, precision, max_tokens, files, os.path.join(tmp, "ckpt"))
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if args.device == "cpu":
            env.setdefault("OMP_NUM_THREADS", str(args.threads))
        t0 = time.time()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.run_timeout)
            out, code = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as err:
            out = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
            code = "timeout"
        wall = time.time() - t0
        wpb = []
        tok_s, intervals, params, oom = parse_log(out, args.warmup_updates, wpb, last=args.updates)
        res = {"status": f"exit {code}"}
        if os.path.exists(result):
            with open(result) as f:
                res = json.load(f)
    row = {"method": method, "precision": precision, "max_tokens": max_tokens, "tok_s": tok_s,
           "n_intervals": len(intervals), "params": params, "wall": wall,
           "wpb": statistics.median(wpb) if wpb else float("nan"), **res}
    if res.get("status") != "ok" or not intervals:
        why = "out of memory" if oom else (res.get("status") if res.get("status") != "ok" else "no timed interval")
        row["error"] = why or f"exit {code}"
        tail = "\n".join(out.strip().splitlines()[-5:])
        log(f"  {method}: FAILED ({row['error']})\n{tail}", flush=True)
    else:
        peak = res.get("cuda_allocated", res.get("max_rss", 0))
        log(f"  {method:<26} {tok_s:10.0f} tok/s  peak {peak / GiB:6.2f} GiB  ({len(intervals)} intervals, "
            f"{wall:.0f} s)", flush=True)
    return row


# ------------------------------------------------------------------------------------------------------------
# the table
# ------------------------------------------------------------------------------------------------------------

def peak_bytes(row):
    return row.get("cuda_allocated", row.get("max_rss", float("nan")))


def profile_cells(row, cuda):
    """The profiled update's cells: aten ops, and on CUDA its kernels and the share of an update's time (target
    tokens per update / tokens per second) that the GPU spent in them."""
    prof = row.get("profile") or {}
    cells = [f"{prof['aten_ops']:,}" if prof.get("aten_ops") is not None else ""]
    if cuda:
        busy = ""
        if prof.get("kernel_ms") is not None and row.get("tok_s", 0) > 0 and math.isfinite(row.get("wpb", math.nan)):
            busy = fmt_pct(prof["kernel_ms"] / (1e3 * row["wpb"] / row["tok_s"]))
        cells += [f"{prof['kernels']:,}" if prof.get("kernels") is not None else "", busy]
    return cells


def merge_runs(runs):
    """One method's runs (one per round) as one row: the median tokens/s of those that trained, their largest peak
    memory, the profile of the run that has one; ``error`` when none trained, ``failed_runs`` when some did not."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return dict(runs[0])
    row = dict(ok[0], tok_s=statistics.median(r["tok_s"] for r in ok))
    key = "cuda_allocated" if "cuda_allocated" in ok[0] else "max_rss"
    if key in ok[0]:
        row[key] = max(r.get(key, 0) for r in ok)
    row["profile"] = next((r["profile"] for r in runs if r.get("profile")), None)
    row["failed_runs"] = len(runs) - len(ok)
    row["runs"] = len(runs)
    return row


def paired_ratios(runs, baseline_runs):
    """tokens/s of each run over the baseline's in the same round (rounds where both trained)."""
    base = {r.get("round", 0): r["tok_s"] for r in baseline_runs if "error" not in r}
    return [benchlib.ratio(r["tok_s"], base[r.get("round", 0)]) for r in runs
            if "error" not in r and r.get("round", 0) in base]


def ratio_cell(ratios):
    """The median of per-round ratios, with their range when there are several: ``1.21 (1.18-1.25)``."""
    if not ratios:
        return ""
    cell = fmt_ratio(statistics.median(ratios))
    return cell + (f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else "")


def grouped(rows):
    """{(V, precision, tokens per update): {method: [its runs]}} in the order the rows came."""
    groups = {}
    for r in rows:
        groups.setdefault((r["vocab"], r["precision"], r["max_tokens"]), {}).setdefault(r["method"], []).append(r)
    return groups


def table(rows, device):
    """Markdown lines: one row per (V, precision, tokens per update, method); several runs of a method (rounds)
    give the median tokens/s, and x softmax is the median of the per-round ratios with their range."""
    cuda = device.startswith("cuda")
    mem = "peak GPU memory GiB (allocated)" if cuda else "peak resident memory GiB"
    extra = ["aten ops / update"] + (["CUDA kernels / update", "GPU busy"] if cuda else [])
    lines = [f"| V | precision | tokens/update | method | tokens/s (median) | x softmax | x bound | share of the "
             f"possible gain | {mem} | x softmax memory | " + " | ".join(extra) + " |",
             "| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |" + " ---: |" * len(extra)]
    for (vocab, precision, max_tokens), methods in grouped(rows).items():
        by = {method: merge_runs(runs) for method, runs in methods.items()}
        soft, bound = by.get("softmax"), by.get(BOUND)
        ok = lambda r: r is not None and "error" not in r  # noqa: E731
        for method, r in by.items():
            if not ok(r):
                lines.append(f"| {vocab} | {precision} | {max_tokens} | {method} | failed: {r['error']} | | | | | |"
                             + " |" * len(extra))
                continue
            x_soft = ratio_cell(paired_ratios(methods[method], methods["softmax"])) if ok(soft) else ""
            x_bound = benchlib.ratio(r["tok_s"], bound["tok_s"]) if ok(bound) else float("nan")
            gain = (benchlib.ratio(r["tok_s"] - soft["tok_s"], bound["tok_s"] - soft["tok_s"])
                    if ok(soft) and ok(bound) else float("nan"))
            m_soft = benchlib.ratio(peak_bytes(r), peak_bytes(soft)) if ok(soft) else float("nan")
            failed = f" ({r['failed_runs']} of {r['runs']} runs failed)" if r.get("failed_runs") else ""
            lines.append(f"| {vocab} | {precision} | {max_tokens} | {method} | {r['tok_s']:,.0f}{failed} | "
                         f"{x_soft} | {fmt_ratio(x_bound)} | {fmt_pct(gain)} | {peak_bytes(r) / GiB:.2f} | "
                         f"{fmt_ratio(m_soft)} | " + " | ".join(profile_cells(r, cuda)) + " |")
    return lines


#: the targets the whole-model table is read against: (method, baseline, the smallest ratio of tokens/s that meets it)
TARGETS = (("continuous, vmf_nll", "softmax", 1.3), ("joint d_j = d", "tied", 0.9),
           ("tied", "stock fairseq, tied", 0.97), ("softmax", "stock fairseq, softmax", 0.97))


def target_lines(rows):
    """One bullet per target and (V, precision, tokens per update) where both rows trained: the median ratio and
    "met" / "not met", or "within the run-to-run range" when the rounds' ratios lie on both sides of it."""
    lines = []
    for (vocab, precision, max_tokens), methods in grouped(rows).items():
        for method, baseline, target in TARGETS:
            ratios = paired_ratios(methods.get(method, []), methods.get(baseline, []))
            if not ratios:
                continue
            if min(ratios) >= target:
                verdict = "met"
            elif max(ratios) < target:
                verdict = "not met"
            else:
                verdict = "within the run-to-run range"
            lines.append(f"- V = {vocab}, {precision}, {max_tokens} tokens/update: {method} at "
                         f"{ratio_cell(ratios)}x {baseline}'s tokens/s (target: at least {target:.2f}x): "
                         f"**{verdict}**.")
    return lines


def fmt_ratio(x):
    return f"{x:.2f}" if x is not None and math.isfinite(x) else ""


def fmt_pct(x):
    return "" if x is None or not math.isfinite(x) else f"{100 * x:.0f} %"


def environment(device):
    import torch

    env = {"torch": torch.__version__, "python": platform.python_version(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    env["commit"] = benchlib.git_commit(REPO)
    if device.startswith("cuda"):
        env["device"] = f"{torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}"
    else:
        env["device"] = f"CPU {benchlib.cpu_name()} ({os.cpu_count()} cores)"
    try:
        import fairseq

        env["fairseq"] = fairseq.__version__
    except ImportError:
        env["fairseq"] = "?"
    return env


def render(args, command, env, rows, elapsed, partial=False):
    lines = [
        "# Benchmark: whole-model training speed of every output layer (fairseq-train)",
        "",
    ] + (["**Partial:** the run was still going (or was stopped) when this was written.", ""] if partial else []) + [
        f"Command: `{command}`  ",
        f"Date: {env['date']}; git commit {env['commit']}; device {env['device']}; torch {env['torch']}; "
        f"fairseq {env['fairseq']}; Python {env['python']}; whole run {elapsed / 60:.1f} min.",
        "",
        f"`fairseq-train --arch {args.arch}` (dropout 0.1, Adam, inverse-sqrt schedule) on a generated corpus: "
        f"Zipf-distributed words, sentences of 10-40 words on both sides, one dictionary of V entries for source "
        f"and target, {args.sentences:,} training sentences. {args.updates} updates per run; tokens/s = the median "
        f"of fairseq's `wps` (target tokens per second) over the {args.log_interval}-update intervals after update "
        f"{args.warmup_updates}. Peak memory: the whole process's (GPU: `torch.cuda.max_memory_allocated`; CPU: "
        "peak resident set). Joint: d_j = the decoder's d. Continuous: m = 300 random unit target vectors. "
        f"The bound: the same model and batches with the target folded onto {BOUND_WORDS} words (a 16-entry "
        "softmax, the cheapest output layer). Share of the possible gain = (method - softmax) / (bound - "
        "softmax) in tokens/s.",
    ] + ([] if not getattr(args, "profile", False) else [
        "",
        f"The last columns come from one more update after the timed ones ({args.updates + 1}), run under torch's "
        "profiler: the aten operations it dispatched and, on a GPU, the kernels it ran. GPU busy = their summed "
        "time / the time of an update at the measured speed (target tokens per update / tokens per second). "
        "Far below 100 %, the GPU waits for the host that dispatches the operations.",
    ]) + [
        "",
    ]
    if getattr(args, "repeats", 1) > 1:
        lines += [f"Each method ran {args.repeats} times, in rounds (every method once, then again), so that a "
                  "drift of the machine's speed touches every method alike. tokens/s is the median of the runs; x "
                  "softmax is the median of the per-round ratios, with their range in brackets.", ""]
    lines += table(rows, args.device)
    targets = target_lines(rows)
    if targets:
        lines += ["", "## Targets", ""] + targets
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        if argv[2] == "--profile-update":
            return child_main(argv[1], argv[5:], int(argv[3]))
        return child_main(argv[1], argv[3:])
    cuda = "--device" in argv and argv[argv.index("--device") + 1].startswith("cuda")
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda (one GPU: fairseq-train uses every visible GPU, "
                        "so set CUDA_VISIBLE_DEVICES)")
    parser.add_argument("--vocab", type=int, nargs="+", default=[50000, 128000] if cuda else [50000])
    parser.add_argument("--arch", default="outlayers_transformer" if cuda else "outlayers_transformer_tiny")
    parser.add_argument("--precision", nargs="+", choices=list(PRECISIONS),
                        default=["fp16", "fp32"] if cuda else ["fp32"])
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[8192, 32768] if cuda else [2048],
                        help="tokens per update (fairseq --max-tokens, one GPU, no --update-freq)")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS), metavar="METHOD",
                        help="default: all of " + ", ".join(METHODS))
    parser.add_argument("--updates", type=int, default=40 if cuda else 8)
    parser.add_argument("--warmup-updates", type=int, default=10 if cuda else 2)
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of every method, in rounds (every method once, then again); the table gives "
                        "median tokens/s and the range of the per-round ratios to the softmax. Only the first round "
                        "is profiled")
    parser.add_argument("--log-interval", type=int, default=5 if cuda else 2)
    parser.add_argument("--sentences", type=int, default=None,
                        help="training sentences (default: enough for the largest --max-tokens x --updates)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (OMP_NUM_THREADS) of each run on the CPU")
    parser.add_argument("--no-profile", dest="profile", action="store_false",
                        help="leave out the profiled update after the timed ones (its columns: aten ops, kernels and "
                        "GPU busy time per update)")
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1), help="fairseq-preprocess workers")
    parser.add_argument("--run-timeout", type=float, default=900, help="seconds before one run is stopped")
    parser.add_argument("--work-dir", default=None, help="where the corpora go (default: a temporary directory)")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="further fairseq-train options")
    benchlib.add_output_args(parser, os.path.join(REPO, "docs", "benchmarks",
                                                  "whole_model_cuda.md" if cuda else "whole_model_cpu.md"))
    args = parser.parse_args(argv)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda asked for, but torch sees no CUDA device")
    elif "fp16" in args.precision:
        parser.error("--precision fp16 needs --device cuda (fairseq's fp16 runs on CUDA only)")
    if args.warmup_updates >= args.updates:
        parser.error("--warmup-updates must be below --updates")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    benchlib.check_output(args.output, args.force)
    sentences = args.sentences or int(1.2 * max(args.max_tokens) * args.updates / 25) + 64
    args.sentences = sentences
    start, env = time.time(), environment(args.device)
    command = benchlib.command_line("bench_whole_model.py", argv)
    rows = []
    work = args.work_dir or tempfile.mkdtemp(prefix="bench_whole_model.")
    try:
        for vocab in args.vocab:
            directory = os.path.join(work, f"v{vocab}")
            os.makedirs(directory, exist_ok=True)
            data, bound, files = write_corpus(directory, vocab, sentences, workers=args.workers)
            for precision in args.precision:
                for max_tokens in args.max_tokens:
                    for round_ in range(args.repeats):
                        print(f"V={vocab} {precision} {max_tokens} tokens/update"
                              + (f", round {round_ + 1} of {args.repeats}" if args.repeats > 1 else ""), flush=True)
                        for method in args.methods:
                            row = run_one(args, bound if method == BOUND else data, method, precision, max_tokens,
                                          files, profiled=round_ == 0)
                            row.update(vocab=vocab, round=round_)
                            rows.append(row)
                            # rewritten after every run: a run stopped by a time limit leaves what it measured
                            benchlib.write_output(args.output, render(args, command, env, rows,
                                                                      time.time() - start, partial=True))
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    benchlib.finish(args.output, render(args, command, env, rows, time.time() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
