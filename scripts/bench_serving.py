"""Translation speed of a trained model through the package and through its exports, in one run.

    python scripts/bench_serving.py --data work/multi30k/data-bin/de-en \
        --model tiny=checkpoints/tied/checkpoint_best.pt \
        --source work/multi30k/bpe/test_2016_flickr.de --reference work/multi30k/raw/test_2016_flickr.en \
        --beam 5 --threads 1 --rounds 3 --output docs/benchmarks/serving_cpu.md

docs/serving.md's models are one per exportable layer, each a row of configs/serving/, trained the same way by
``bash scripts/demo.sh --updates 200 --seeds 1 --rows "configs/serving/*.args" --out work/serving`` (a
``--model ROW=work/serving/ROW.seed1/checkpoint_best.pt`` each; docs/benchmarks/serving_cpu.md has the command).

Each model is exported with ``outlayers-export`` (stock fairseq, CTranslate2 float32 and int8), then translated by
four systems, round after round in a rotating order: the package's ``fairseq-generate --user-dir``, stock
``fairseq-generate`` on the export (a new Python each, as a user runs them), and CTranslate2 float32 and int8 (in
this process). Times are each system's own translation time (fairseq's "Translated ... in Xs", CTranslate2's
``translate_batch``), without start-up or model loading. Every system's hypotheses go through the same BPE removal,
Moses detokenisation and sacreBLEU. Ratios are against the package's fairseq-generate of the same round.
"""
import argparse
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from fairseq_outlayers import USER_DIR
from fairseq_outlayers.errors import ExportRefused, OutlayersConfigError, one_line_errors
from fairseq_outlayers.lab.bench.benchlib import add_output_args, command_line, finish, stamp

SYSTEMS = ("package fairseq-generate", "stock fairseq-generate (export)", "CTranslate2 float32", "CTranslate2 int8")
GOAL_SPEEDUP, GOAL_BLEU = 3.0, 0.5
DEFAULTS = {"beam": 5, "batch_size": 64, "threads": 1, "rounds": 3}
#: the longest output, in tokens, of every system: fairseq-generate's own default (--max-len-a 0 --max-len-b 200)
#: for both, so that a model that repeats itself is cut at the same length by each system
MAX_LEN = 200
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
TRANSLATED = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s")


def unbpe(tokens: str) -> str:
    return (tokens + " ").replace("@@ ", "").strip()


def fairseq_generate(data, checkpoint, beam, batch, threads, results, user_dir=None):
    """(hypotheses in sentence order as BPE tokens, seconds) of fairseq-generate in a new process."""
    cmd = [os.path.join(os.path.dirname(sys.executable), "fairseq-generate"), data, "--path", checkpoint,
           "--gen-subset", "test", "--beam", str(beam), "--batch-size", str(batch), "--required-batch-size-multiple",
           "1", "--max-len-a", "0", "--max-len-b", str(MAX_LEN), "--num-workers", "0", "--cpu", "--results-path", results]
    if user_dir:
        cmd += ["--user-dir", user_dir]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"error: fairseq-generate failed: {proc.stderr.strip().splitlines()[-1:]}")
    with open(os.path.join(results, "generate-test.txt"), encoding="utf-8") as f:
        text = f.read()
    hyps = {}
    for line in text.splitlines():
        if line.startswith("H-"):
            key, _score, tokens = line.split("\t")
            hyps.setdefault(int(key[2:]), tokens)
    found = TRANSLATED.search(text + proc.stderr + proc.stdout)
    if found is None:
        raise SystemExit("error: fairseq-generate printed no 'Translated ... in Xs' line")
    return [hyps[i] for i in sorted(hyps)], float(found.group(3))


def ctranslate2_translate(directory, source, beam, batch, threads, compute_type):
    import ctranslate2

    translator = ctranslate2.Translator(directory, device="cpu", compute_type=compute_type, intra_threads=threads,
                                        inter_threads=1)
    started = time.perf_counter()
    results = translator.translate_batch(source, beam_size=beam, max_batch_size=batch, max_decoding_length=MAX_LEN)
    seconds = time.perf_counter() - started
    return [" ".join(r.hypotheses[0]) for r in results], seconds


def bleu(hyps, references, lang, lowercase):
    from fairseq_outlayers.tools.evaluation.scoring import bleu_metric, detokenise

    return bleu_metric(lowercase).corpus_score(detokenise([unbpe(h) for h in hyps], lang), [references]).score


def _get(obj, key):
    """``obj[key]`` or ``obj.key`` (a dict, an omegaconf config or an argparse Namespace), None when absent."""
    if obj is None:
        return None
    if isinstance(obj, dict) or hasattr(obj, "keys"):
        try:
            return obj.get(key)
        except Exception:  # an omegaconf node that cannot give it
            return None
    return getattr(obj, key, None)


def trained_as(state) -> str:
    """What a checkpoint is, from its own state: "outlayers_transformer_tiny, epoch 26, 3,276 updates, best
    validation loss 3.94, seed 1" (a fact the checkpoint does not hold is left out). The page's description of a
    model comes from here, never from memory."""
    cfg = _get(state, "cfg")
    args = _get(state, "args")
    model = _get(cfg, "model") or args
    arch = _get(model, "_name") if _get(model, "arch") is None else _get(model, "arch")
    seed = _get(_get(cfg, "common"), "seed") if cfg is not None else _get(args, "seed")
    extra = _get(state, "extra_state") or {}
    epoch = _get(_get(extra, "train_iterator"), "epoch")
    history = _get(state, "optimizer_history") or [{}]
    updates = _get(history[-1], "num_updates")
    best = _get(extra, "best")
    facts = [str(arch)] if arch else []
    facts += [f"epoch {epoch}"] if epoch is not None else []
    facts += [f"{updates:,} updates"] if updates is not None else []
    facts += [f"best validation loss {best:.2f}"] if isinstance(best, (int, float)) else []
    facts += [f"seed {seed}"] if seed is not None else []
    return ", ".join(facts) or "no training state in the checkpoint"


def checkpoint_facts(checkpoint: str) -> str:
    from fairseq_outlayers.core.checkpoint_safety import read  # the safe (weights-only) load

    return trained_as(read(checkpoint))


def exports(name, work):
    """The folders of a model's three exports: stock fairseq, CTranslate2 float32 and int8."""
    return tuple(os.path.join(work, name + suffix) for suffix in ("-fairseq", "-ct2", "-ct2-int8"))


def export_model(name, checkpoint, args, work):
    """Write the model's three exports: {index in SYSTEMS: why outlayers-export refused it} of those it refused
    (a model with an output bias has no stock fairseq export, CTranslate2 holds the bias). A model no export takes
    (continuous outputs, ...) is one line that names its --model."""
    from fairseq_outlayers.tools.export import export

    stock, f32, int8 = exports(name, work)
    refused = {}
    for system, (out, to, extra) in enumerate(((stock, "fairseq", {}), (f32, "ctranslate2", {}),
                                                (int8, "ctranslate2", {"quantization": "int8"})), start=1):
        try:
            export(checkpoint, out, to, data_dir=args.data, **extra)
        except ExportRefused as e:
            refused[system] = str(e)
        except OutlayersConfigError as e:
            raise OutlayersConfigError(f"--model {name}={checkpoint}: {e}") from None
    if len(refused) == len(SYSTEMS) - 1:
        raise OutlayersConfigError(f"--model {name}={checkpoint}: {refused[1]}; leave this model out of the benchmark "
                                   "(docs/serving.md lists the models that export)")
    return refused


def run_model(name, checkpoint, args, source, references, lowercase, work, refused=None):
    """A row per system of SYSTEMS: its median time, hypotheses' tokens and BLEU; a system whose export was refused
    (``refused``: {index: why}) is a row that says why."""
    refused = refused or {}
    stock, f32, int8 = exports(name, work)
    runners = [
        lambda r: fairseq_generate(args.data, checkpoint, args.beam, args.batch_size, args.threads,
                                   os.path.join(work, f"{name}-ours-{r}"), user_dir=USER_DIR),
        lambda r: fairseq_generate(args.data, os.path.join(stock, "model.pt"), args.beam, args.batch_size,
                                   args.threads, os.path.join(work, f"{name}-stock-{r}")),
        lambda r: ctranslate2_translate(f32, source, args.beam, args.batch_size, args.threads, "float32"),
        lambda r: ctranslate2_translate(int8, source, args.beam, args.batch_size, args.threads, "int8"),
    ]
    times = [[] for _ in SYSTEMS]
    hyps = [None] * len(SYSTEMS)
    for r in range(args.rounds):
        for k in range(len(SYSTEMS)):
            i = (k + r) % len(SYSTEMS)  # a rotating order: no system always runs first
            if i in refused:
                continue
            hyps[i], seconds = runners[i](r)
            times[i].append(seconds)
            print(f"{name} round {r + 1}: {SYSTEMS[i]} {seconds:.2f} s", flush=True)
    rows = []
    for i, system in enumerate(SYSTEMS):
        if i in refused:
            rows.append(dict(system=system, refused=refused[i]))
            continue
        seconds = statistics.median(times[i])
        tokens = sum(len(h.split()) for h in hyps[i])
        same = sum(a == b for a, b in zip(hyps[i], hyps[0]))
        rows.append(dict(system=system, seconds=seconds, sentences=len(hyps[i]), tokens=tokens,
                         bleu=bleu(hyps[i], references, args.target_lang, lowercase), same=same))
    return rows


def load_average() -> str:
    """The machine's 1, 5 and 15-minute load averages, "0.7 1.7 1.8"."""
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def report(models, args, started, load):
    """The page: ``models`` [(NAME, rows of run_model)], ``load`` the load averages (load_average()) at the start
    and at the end of the run."""
    lines = [
        "# Serving: the package's fairseq-generate against stock fairseq and CTranslate2 on the export", "",
        f"Command: `{command_line('bench_serving.py', args.argv)}`",
        stamp("cpu", started), "",
        f"Beam {args.beam}, batches of {args.batch_size} sentences, {args.threads} thread(s): OMP_NUM_THREADS for "
        "fairseq, intra_threads for CTranslate2.",
        f"Median of {args.rounds} rounds, in a rotating order. Load average (1, 5, 15 min) {load[0]} at the start, "
        f"{load[1]} at the end, on {os.cpu_count()} cores.",
        "Time is each system's own translation time, without start-up and model loading.",
        "Target tokens are BPE tokens of the hypotheses, counted the same way for every system.",
        "BLEU: BPE removed, Moses detokenisation, sacreBLEU against the raw references, for every system.",
        "",
        "| model | checkpoint | trained (from the checkpoint) |",
        "| --- | --- | --- |",
        *[f"| {name} | `{checkpoint}` | {facts} |" for name, checkpoint, facts in args.trained], "",
        "| model | system | sentences/s | target tokens/s | x package | sacreBLEU | same hypothesis as the package |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    verdicts = []
    for name, rows in models:
        base = rows[0]["tokens"] / rows[0]["seconds"]
        for row in rows:
            if "refused" in row:
                lines.append(f"| {name} | {row['system']} | - | - | - | - | export refused: "
                             f"{row['refused'].replace('|', '/')} |")
                continue
            speed = row["tokens"] / row["seconds"]
            lines.append(f"| {name} | {row['system']} | {row['sentences'] / row['seconds']:,.1f} | {speed:,.0f} | "
                         f"{speed / base:.2f} | {row['bleu']:.2f} | {row['same']:,} of {row['sentences']:,} |")
        int8 = rows[3]
        if "refused" in int8:
            verdicts.append(f"- {name}: no CTranslate2 int8 export (refused), so no verdict.")
            continue
        speedup = (int8["tokens"] / int8["seconds"]) / base
        delta = int8["bleu"] - rows[0]["bleu"]
        met = speedup >= GOAL_SPEEDUP and abs(delta) <= GOAL_BLEU
        verdicts.append(f"- {name}: CTranslate2 int8 is {speedup:.2f}x the package's target tokens/s, "
                        f"{delta:+.2f} BLEU: {'met' if met else 'not met'}.")
    lines += ["", f"Goal: CTranslate2 int8 at least {GOAL_SPEEDUP:g}x the package's target tokens/s, within "
              f"{GOAL_BLEU:g} BLEU.", *verdicts]
    return "\n".join(lines) + "\n"


def models_of(specs):
    """[(NAME, CHECKPOINT)] of the --model options, each checked: one line naming the --model and the fix."""
    models = []
    for spec in specs:
        name, equals, checkpoint = spec.partition("=")
        if not equals or not name or not checkpoint:
            example = (checkpoint if equals else spec) or "checkpoints/tied/checkpoint_best.pt"
            raise OutlayersConfigError(f"--model '{spec}' is not NAME=CHECKPOINT; name the model and its checkpoint, "
                                       f"e.g. --model {name if equals and name else 'tiny'}={example}")
        if not MODEL_NAME.match(name):
            raise OutlayersConfigError(f"--model '{spec}': the name '{name}' must be letters, digits, '.', '_' or "
                                       "'-' (it names the report's rows and the exports' folders)")
        if name in dict(models):
            raise OutlayersConfigError(f"--model '{spec}': the name '{name}' is given twice; give each model its "
                                       "own name")
        if not os.path.isfile(checkpoint):
            what = "is a directory" if os.path.isdir(checkpoint) else "does not exist"
            raise OutlayersConfigError(f"--model '{spec}': the checkpoint '{checkpoint}' {what}; give the path of "
                                       "a .pt file written by fairseq-train")
        models.append((name, checkpoint))
    return models


def check_args(args):
    """Every option, before any work: one line naming the option and the fix."""
    for option in ("rounds", "beam", "batch_size", "threads"):
        value = getattr(args, option)
        if value < 1:
            flag = "--" + option.replace("_", "-")
            raise OutlayersConfigError(f"{flag} {value}: must be a positive integer (e.g. {flag} "
                                       f"{DEFAULTS[option]})")
    if not os.path.isdir(args.data):
        what = "is not a directory" if os.path.exists(args.data) else "does not exist"
        raise OutlayersConfigError(f"--data '{args.data}' {what}; give the folder written by fairseq-preprocess "
                                   "(its test split is translated)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="the fairseq-preprocess directory (its test split)")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=CHECKPOINT",
                        help="a model to measure (repeat for several)")
    parser.add_argument("--source", required=True, help="the test split's source side as the model reads it (BPE)")
    parser.add_argument("--reference", required=True, help="the test split's raw references")
    parser.add_argument("--target-lang", default="en")
    parser.add_argument("--lowercase", action="store_true", help="score case-insensitively (lowercased data)")
    parser.add_argument("--beam", type=int, default=DEFAULTS["beam"])
    parser.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
    parser.add_argument("--threads", type=int, default=DEFAULTS["threads"])
    parser.add_argument("--rounds", type=int, default=DEFAULTS["rounds"])
    add_output_args(parser, os.path.join("docs", "benchmarks", "serving_cpu.md"))
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(format="%(message)s", level=logging.WARNING)  # as outlayers-export: its loading is quiet
    return run(args)


@one_line_errors
def run(args):
    from fairseq_outlayers.outfiles import check_output_path
    from fairseq_outlayers.tools.evaluation.scoring import subset_sentences
    from fairseq_outlayers.tools.rawtext import read_text

    check_args(args)
    checkpoints = models_of(args.model)
    for option, path in (("--source", args.source), ("--reference", args.reference)):
        if not os.path.isfile(path):
            what = "is a directory" if os.path.isdir(path) else "does not exist"
            raise OutlayersConfigError(f"{option} '{path}' {what}; give the test split's "
                                       f"{'source side (BPE)' if option == '--source' else 'raw references'}, one "
                                       "sentence per line")
    # the report never replaces what the run reads (--force included)
    check_output_path(args.output, args.force, [args.data, args.source, args.reference]
                      + [checkpoint for _, checkpoint in checkpoints], option="--output")
    source = [line.split() for line in read_text(args.source, "--source")]
    references = read_text(args.reference, "--reference")
    sentences = subset_sentences(args.data, "test")
    if sentences is None and not any(name.startswith("test.") for name in os.listdir(args.data)):
        raise OutlayersConfigError(f"--data '{args.data}' has no test split; give the folder fairseq-preprocess "
                                   "wrote with --testpref")
    if sentences is not None and len(source) != sentences:
        raise OutlayersConfigError(f"--source '{args.source}' has {len(source):,} lines but the test split of "
                                   f"--data '{args.data}' has {sentences:,} sentences; give the source side of that "
                                   "test split")
    if len(references) != len(source):
        raise OutlayersConfigError(f"--reference '{args.reference}' has {len(references):,} lines but the test set "
                                   f"has {len(source):,} sentences; give the references of the same test set, one "
                                   "line per sentence")
    args.trained = [(name, checkpoint, checkpoint_facts(checkpoint)) for name, checkpoint in checkpoints]
    started, load = time.time(), [load_average()]
    models = []
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as work:
        # every export before any timing: a model that no export takes stops the run early
        refused = {name: export_model(name, checkpoint, args, work) for name, checkpoint in checkpoints}
        for name, checkpoint in checkpoints:
            models.append((name, run_model(name, checkpoint, args, source, references, args.lowercase, work,
                                           refused[name])))
    load.append(load_average())
    finish(args.output, report(models, args, started, load))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
