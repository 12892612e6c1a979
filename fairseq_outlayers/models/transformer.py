"""``outlayers_transformer``: fairseq's Transformer with pluggable embeddings and output layer.

``build_model`` builds what fairseq's Transformer builds, in the same order, with the seams' options passed as
arguments: the input embeddings come from ``--embeddings`` (fairseq's own for ``standard``), and the decoder is
built with the output layer chosen by ``--output-layer`` as its ``output_projection`` (so no default projection
is ever allocated).
"""
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoderBase, TransformerModel
from fairseq.models.transformer.transformer_legacy import (
    base_architecture,
    transformer_iwslt_de_en,
    transformer_wmt_en_de,
    transformer_vaswani_wmt_en_de_big,
)

from fairseq_outlayers.core import fairseq_compat
from fairseq_outlayers.core.build import (OutputLayerModelMixin, build_core_embeddings, build_core_output_layer,
                                          finish_build, load_embedding_paths, shares_all_embeddings, start_build)
from fairseq_outlayers.core.registry import add_core_args, fill_defaults


@register_model("outlayers_transformer")
class OutlayersTransformerModel(OutputLayerModelMixin, TransformerModel):
    @classmethod
    def add_args(cls, parser):
        TransformerModel.add_args(parser)
        add_core_args(parser)

    @classmethod
    def build_model(cls, args, task):
        """fairseq's Transformer ``build_model`` written out, so that the seams' options reach the embeddings and
        the output layer as arguments (fairseq's builders receive only its ``TransformerConfig``). The order of
        construction, hence the random initialisation, is fairseq's: embeddings, encoder, decoder. fairseq's
        ``models.build_model`` has run the architecture function."""
        new_run = start_build(args, task)
        share_all = shares_all_embeddings(args)
        args.share_all_embeddings = share_all
        args.share_decoder_input_output_embed = False  # the output layer does the tying
        cfg = fairseq_compat.transformer_config(args, task)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary

        def make_embedding(dictionary, dim):  # fairseq's own embeddings; --*-embed-path is loaded below
            return cls.build_embedding(cfg, dictionary, dim)

        encoder_embed, decoder_embed = build_core_embeddings(
            args, task, cfg.encoder.embed_dim, cfg.decoder.embed_dim, share_all, make_embedding)
        load_embedding_paths(args, task, encoder_embed, None if share_all else decoder_embed)
        encoder = cls.build_encoder(cfg, src_dict, encoder_embed)
        output_layer = build_core_output_layer(args, task, decoder_embed, cfg.decoder.output_dim)
        decoder = TransformerDecoderBase(cfg, tgt_dict, decoder_embed, no_encoder_attn=cfg.no_cross_attention,
                                         output_projection=output_layer)
        fairseq_compat.keep_tied_key_out(decoder)
        model = cls(cfg, encoder, decoder)
        finish_build(model, args, new_run)
        return model


def _preset(name, fairseq_arch):
    """Register ``name`` as fairseq's ``fairseq_arch`` settings plus the core's defaults."""

    @register_model_architecture("outlayers_transformer", name)
    def arch(args):
        fairseq_arch(args)
        fill_defaults(args)

    return arch


outlayers_transformer = _preset("outlayers_transformer", base_architecture)
outlayers_transformer_iwslt_de_en = _preset("outlayers_transformer_iwslt_de_en", transformer_iwslt_de_en)
outlayers_transformer_wmt_en_de = _preset("outlayers_transformer_wmt_en_de", transformer_wmt_en_de)
outlayers_transformer_wmt_en_de_big = _preset("outlayers_transformer_wmt_en_de_big", transformer_vaswani_wmt_en_de_big)


@register_model_architecture("outlayers_transformer", "outlayers_transformer_small")
def outlayers_transformer_small(args):
    """3+3 layers, d = 256, 4 heads, FFN 1024: the Multi30k hydra configs and the ledger's small-Transformer
    table (`make demo` trains `outlayers_transformer_tiny`)."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 256)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 1024)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.encoder_layers = getattr(args, "encoder_layers", 3)
    args.decoder_embed_dim = getattr(args, "decoder_embed_dim", 256)
    args.decoder_ffn_embed_dim = getattr(args, "decoder_ffn_embed_dim", 1024)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    args.decoder_layers = getattr(args, "decoder_layers", 3)
    args.dropout = getattr(args, "dropout", 0.3)
    outlayers_transformer(args)


@register_model_architecture("outlayers_transformer", "outlayers_transformer_tiny")
def outlayers_transformer_tiny(args):
    """2+2 layers, d = 128, 4 heads, FFN 512: the `make demo` model, sized to train every output layer on
    Multi30k within minutes on two CPU cores."""
    for side in ("encoder", "decoder"):
        setattr(args, f"{side}_embed_dim", getattr(args, f"{side}_embed_dim", 128))
        setattr(args, f"{side}_ffn_embed_dim", getattr(args, f"{side}_ffn_embed_dim", 512))
        setattr(args, f"{side}_attention_heads", getattr(args, f"{side}_attention_heads", 4))
        setattr(args, f"{side}_layers", getattr(args, f"{side}_layers", 2))
    args.dropout = getattr(args, "dropout", 0.1)
    outlayers_transformer(args)
