#!/usr/bin/env python
"""Benchmark: continuous outputs (Kumar & Tsvetkov 2019) against the learned softmax, in one run.

Three measurements, each against the softmax baseline in the same run, reported as ratios:

1. **Output layer + loss**, forward and backward, on ``--tokens`` target positions of H-dimensional decoder
   features (the features require a gradient, as inside a model): the continuous layer (H -> m = 300, frozen
   V x m unit target table) with the package's ``vmf_nll`` criterion (its defaults, exact log C_m) and
   with its ``cosine`` criterion, against a learned V x H softmax with fairseq's ``cross_entropy`` criterion
   (float32 log-softmax, summed NLL). The criterions are the registered fairseq classes themselves, called on a
   stub model whose decoder output layer is the layer under test. Time (median) and peak memory of the step.
2. **Whole-model training speed** (target tokens/s) of an ``outlayers_transformer`` built by fairseq's own
   option parsing and ``task.build_model`` with ``--output-layer softmax --criterion cross_entropy`` against
   ``--output-layer continuous --criterion vmf_nll``, on synthetic batches with a word-level target dictionary
   of ``--model-vocab`` words: ``task.train_step`` (forward, loss, backward) + fairseq's Adam step.
0. **The vMF loss against the cosine loss** (in-process, no layer): one forward + backward of every ``vmf_nll``
   variant's per-token loss (``vmf_losses.py``, the criterion's defaults) on ``--tokens`` x m float32
   predictions, against ``cosine_loss``: the aten operations that torch's profiler counts (on CUDA also the
   kernels launched) and the median time, both as ratios to cosine; also the time on ``--dispatch-tokens`` rows
   (8), where dispatching the operations is the cost, as on a GPU that waits for its host. ``--compile-log-cm``
   adds the released loss with ``OUTLAYERS_COMPILE_LOG_CM=1`` (log C_m through torch.compile); ``--compile`` the
   released and reg1 losses as ``--vmf-compile`` runs them (one torch.compile graph).
3. **Decoding speed** (sentences/s) of the same two models with fairseq's ``SequenceGenerator`` built by
   ``task.build_generator`` and run by ``task.inference_step`` (the fairseq-generate path), beam 1 and 5. The
   models are untrained, so every hypothesis is forced to the same length (``min_len = max_len_b``): both models
   then run exactly the same number of decoder steps and the per-step cost is what is compared.

    python scripts/bench_continuous.py                     # the issue's sizes (about 20 minutes on 1 CPU thread)
    python scripts/bench_continuous.py --device cuda       # on a GPU

Peak memory (part 1) is measured in a fresh subprocess per measurement: on CPU the growth of the resident set
(``VmHWM``, reset through ``/proc/self/clear_refs``) during one forward+backward, on CUDA
``torch.cuda.max_memory_allocated``. A softmax whose step would not fit under ``--max-memory-gb`` is run in
token chunks with gradient accumulation (same FLOPs, same loss and gradients), and the results file says so
and gives the full-batch peak from the peak model checked on the sizes that were measured unchunked.

Load changes on a shared machine hit both sides: the methods alternate within every repetition (order reversed
every other repetition) and medians are reported. Results are printed and written as markdown to ``--output``
(default ``docs/benchmarks/continuous_output.md``).
"""
import argparse
import gc
import json
import os
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
from fairseq_outlayers.lab.bench import benchlib  # noqa: E402
from fairseq_outlayers.lab.bench.continuous_layer import layer_probe  # noqa: E402
from fairseq_outlayers.lab.bench.continuous_loss_timing import run_loss_benchmark  # noqa: E402
from fairseq_outlayers.lab.bench.continuous_models import (build_models, run_decode_benchmark,  # noqa: E402
                                                           run_model_benchmark, write_model_data)
from fairseq_outlayers.lab.bench.continuous_probes import run_layer_benchmark  # noqa: E402
from fairseq_outlayers.lab.bench.continuous_report import environment, render  # noqa: E402


def _loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[50000, 300000], help="vocabulary sizes (part 1)")
    parser.add_argument("--dims", type=int, nargs="+", default=[512, 1024], help="decoder dimensions H (part 1)")
    parser.add_argument("--tokens", type=int, default=4096, help="target tokens per step (part 1)")
    parser.add_argument("--continuous-dim", type=int, default=300, help="m, the target-vector dimension")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (fresh processes) per layer (part 1)")
    parser.add_argument("--reps-large", type=int, default=2, help="repetitions at V >= --large-vocab (part 1)")
    parser.add_argument("--large-vocab", type=int, default=200000, help="vocabulary size from which --reps-large "
                        "applies")
    parser.add_argument("--continuous-steps", type=int, default=11, help="steps per continuous-layer process "
                        "(the first is the memory-measured one)")
    parser.add_argument("--max-memory-gb", type=float, default=11.0, help="softmax processes larger than this "
                        "(GiB, estimated) run in token chunks")
    parser.add_argument("--model-arch", nargs="+", default=["outlayers_transformer_tiny", "outlayers_transformer_small"],
                        help="architectures (parts 2, 3)")
    parser.add_argument("--model-dropout", type=float, default=None, help="override the preset's dropout")
    parser.add_argument("--model-vocab", type=int, default=50000, help="dictionary size (parts 2, 3)")
    parser.add_argument("--train-sentences", type=int, default=64, help="sentences per training batch")
    parser.add_argument("--train-len", type=int, default=32, help="source and target length of training batches")
    parser.add_argument("--train-steps", type=int, default=6, help="timed training steps per model")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5], help="beam sizes (part 3)")
    parser.add_argument("--decode-sentences", type=int, default=32, help="sentences per decoding batch")
    parser.add_argument("--decode-len", type=int, default=24, help="source length = forced hypothesis length")
    parser.add_argument("--decode-reps", type=int, default=4, help="timed decoding batches per model and beam")
    parser.add_argument("--skip", choices=["loss", "layer", "model"], action="append", default=[],
                        help="leave out part 0 (loss), part 1 (layer) or parts 2+3 (model)")
    parser.add_argument("--loss-reps", type=int, default=30, help="timed steps per loss (part 0)")
    parser.add_argument("--compile-log-cm", action="store_true", help="part 0: also the released loss with "
                        "log C_m through torch.compile (OUTLAYERS_COMPILE_LOG_CM=1)")
    parser.add_argument("--compile", action="store_true", help="part 0: also the released and reg1 losses as "
                        "--vmf-compile runs them (one torch.compile graph)")
    parser.add_argument("--dispatch-tokens", type=int, default=8, help="part 0: the rows of the second timing, "
                        "where dispatching the operations is the cost")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: steadier on a "
                        "shared machine)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (every part; parts 2 and 3 in float32)")
    benchlib.add_output_args(parser, os.path.join(REPO, "docs", "benchmarks", "continuous_output.md"))
    parser.add_argument("--layer-probe", nargs=5, metavar=("METHOD", "V", "H", "CHUNKS", "STEPS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    benchlib.check_device(parser, args.device)

    if args.layer_probe:  # internal: one measurement in a fresh process
        method, vocab, dim, chunks, steps = args.layer_probe
        print(json.dumps(layer_probe(method, int(vocab), int(dim), args.tokens, args.continuous_dim, int(chunks),
                                     int(steps), args.device)))
        return 0

    benchlib.check_output(args.output, args.force)
    start, load0, env = time.time(), _loadavg(), environment()  # the commit measured is the one at the start
    layer_rows = train = decode = loss_rows = None
    if "loss" not in args.skip:
        loss_rows = run_loss_benchmark(args)
    if "layer" not in args.skip:
        layer_rows = run_layer_benchmark(args)
    if "model" not in args.skip:
        import logging
        logging.getLogger("fairseq_outlayers").setLevel(logging.WARNING)
        train, decode = {}, {}
        with tempfile.TemporaryDirectory() as tmp:
            write_model_data(tmp, args.model_vocab, args.continuous_dim)
            for arch in args.model_arch:
                built = build_models(args, tmp, arch)
                train[arch] = run_model_benchmark(args, built)
                decode[arch] = run_decode_benchmark(args, built)
                del built
                gc.collect()

    command = benchlib.command_line("bench_continuous.py", argv)
    text = render(args, command, env, layer_rows, train, decode, time.time() - start,
                  (load0, _loadavg()), loss_rows)
    benchlib.finish(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
