"""Registration of ``--output-layer fixed`` (Shalev et al. 2021).

The maths lives in ``fairseq_outlayers.methods.fixed.fixed_random``; this file wires the command-line options to it and
checks them (one-line errors that name the option and the fix). Its ``--arch`` presets are in ``presets.py``.
"""
import logging

from fairseq_outlayers.core.output_layer import folded_linear
from fairseq_outlayers.core.registry import Option, decoder_output_dim, register_output_layer
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.value_checks import FROZEN_BYTES, TRAINED_BYTES, Range, check_fits

from .fixed_random import INITS, FixedRandomOutput, is_power_of_two

logger = logging.getLogger(__name__)

#: the README's row of this method (``python -m fairseq_outlayers.lab.docs`` renders the table from it)
ABOUT = {"summary": "fixed random classifier, never trained",
         "paper": "Shalev et al. 2021", "page": "fixed-targets.md"}

#: the layer's options: flag, default (filled when left unset), help, allowed values
OPTIONS = (
    Option("--fixed-targets-init", "uniform", metavar="{" + ",".join(INITS) + "}",  # paper section 3.1
           help="how the fixed classifier is drawn: uniform in [-R, R] (the paper), gaussian with the same "
           "variance, or Hadamard rows (needs a power-of-two classifier dimension >= the target vocabulary size)",
           resume="table"),
    Option("--fixed-targets-range", 10.0, type=float, metavar="R",  # paper section 3.1: entries in [-10, 10]
           help="R > 0: uniform entries are drawn from [-R, R]; gaussian/hadamard entries get the same variance "
           "R^2/3; no effect on the normalised rows",
           range=Range(0, 1000, low_open=True, why="entries are drawn from [-R, R]; with "
                       "--fixed-targets-no-normalize larger ones overflow the logits"),
           resume="table", effective=lambda a: float(a.fixed_targets_range) if a.fixed_targets_no_normalize else None),
    Option("--fixed-targets-no-normalize", False, store_true=True,  # paper section 3.1: rows of unit L2 norm
           help="keep the drawn rows as they are instead of dividing each by its L2 norm (the paper normalises "
           "for translation)",
           resume="table", effective=lambda a: bool(a.fixed_targets_no_normalize)),
    Option("--fixed-targets-bias", 0.0, type=float, metavar="C",
           help="value of the fixed (never trained) per-word bias; a constant shifts every logit equally, so it "
           "does not change the probabilities",
           range=Range(-100, 100, why="a constant shifts every logit equally, so it never changes the "
                       "probabilities, and a large one leaves the float logits too coarse to learn"),
           resume="table", effective=lambda a: float(a.fixed_targets_bias)),
    Option("--fixed-targets-dim", None, type=int, metavar="D", range=Range(1, integer=True),
           help="dimension of the fixed target vectors; when it differs from the decoder output size a learned "
           "bias-free projection maps the decoder output to it",
           default_text="the decoder output size, no projection",
           resume="shape", effective=lambda a: _classifier_dim(a)),
    Option("--fixed-targets-seed", 1, type=int, metavar="N", range=Range(0, 2 ** 63 - 1, integer=True),
           help="seed of the fixed classifier's own random generator, independent of --seed, so runs can share "
           "one classifier",
           resume="table"),
    Option("--fixed-targets-learned-scale", False, store_true=True,  # not in the paper: Hoffer et al. (2018)
           help="multiply the logits by one learned scalar (initial 1; Hoffer et al. 2018), so that they are not "
           "bounded by the decoder state's norm; not in the paper",
           resume="shape", effective=lambda a: bool(a.fixed_targets_learned_scale)),
)


def _classifier_dim(args) -> int:
    return int(args.fixed_targets_dim or decoder_output_dim(args))


def check_fixed_args(args, num_words=None):
    """--fixed-targets-dim against memory: the learned projection (weights, gradients, Adam's moments) and, once
    the vocabulary size is known, the frozen |V| x D classifier. The core checks the options' ranges when they
    are parsed; --fixed-targets-init and --fixed-targets-range are checked again by ``FixedRandomOutput``, fairseq's
    tying flags and --output-bias by the core (``refuses_tying``, ``output_bias``)."""
    if getattr(args, "fixed_targets_dim", None) is None:
        return
    per_unit, what = TRAINED_BYTES * decoder_output_dim(args), "the learned projection to it"
    if num_words:
        per_unit += FROZEN_BYTES * num_words
        what += f" and the frozen {num_words:,d} x D classifier"
    check_fits("--fixed-targets-dim", args.fixed_targets_dim, per_unit, what, "use a smaller --fixed-targets-dim, "
               "or leave it out for the decoder output size")


def export_fixed(layer):
    """One matrix s W P (the frozen classifier, its projection and its scale folded); the fixed bias is the same
    for every word, so it changes no probability and is left out (a checkpoint whose bias differs keeps it)."""
    weight, bias = folded_linear(layer)
    if bias is not None and bool((bias == bias[0]).all()):
        bias = None
    return weight, bias


@register_output_layer("fixed", help="frozen random classifier, uniform [-10, 10] rows normalised to unit length, "
                       "fixed bias (Shalev et al. 2021); options --fixed-targets-*",
                       options=OPTIONS, check_args=check_fixed_args,
                       refuses_tying="keeps a frozen random classifier", export=export_fixed)
def build_fixed(args, task, decoder_embed_tokens, input_dim):
    num_words = len(task.target_dictionary)
    dim = input_dim if args.fixed_targets_dim is None else int(args.fixed_targets_dim)
    if args.fixed_targets_init == "hadamard" and not (is_power_of_two(dim) and num_words <= dim):
        suggestion = 1 << max(num_words - 1, 1).bit_length()
        raise OutlayersConfigError(
            f"--fixed-targets-init hadamard needs a power-of-two classifier dimension at least the target "
            f"vocabulary size ({num_words} words), got {dim}; set --fixed-targets-dim {suggestion}, or use "
            "--fixed-targets-init uniform"
        )
    layer = FixedRandomOutput(
        num_words, input_dim, target_dim=dim, init=args.fixed_targets_init,
        value_range=float(args.fixed_targets_range), normalize=not args.fixed_targets_no_normalize,
        bias_value=float(args.fixed_targets_bias), seed=int(args.fixed_targets_seed),
        learned_scale=bool(args.fixed_targets_learned_scale),
    )
    logger.info(layer.describe())
    return layer
