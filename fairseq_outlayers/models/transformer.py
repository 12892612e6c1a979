"""``outlayers_transformer``: fairseq's Transformer with pluggable embeddings and output layer.

fairseq builds the encoder and decoder as usual, through three class methods this model overrides: the input
embeddings come from ``--embeddings`` (fairseq's own for ``standard``), and the decoder is built with the output
layer chosen by ``--output-layer`` as its ``output_projection`` (so no default projection is ever allocated).
"""
import contextvars

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoderBase, TransformerModel
from fairseq.models.transformer.transformer_legacy import (
    base_architecture,
    transformer_iwslt_de_en,
    transformer_wmt_en_de,
    transformer_vaswani_wmt_en_de_big,
)

from fairseq_outlayers.errors import OutlayersConfigError

from .core import (
    OutputLayerModelMixin,
    add_core_args,
    build_core_embeddings,
    build_core_output_layer,
    check_core_args,
    core_defaults,
    finish_build,
    shares_all_embeddings,
)


# (args, task, prebuilt embeddings still to hand out) while OutlayersTransformerModel.build_model runs: fairseq's
# build_model passes only its TransformerConfig to build_embedding/build_decoder, which lacks the seams' options
_BUILDING = contextvars.ContextVar("outlayers_transformer_build", default=None)


@register_model("outlayers_transformer")
class OutlayersTransformerModel(OutputLayerModelMixin, TransformerModel):
    @classmethod
    def add_args(cls, parser):
        TransformerModel.add_args(parser)
        add_core_args(parser)

    @classmethod
    def build_model(cls, args, task):
        outlayers_transformer(args)
        emb_spec, out_spec = check_core_args(args, task)
        if getattr(args, "share_decoder_input_output_embed", False) and args.output_layer == "softmax":
            raise OutlayersConfigError(
                "--share-decoder-input-output-embed asks for tying but --output-layer is 'softmax' (untied); "
                "use --output-layer tied instead"
            )
        share_all = shares_all_embeddings(args)
        args.share_all_embeddings = share_all
        args.share_decoder_input_output_embed = False  # the output layer does the tying
        prebuilt = None
        if emb_spec.name != "standard":  # standard: fairseq's own build_embedding (supports --*-embed-path)
            encoder_embed, decoder_embed = build_core_embeddings(
                args, task, args.encoder_embed_dim, args.decoder_embed_dim, share_all, make_embedding=None
            )
            prebuilt = [encoder_embed] if share_all else [encoder_embed, decoder_embed]
        token = _BUILDING.set((args, task, prebuilt))
        try:
            model = super().build_model(args, task)
        finally:
            _BUILDING.reset(token)
        finish_build(model, args)
        return model

    @classmethod
    def build_embedding(cls, cfg, dictionary, embed_dim, path=None):
        _args, _task, prebuilt = _BUILDING.get()
        if prebuilt is None:
            return super().build_embedding(cfg, dictionary, embed_dim, path)
        return prebuilt.pop(0)  # fairseq asks for the encoder's first, then the decoder's

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        args, task, _ = _BUILDING.get()
        output_layer = build_core_output_layer(args, task, embed_tokens, cfg.decoder.output_dim)
        decoder = TransformerDecoderBase(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention,
                                         output_projection=output_layer)
        # fairseq's checkpoint upgrade would otherwise re-insert a tied 'output_projection.weight' key
        decoder.share_input_output_embed = False
        return decoder


def _preset(name, fairseq_arch):
    """Register ``name`` as fairseq's ``fairseq_arch`` settings plus the core's defaults."""

    @register_model_architecture("outlayers_transformer", name)
    def arch(args):
        fairseq_arch(args)
        core_defaults(args)

    return arch


outlayers_transformer = _preset("outlayers_transformer", base_architecture)
_preset("outlayers_transformer_iwslt_de_en", transformer_iwslt_de_en)
_preset("outlayers_transformer_wmt_en_de", transformer_wmt_en_de)
_preset("outlayers_transformer_wmt_en_de_big", transformer_vaswani_wmt_en_de_big)


@register_model_architecture("outlayers_transformer", "outlayers_transformer_small")
def outlayers_transformer_small(args):
    """3+3 layers, d = 256, 4 heads, FFN 1024: the size of the Multi30k demo and of fast CPU experiments."""
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
