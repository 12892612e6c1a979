"""Named ``--arch`` presets: an architecture of ``transformer.py`` / ``lstm.py`` with a method's seam options fixed.

This is the one file that imports both the architectures and (through their registered names) the methods: a
method's registration file imports only the registry, the core and its own modules, so methods and
architectures do not depend on each other. ``models/__init__.py`` imports this file last, after the methods and
the models. A preset only fixes options (``core.register_method_preset``): an explicit option that contradicts
one is an error, ``defaults`` fill options left unset, and the method's own defaults stay in its file.
"""
from fairseq_outlayers.core.build import register_method_preset

from .lstm import outlayers_lstm, outlayers_lstm_luong_2x2, outlayers_lstm_vmf
from .transformer import (outlayers_transformer, outlayers_transformer_iwslt_de_en, outlayers_transformer_small,
                          outlayers_transformer_wmt_en_de)

_T, _L = "outlayers_transformer", "outlayers_lstm"  # the registered models the presets extend

#: (model, preset name, base architecture, doc, fixed seam options, defaults for options left unset), by method
#: file in alphabetical order (the order the methods were registered in before the presets moved here)
PRESETS = (
    # --output-layer continuous (continuous.py)
    (_L, "outlayers_lstm_vmf_continuous", outlayers_lstm_vmf,
     "The paper's LSTM (Table 7) with the continuous output layer; add --target-vectors FILE.",
     {"output_layer": "continuous"}, None),
    (_T, "outlayers_transformer_small_continuous", outlayers_transformer_small,
     "The small Transformer (3+3 layers, d = 256) with the continuous output layer; add --target-vectors FILE.",
     {"output_layer": "continuous"}, None),
    # --output-layer fixed (fixed.py)
    (_T, "outlayers_transformer_fixed", outlayers_transformer,
     "fairseq's base Transformer with the fixed random classifier.",
     {"output_layer": "fixed"}, None),
    (_T, "outlayers_transformer_small_fixed", outlayers_transformer_small,
     "The small Transformer (3+3 layers, d = 256) with the fixed random classifier.",
     {"output_layer": "fixed"}, None),
    (_L, "outlayers_lstm_fixed", outlayers_lstm,
     "Attentional LSTM (the paper's model family for Multi30k and IWSLT) with the fixed random classifier.",
     {"output_layer": "fixed"}, None),
    (_L, "outlayers_lstm_luong_2x2_fixed", outlayers_lstm_luong_2x2,
     "2x2-layer Luong LSTM with 512-d states and the fixed random classifier (paper section 3.3: d = 512).",
     {"output_layer": "fixed"}, None),
    # --output-layer joint (joint.py)
    (_T, "outlayers_transformer_joint", outlayers_transformer,
     "Transformer base (fairseq's defaults) with the joint output layer, d_j = 512.",
     {"output_layer": "joint"}, None),
    (_T, "outlayers_transformer_small_joint", outlayers_transformer_small,
     "3+3-layer d = 256 Transformer (`outlayers_transformer_small`) with the joint output layer, d_j = 512.",
     {"output_layer": "joint"}, None),
    (_T, "outlayers_transformer_iwslt_de_en_joint", outlayers_transformer_iwslt_de_en,
     "fairseq's IWSLT'14 de-en Transformer with the joint output layer, d_j = 512.",
     {"output_layer": "joint"}, None),
    (_T, "outlayers_transformer_wmt_en_de_joint", outlayers_transformer_wmt_en_de,
     "fairseq's WMT en-de Transformer base with the joint output layer, d_j = 512.",
     {"output_layer": "joint"}, None),
    (_L, "outlayers_lstm_luong_2x2_joint", outlayers_lstm_luong_2x2,
     "The paper's NMT-joint model: 2+2-layer LSTM, 512-d embeddings and states, joint layer with d_j = 512.",
     {"output_layer": "joint"}, None),
    # --embeddings shared-private (shared_private.py): the output layer defaults to decoder tying (the paper's
    # setting) and may be any layer that ties to the decoder embedding (e.g. joint)
    (_T, "outlayers_transformer_shared_private", outlayers_transformer,
     "Transformer base with shared-private embeddings and decoder weight tying (Liu et al. 2019, Sec. 3.1).",
     {"embeddings": "shared-private"}, {"output_layer": "tied"}),
    (_T, "outlayers_transformer_small_shared_private", outlayers_transformer_small,
     "The small (3+3 layers, d = 256) Transformer with shared-private embeddings and decoder weight tying.",
     {"embeddings": "shared-private"}, {"output_layer": "tied"}),
)

for _model, _name, _base, _doc, _choices, _defaults in PRESETS:
    register_method_preset(_model, _name, _base, _doc, defaults=_defaults, **_choices)
