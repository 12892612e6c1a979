"""Registration of ``--output-layer joint`` (Pappas et al. 2018); its ``--arch`` presets are in ``presets.py``.

The layer itself is ``fairseq_outlayers.methods.joint.joint_output.JointOutputLayer``; this file only wires the
command-line options to it. The core checks the values against the options' ranges and ``check_joint_args`` when
the options are parsed; the layer's constructor checks its arguments again (the core turns its ValueError into a
one-line error naming ``--output-layer joint``).
"""

from fairseq_outlayers.core.output_layer import folded_linear
from fairseq_outlayers.core.registry import Option, decoder_output_dim, register_output_layer
from fairseq_outlayers.errors import ExportRefused
from fairseq_outlayers.value_checks import FROZEN_BYTES, TRAINED_BYTES, Range, check_fits

from .joint_output import ACTIVATIONS, STRUCTURES, JointOutputLayer

#: the README's row of this method (``python -m fairseq_outlayers.lab.docs`` renders the table from it)
ABOUT = {"summary": "joint input-output embedding (+ `--criterion sampled_softmax`)",
         "paper": "Pappas et al. 2018", "page": "joint-output.md"}

#: the layer's options: flag, default (filled when left unset), help, allowed values
OPTIONS = (
    Option("--joint-dim", 512, type=int, metavar="N",
           range=Range(1, integer=True, why="the paper uses 512, 2048 or 4096"),
           help="size d_j of the joint input-output space (paper grid: 512, 2048, 4096)",
           resume="shape", effective=lambda a: a.joint_dim if a.joint_structure == "full" else None),
    Option("--joint-activation", "tanh", choices=ACTIVATIONS,
           help="non-linearity sigma of both joint projections",
           resume="free"),
    Option("--joint-structure", "full", choices=STRUCTURES,
           help="full: sigma(E U + b_u) sigma(V h + b_v) (eq. 15); output: sigma(E W) h (eq. 7a); context: E sigma(W "
           "h) (eq. 7b); bilinear: E W h (eq. 6); --joint-dim applies to full only",
           resume="shape"),
    Option("--joint-dropout", 0.0, type=float, metavar="P", range=Range(0, 1, high_open=True),
           help="dropout on the projected decoder state in the joint space",
           resume="free"),
    Option("--joint-no-word-bias", False, store_true=True,
           help="leave out the per-word bias b of eq. 14 (an ablation: the paper learns it; the tied baseline has "
           "none unless --output-bias)",
           resume="shape", effective=lambda a: bool(a.joint_no_word_bias)),
)


def check_joint_args(args, num_words=None):
    """--joint-dim against memory: the two trained projections U, V (weights, gradients, Adam's moments) and,
    once the vocabulary size is known, the |V| x d_j matrix sigma(E U + b_u) of every step (with its gradient)."""
    if getattr(args, "joint_structure", "full") != "full" or getattr(args, "joint_dim", None) is None:
        return
    per_unit = TRAINED_BYTES * (int(getattr(args, "decoder_embed_dim", None) or 0) + decoder_output_dim(args) + 2)
    what = "its projections U and V"
    if num_words:
        per_unit += 3 * FROZEN_BYTES * num_words
        what += f" and the {num_words:,d} x d_j output matrix of every step"
    check_fits("--joint-dim", args.joint_dim, per_unit, what, "use a smaller --joint-dim (the paper: 512, 2048 or "
               "4096)")


def export_joint(layer):
    """The output matrix sigma(E U + b_u) is fixed once trained; the context is affine only without its
    non-linearity (--joint-structure output or bilinear, or --joint-activation identity)."""
    if layer.ctx_proj is not None and layer.structure != "bilinear" and layer.activation != "identity":
        raise ExportRefused(f"its context sigma(V h + b_v) (--joint-structure {layer.structure}, --joint-activation "
                            f"{layer.activation}) is a non-linear layer that a stock decoder does not have")
    return folded_linear(layer)


@register_output_layer("joint", help="joint input-output embedding, sigma(E U + b_u) sigma(V h + b_v) + b "
                       "(Pappas et al. 2018; --joint-dim, --joint-activation, --joint-structure, --joint-dropout, "
                       "--joint-no-word-bias)",
                       options=OPTIONS, check_args=check_joint_args,
                       ties_decoder_embedding=True, export=export_joint)
def build_joint(args, task, decoder_embed_tokens, input_dim):
    return JointOutputLayer(decoder_embed_tokens, input_dim, joint_dim=args.joint_dim,
                            activation=args.joint_activation, structure=args.joint_structure,
                            dropout=args.joint_dropout, word_bias=not args.joint_no_word_bias)
