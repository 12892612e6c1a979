"""A toy output layer registered from outside the package: the scaled-cosine softmax.

``logits[v] = s * cos(h, w_v)`` with a learned |V| x d matrix ``W`` and a fixed scale ``s`` (``--toy-cosine-scale``,
kept as a buffer so the checkpoint carries it). It is the example of docs/architecture.md, "A layer registered
from outside the package": one file for the module and its registration, no file of ``fairseq_outlayers/``
edited.

Used as fairseq's user directory (fairseq takes one ``--user-dir``): importing this package imports
``fairseq_outlayers.models`` (which registers the models, architectures and criterions) and then registers the toy layer,
so ``--user-dir tests/toy_output_layer --arch outlayers_transformer --output-layer toy-cosine`` works with
``fairseq-train`` and ``fairseq-generate`` alike.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import fairseq_outlayers.models  # noqa: F401  (registers the package's models, before the toy joins their registry)
from fairseq_outlayers.core.registry import Option, register_output_layer
from fairseq_outlayers.core.output_layer import FactorisedSoftmaxOutput
from fairseq_outlayers.value_checks import Range

DEFAULT_SCALE = 10.0


class ScaledCosineOutput(FactorisedSoftmaxOutput):
    """``logits = s * normalize(h) @ normalize(W).T``: the rows of ``W`` and the features on the unit sphere."""

    def __init__(self, dictionary_size: int, input_dim: int, scale: float = DEFAULT_SCALE):
        super().__init__(dictionary_size, input_dim)
        self.weight = nn.Parameter(torch.empty(dictionary_size, input_dim))
        nn.init.normal_(self.weight, mean=0.0, std=input_dim ** -0.5)
        self.register_buffer("scale", torch.tensor(float(scale)), persistent=True)

    def context(self, features):
        return self.scale * F.normalize(features, dim=-1)

    def target_weights(self, ids=None):
        weight = self.weight if ids is None else self.weight.index_select(0, ids)
        return F.normalize(weight, dim=-1), None


@register_output_layer("toy-cosine", help="scaled-cosine softmax s * cos(h, w_v) (a toy, registered from tests/); "
                       "option --toy-cosine-scale",
                       options=[Option("--toy-cosine-scale", DEFAULT_SCALE, type=float, metavar="S",
                                       range=Range(0, low_open=True), help="scale s of the cosine logits, fixed",
                                       resume="shape")],  # a saved buffer: the checkpoint keeps its value
                       export="its logits divide h by its length, which no linear map does")
def build_toy_cosine(args, task, decoder_embed_tokens, input_dim):
    return ScaledCosineOutput(len(task.target_dictionary), input_dim, scale=args.toy_cosine_scale)
