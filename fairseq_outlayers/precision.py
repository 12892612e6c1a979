"""bf16 training on a GPU (or the CPU) with fairseq 0.12.

fairseq 0.12's ``options.parse_args_and_arch`` sets ``--tpu`` whenever ``--bf16`` (or ``--memory-efficient-bf16``)
is given, and its Trainer then asks torch_xla for a TPU. Its Trainer, optimizers (``FP16Optimizer`` and
``MemoryEfficientFP16Optimizer`` switch loss scaling off for bf16) and sample preparation otherwise handle bf16 on
any device. So when bf16 is asked for, ``--tpu`` was not, and torch_xla is not installed (no TPU can be meant),
the flag is taken back:

* ``outlayers-train`` does it on the parsed options, before fairseq builds its configuration, so single- and
  multi-GPU runs are ordinary CUDA runs (``keep_bf16_off_the_tpu``);
* plain ``fairseq-train --user-dir`` does it when the model is built (``release_bf16_from_tpu``), on the run's
  configuration that the task's configuration belongs to, before fairseq builds its Trainer. A multi-GPU
  ``fairseq-train`` decides how to start its workers from ``--tpu`` before any model is built: use
  ``outlayers-train`` there.
"""
import importlib.util
import logging
import sys
from typing import Optional, Sequence

logger = logging.getLogger(__name__)
NOTE = "bf16 without a TPU: fairseq's implied --tpu is switched off; training in bfloat16 on this device"


def _tpu_given(argv: Sequence[str]) -> bool:
    return any(a == "--tpu" or a.startswith("--tpu=") for a in argv)


def bf16_means_no_tpu(bf16, tpu, argv: Optional[Sequence[str]] = None) -> bool:
    """True when fairseq set ``tpu`` only because of bf16: bf16 asked for, ``--tpu`` not on the command line
    (``argv``, default ``sys.argv``) and torch_xla not installed."""
    argv = sys.argv[1:] if argv is None else argv
    return bool(bf16) and bool(tpu) and not _tpu_given(argv) and importlib.util.find_spec("torch_xla") is None


def keep_bf16_off_the_tpu(args, argv: Optional[Sequence[str]] = None) -> bool:
    """On the Namespace from ``options.parse_args_and_arch``: unset the ``tpu`` that bf16 implied."""
    if bf16_means_no_tpu(getattr(args, "bf16", False), getattr(args, "tpu", False), argv):
        args.tpu = False
        logger.info(NOTE)
        return True
    return False


def release_bf16_from_tpu(args, task, argv: Optional[Sequence[str]] = None) -> bool:
    """At a model's build under ``fairseq-train``: unset the ``tpu`` that bf16 implied in the run's configuration
    (the root of ``task.cfg``, the object fairseq's Trainer is given) and in the model's arguments ``args``. False
    when there is nothing to change or no run configuration to reach."""
    try:
        common = task.cfg._get_root()["common"]
        bf16, tpu = common["bf16"], common["tpu"]
    except Exception:  # a task built from a Namespace, or a configuration without these options
        return False
    if not bf16_means_no_tpu(bf16, tpu, argv):
        return False
    common["tpu"] = False
    if getattr(args, "tpu", False):
        args.tpu = False
    logger.info(NOTE)
    return True
