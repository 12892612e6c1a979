"""``scripts/bench_decode.py --checkpoints``: decoding speed of trained models through ``fairseq-generate``, a new
process a run, as a user translates, and their BLEU.

Every run is the package's scoring command (``fairseq_outlayers.tools.evaluation.scoring.generate_command``: the
whole test split, ``--batch-size``, at most 1.2 x source length + 10 tokens, BPE removed) with ``--cpu`` and the
model's extra options (``--model-overrides`` for faiss search). Speed is fairseq's own "Translated N sentences
(T tokens) in S s", without start-up and model loading; the process's wall time is reported beside it. Each round
runs every model once at every beam, in an order rotated by one a round; ratios are to the softmax of the same
round and beam. BLEU: Moses detokenisation and sacreBLEU against the raw references, as every score of the package.
"""
import os
import re
import statistics
import subprocess
import time
from typing import Dict, List, Optional, Sequence

TRANSLATED = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s")


def parse_specs(specs: Sequence[str], what: str) -> Dict[str, str]:
    """``NAME=VALUE`` arguments as an ordered {name: value}; a repeated or malformed one is an error."""
    out = {}
    for spec in specs:
        name, eq, value = spec.partition("=")
        if not eq or not name.strip() or not value.strip():
            raise ValueError(f"{what} takes NAME=VALUE, got {spec!r}")
        if name in out:
            raise ValueError(f"{what}: {name!r} is given twice")
        out[name] = value
    return out


def read_translated(text: str):
    """(sentences, tokens, seconds) of fairseq-generate's "Translated ..." line."""
    found = TRANSLATED.search(text)
    if found is None:
        raise RuntimeError("fairseq-generate printed no 'Translated N sentences (T tokens) in S s' line")
    return int(found.group(1).replace(",", "")), int(found.group(2).replace(",", "")), float(found.group(3))


def run_generate(data: str, checkpoint: str, beam: int, batch_size: int, threads: int,
                 extra: Sequence[str] = (), split: str = "test") -> dict:
    """One fairseq-generate process: {sentences, tokens, seconds (fairseq's), wall (the process), hypotheses}."""
    from fairseq_outlayers.tools.evaluation.scoring import generate_command, hypotheses_from

    cmd = generate_command(data, checkpoint, beam, 1.0, batch_size, split) + ["--cpu", *extra]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"fairseq-generate failed on {checkpoint}: {proc.stderr.strip().splitlines()[-1:]}")
    sentences, tokens, seconds = read_translated(proc.stdout + proc.stderr)
    return dict(sentences=sentences, tokens=tokens, seconds=seconds, wall=wall,
                hypotheses=hypotheses_from(proc.stdout))


def bleu(hypotheses: List[str], references: List[str], lang: str, lowercase: bool) -> float:
    from fairseq_outlayers.tools.evaluation.scoring import bleu_metric, detokenise

    if len(hypotheses) != len(references):
        raise RuntimeError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    return bleu_metric(lowercase).corpus_score(detokenise(hypotheses, lang), [references]).score


def checkpoint_updates(path: str) -> Optional[int]:
    """The number of updates a fairseq checkpoint was trained for (None when it does not say)."""
    from fairseq_outlayers.core.checkpoint_safety import read

    state = read(path, mmap=True)
    return (state.get("optimizer_history") or [{}])[-1].get("num_updates")


def measure(models: Dict[str, str], extras: Dict[str, List[str]], args, log=print) -> dict:
    """{beam: {name: {"runs": [run dicts], "ratios": [per-round sentences/s ratios to "softmax"]}}}."""
    names = list(models)
    results = {b: {m: {"runs": []} for m in names} for b in args.beams}
    run_generate(args.data, models[names[0]], args.beams[0], args.generate_batch_size, args.threads,
                 extras.get(names[0], ()), args.split)  # untimed: the files and Python's modules into the page cache
    for r in range(args.generate_rounds):
        k = r % len(names)
        for beam in args.beams:
            for m in names[k:] + names[:k]:
                run = run_generate(args.data, models[m], beam, args.generate_batch_size, args.threads,
                                   extras.get(m, ()), args.split)
                run["load"] = os.getloadavg()[0]
                results[beam][m]["runs"].append(run)
            log(f"generate round {r + 1}, beam {beam}: " + ", ".join(
                f"{m} {_speed(results[beam][m]['runs'][-1]):.1f}" for m in names) + f" (load {run['load']:.1f})",
                flush=True)
    for beam in args.beams:
        base = [_speed(run) for run in results[beam]["softmax"]["runs"]]
        for m in names:
            results[beam][m]["ratios"] = [_speed(run) / b for run, b in zip(results[beam][m]["runs"], base)]
    return results


def _speed(run: dict) -> float:
    return run["sentences"] / run["seconds"]


def report(models: Dict[str, str], extras: Dict[str, List[str]], results: dict, args, references) -> List[str]:
    """The page's fairseq-generate section: speed table, then BLEU and output lengths."""
    beams, names = args.beams, list(models)
    n = results[beams[0]][names[0]]["runs"][0]["sentences"]
    loads = [run["load"] for b in beams for m in names for run in results[b][m]["runs"]]
    lines = [
        "## fairseq-generate on trained models", "",
        f"Each run is `fairseq-generate` in a new process, `--cpu`, {args.threads} thread(s), on all {n:,} "
        f"sentences of `{args.split}`, batches of {args.generate_batch_size}, BPE removed, at most 1.2 x source "
        f"length + 10 tokens (the package's scoring command). {args.generate_rounds} round(s) after one untimed run; each round "
        "runs every model once at every beam, in an order rotated by one a round.", "",
        "Sentences/s: fairseq's own \"Translated ... in S s\", without start-up and model loading (median). "
        "× softmax: the median of the per-round ratios to the softmax, with their range. Process: the median "
        f"wall time of the whole command, start-up and loading included. Load average (1 min) after the runs: "
        f"{min(loads):.1f} to {max(loads):.1f}, median {statistics.median(loads):.1f}.", "",
        "| method | " + " | ".join(f"beam {b}: sentences/s | × softmax | process s" for b in beams) + " |",
        "|---|" + "---:|---:|---:|" * len(beams),
    ]
    for m in names:
        cells = []
        for b in beams:
            res = results[b][m]
            ratios = res["ratios"]
            cells += [f"{statistics.median(_speed(r) for r in res['runs']):,.1f}",
                      f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})",
                      f"{statistics.median(r['wall'] for r in res['runs']):.1f}"]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += ["", "| method | checkpoint | updates | " + " | ".join(
        f"beam {b}: BLEU | tokens / sentence" for b in beams) + " |",
        "|---|---|---:|" + "---:|---:|" * len(beams)]
    for m in names:
        cells = []
        for b in beams:
            run = results[b][m]["runs"][0]
            cells += [f"{bleu(run['hypotheses'], references, args.target_lang, args.lowercase):.2f}",
                      f"{run['tokens'] / run['sentences']:.1f}"]
        extra = f" `{' '.join(extras[m])}`" if m in extras else ""
        updates = checkpoint_updates(models[m])
        lines.append(f"| {m} | `{_rel(models[m])}`{extra} | {updates if updates is not None else '?'} | "
                     + " | ".join(cells) + " |")
    return lines


def _rel(path: str) -> str:
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    full = os.path.abspath(path)
    return os.path.relpath(full, repo) if full.startswith(repo + os.sep) else path
