"""Steps a ledger row applies to its trained checkpoint before the test (the row file's ``# after:`` directive).

    # after: fit-output-bias --train-sentences 10000

A step row is evaluated on ``STEP(checkpoint_best.pt)`` instead of ``checkpoint_best.pt``; with ``# from: ROW`` it
takes ROW's options and ROW's trained checkpoints (``work/ROW.seedN/``), so the two records of a seed are the same
model before and after the step and their paired test is like for like. Steps:

* ``fit-output-bias [--train-sentences N] [--epochs 3] [--lr 0.05] [--max-tokens 4096]``: a per-word bias fitted on
  the frozen model from the first N training sentences (all by default), added to its output layer
  (``fairseq_outlayers.tools.output_bias``; docs/joint-output.md). Fitted on training data only (the validation NLL before
  and after is reported, not used), on the GPU its run was given (``gpus.torch_device``), else the CPU.
"""
import argparse
import shlex
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional


class _StepParser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)


def _fit_output_bias_parser() -> argparse.ArgumentParser:
    p = _StepParser(prog="fit-output-bias", add_help=False)
    p.add_argument("--train-sentences", type=int, default=None)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--max-tokens", type=int, default=4096)
    return p


def _check_fit_output_bias(args: argparse.Namespace):
    for name in ("train_sentences", "epochs", "max_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, not {value}")
    from fairseq_outlayers.value_checks import LEARNING_RATE

    LEARNING_RATE.check("--lr", args.lr, "give e.g. the default 0.05")  # inf or nan would fit an all-NaN bias


def _fit_output_bias(args: argparse.Namespace, checkpoint: str, out_checkpoint: str, data_bin: str,
                     device: Optional[str] = None) -> Dict:
    from fairseq_outlayers.tools.output_bias import default_device, fit_output_bias

    return fit_output_bias(checkpoint, out_checkpoint, data=data_bin, train_sentences=args.train_sentences,
                           epochs=args.epochs, lr=args.lr, max_tokens=args.max_tokens,
                           device=device or default_device())


@dataclass(frozen=True)
class Step:
    parser: Callable[[], argparse.ArgumentParser]
    check: Callable[[argparse.Namespace], None]  # ValueError naming what is wrong
    apply: Callable[..., Dict]  # (args, checkpoint, out_checkpoint, data_bin, device) -> figures


STEPS: Dict[str, Step] = {"fit-output-bias": Step(_fit_output_bias_parser, _check_fit_output_bias,
                                                   _fit_output_bias)}


def _parse(words: List[str]) -> argparse.Namespace:
    if not words:
        raise ValueError(f"name a step ({', '.join(STEPS)})")
    if words[0] not in STEPS:
        raise ValueError(f"unknown step '{words[0]}'; the steps are: {', '.join(STEPS)}")
    args = STEPS[words[0]].parser().parse_args(words[1:])
    STEPS[words[0]].check(args)
    return args


def parse_step(text: str) -> List[str]:
    """The step's words (name, then its options) from a directive's value; ValueError naming what is wrong."""
    words = shlex.split(text)
    _parse(words)
    return words


def apply_step(step: List[str], checkpoint: str, out_checkpoint: str, data_bin: str,
               device: Optional[str] = None) -> Dict:
    """Write ``out_checkpoint`` = the step applied to ``checkpoint`` on ``device`` (a torch device; None: the GPU
    when there is one, else the CPU); returns the step's figures."""
    return STEPS[step[0]].apply(_parse(step), checkpoint, out_checkpoint, data_bin, device)
