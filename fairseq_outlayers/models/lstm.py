"""``outlayers_lstm``: an attentional LSTM encoder-decoder (the papers' baselines) with pluggable seams.

Bidirectional LSTM encoder (fairseq's ``LSTMEncoder``), stacked LSTM decoder with input feeding and Luong global
attention (dot or general score), and a decoder output size (``--decoder-out-embed-dim``) independent of the
embedding size. The decoder's output layer is the one chosen with ``--output-layer``.
"""
import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.lstm import Embedding, LSTMDecoder, LSTMEncoder, LSTMModel, base_architecture as fairseq_lstm_base

from fairseq_outlayers.core.build import (OutputLayerModelMixin, build_core_embeddings, build_core_output_layer,
                                          finish_build, load_embedding_paths, shares_all_embeddings, start_build)
from fairseq_outlayers.core.registry import SEAM_DEFAULTS, add_core_args, fill_defaults, get_output_layer_spec
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.models.luong_attention import LuongAttention

#: the Luong attention score of ``--attention-type`` when none is given (Luong et al. 2015's "general")
ATTENTION_DEFAULT = "general"


class OutlayersLSTMEncoder(LSTMEncoder):
    """fairseq's LSTM encoder whose final states cover every decoder layer: when the decoder is deeper (the
    vMF paper's 1-layer encoder, 2-layer decoder), the extra decoder layers start from the last encoder layer's
    final state (fairseq's decoder would otherwise index past the encoder's layers)."""

    def __init__(self, *args, decoder_layers: int = 1, **kwargs):
        super().__init__(*args, **kwargs)
        self.decoder_layers = decoder_layers

    def forward(self, src_tokens, src_lengths, enforce_sorted: bool = True):
        outs, hiddens, cells, mask = super().forward(src_tokens, src_lengths, enforce_sorted)
        extra = self.decoder_layers - hiddens.size(0)
        if extra > 0:
            hiddens = torch.cat([hiddens, hiddens[-1:].expand(extra, -1, -1)], dim=0)
            cells = torch.cat([cells, cells[-1:].expand(extra, -1, -1)], dim=0)
        return outs, hiddens, cells, mask


class OutlayersLSTMDecoder(LSTMDecoder):
    """fairseq's LSTM decoder with Luong attention and an output layer from the core."""

    def __init__(self, dictionary, output_layer=None, attention_type=None, **kwargs):
        # share_input_output_embed=True keeps the parent from allocating an fc_out we would replace
        super().__init__(dictionary, attention=True, share_input_output_embed=True, **kwargs)
        self.attention = LuongAttention(self.hidden_size, self.encoder_output_units, self.hidden_size,
                                        score=attention_type or ATTENTION_DEFAULT)
        self.share_input_output_embed = False
        self.output_projection = output_layer

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, src_lengths=None,
                features_only: bool = False, **unused):
        x, attn_scores = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        return (x if features_only else self.output_layer(x)), attn_scores

    def output_layer(self, x):
        return self.output_projection(x)


@register_model("outlayers_lstm")
class OutlayersLSTMModel(OutputLayerModelMixin, LSTMModel):
    @classmethod
    def add_args(cls, parser):
        LSTMModel.add_args(parser)
        parser.add_argument("--attention-type", choices=LuongAttention.SCORES,
                            help=f"Luong attention score: dot or general (default: {ATTENTION_DEFAULT})")
        add_core_args(parser)

    @classmethod
    def build_model(cls, args, task):
        """The LSTM from the seams; fairseq's ``models.build_model`` has run the architecture function."""
        new_run = start_build(args, task)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        share_all = shares_all_embeddings(args)
        if share_all and args.encoder_embed_dim != args.decoder_embed_dim:
            raise OutlayersConfigError("sharing all embeddings needs --encoder-embed-dim equal to --decoder-embed-dim")

        def make_embedding(dictionary, dim):
            return Embedding(len(dictionary), dim, dictionary.pad())

        encoder_embed, decoder_embed = build_core_embeddings(
            args, task, args.encoder_embed_dim, args.decoder_embed_dim, share_all, make_embedding
        )
        load_embedding_paths(args, task, encoder_embed, decoder_embed)
        for embed, freeze in ((encoder_embed, args.encoder_freeze_embed), (decoder_embed, args.decoder_freeze_embed)):
            if freeze:
                embed.weight.requires_grad = False

        encoder = OutlayersLSTMEncoder(
            dictionary=src_dict, embed_dim=args.encoder_embed_dim, hidden_size=args.encoder_hidden_size,
            num_layers=args.encoder_layers, dropout_in=args.encoder_dropout_in,
            dropout_out=args.encoder_dropout_out, bidirectional=args.encoder_bidirectional,
            pretrained_embed=encoder_embed, max_source_positions=args.max_source_positions,
            decoder_layers=args.decoder_layers,
        )
        output_layer = build_core_output_layer(args, task, decoder_embed, args.decoder_out_embed_dim)
        decoder = OutlayersLSTMDecoder(
            dictionary=tgt_dict, output_layer=output_layer, attention_type=args.attention_type,
            embed_dim=args.decoder_embed_dim, hidden_size=args.decoder_hidden_size,
            out_embed_dim=args.decoder_out_embed_dim, num_layers=args.decoder_layers,
            dropout_in=args.decoder_dropout_in, dropout_out=args.decoder_dropout_out,
            encoder_output_units=encoder.output_units, pretrained_embed=decoder_embed,
            max_target_positions=args.max_target_positions,
        )
        model = cls(encoder, decoder)
        finish_build(model, args, new_run)
        return model

    def forward(self, src_tokens, src_lengths, prev_output_tokens, incremental_state=None,
                features_only: bool = False, **unused):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, incremental_state=incremental_state,
                            features_only=features_only)


@register_model_architecture("outlayers_lstm", "outlayers_lstm")
def outlayers_lstm(args):
    """Bidirectional 1+1-layer LSTM, 512 units, general attention; fairseq's LSTM defaults otherwise."""
    args.encoder_bidirectional = getattr(args, "encoder_bidirectional", True)
    args.attention_type = getattr(args, "attention_type", None) or ATTENTION_DEFAULT
    args.adaptive_softmax_cutoff = None  # the output layer seam replaces adaptive softmax
    args.max_source_positions = getattr(args, "max_source_positions", 1024)
    args.max_target_positions = getattr(args, "max_target_positions", 1024)
    fairseq_lstm_base(args)
    args.adaptive_softmax_cutoff = None
    fill_defaults(args)


@register_model_architecture("outlayers_lstm", "outlayers_lstm_luong_2x2")
def outlayers_lstm_luong_2x2(args):
    """Pappas et al. (2018) baseline: 2 LSTM layers on each side, 512-d embeddings and states, dropout 0.3."""
    args.dropout = getattr(args, "dropout", 0.3)
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 512)
    args.encoder_hidden_size = getattr(args, "encoder_hidden_size", 256)  # 2 x 256 = 512 output units
    args.encoder_layers = getattr(args, "encoder_layers", 2)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 512)
    args.decoder_hidden_size = getattr(args, "decoder_hidden_size", 512)
    args.decoder_out_embed_dim = getattr(args, "decoder_out_embed_dim", 512)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    outlayers_lstm(args)


@register_model_architecture("outlayers_lstm", "outlayers_lstm_vmf")
def outlayers_lstm_vmf(args):
    """Kumar & Tsvetkov (2019, Table 7): 1-layer bidirectional encoder, 2-layer decoder of 1024, 512-d
    input embeddings; a tied output layer reads the 1024-d state through a projection to 512."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 512)
    args.encoder_hidden_size = getattr(args, "encoder_hidden_size", 512)  # 2 x 512 = 1024 output units
    args.encoder_layers = getattr(args, "encoder_layers", 1)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 512)
    args.decoder_hidden_size = getattr(args, "decoder_hidden_size", 1024)
    args.decoder_out_embed_dim = _out_dim(args, 1024)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    outlayers_lstm(args)


def _out_dim(args, dim: int) -> int:
    """The decoder output size: ``dim`` unless given, or the embedding size for an output layer that multiplies
    the decoder output with the embedding matrix itself (a tied layer), reached from the LSTM state through
    fairseq's own extra projection (``LSTMDecoder.additional_fc``), as fairseq's tied LSTMs do."""
    if getattr(args, "decoder_out_embed_dim", None) is not None:
        return args.decoder_out_embed_dim
    spec = get_output_layer_spec(getattr(args, "output_layer", None) or SEAM_DEFAULTS["output_layer"])
    if spec.embedding_sized_input:
        return args.decoder_embed_dim
    return dim
