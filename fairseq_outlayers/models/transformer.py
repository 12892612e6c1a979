"""``outlayers_transformer``: fairseq's Transformer with pluggable embeddings and output layer.

``build_model`` builds what fairseq's Transformer builds, in the same order, with the seams' options passed as
arguments: the input embeddings come from ``--embeddings`` (fairseq's own for ``standard``), and the decoder is
built with the output layer chosen by ``--output-layer`` as its ``output_projection`` (so no default projection
is ever allocated).
"""
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase, TransformerModel
from fairseq.models.transformer.transformer_config import (
    DEFAULT_MAX_SOURCE_POSITIONS,
    DEFAULT_MAX_TARGET_POSITIONS,
    DEFAULT_MIN_PARAMS_TO_WRAP,
)
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
        construction, hence the random initialisation, is fairseq's: embeddings, encoder, decoder."""
        outlayers_transformer(args)
        emb_spec, out_spec = check_core_args(args, task)
        if getattr(args, "share_decoder_input_output_embed", False) and args.output_layer == "softmax":
            raise OutlayersConfigError(
                "--share-decoder-input-output-embed asks for tying but --output-layer is 'softmax' (untied); "
                "use --output-layer tied instead"
            )
        if getattr(args, "merge_src_tgt_embed", False):
            raise OutlayersConfigError("--merge-src-tgt-embed is not supported by outlayers_transformer; binarise with "
                                       "fairseq-preprocess --joined-dictionary and use --output-layer tied-all")
        share_all = shares_all_embeddings(args)
        args.share_all_embeddings = share_all
        args.share_decoder_input_output_embed = False  # the output layer does the tying
        cfg = _fairseq_config(args, task)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        if emb_spec.name == "standard":  # fairseq's own embeddings (supports --*-embed-path)
            encoder_embed = cls.build_embedding(cfg, src_dict, cfg.encoder.embed_dim, cfg.encoder.embed_path)
            decoder_embed = encoder_embed if share_all else cls.build_embedding(
                cfg, tgt_dict, cfg.decoder.embed_dim, cfg.decoder.embed_path)
        else:
            encoder_embed, decoder_embed = build_core_embeddings(
                args, task, args.encoder_embed_dim, args.decoder_embed_dim, share_all, make_embedding=None
            )
        encoder = cls.build_encoder(cfg, src_dict, encoder_embed)
        output_layer = build_core_output_layer(args, task, decoder_embed, cfg.decoder.output_dim)
        decoder = TransformerDecoderBase(cfg, tgt_dict, decoder_embed, no_encoder_attn=cfg.no_cross_attention,
                                         output_projection=output_layer)
        # fairseq's checkpoint upgrade would otherwise re-insert a tied 'output_projection.weight' key
        decoder.share_input_output_embed = False
        model = cls(cfg, encoder, decoder)
        finish_build(model, args)
        return model


def _fairseq_config(args, task) -> TransformerConfig:
    """What fairseq's legacy ``TransformerModel.build_model`` and ``TransformerModelBase.build_model`` do to the
    options before building (fairseq 0.12), with its checks of --share-all-embeddings."""
    if args.encoder_layers_to_keep:
        args.encoder_layers = len(args.encoder_layers_to_keep.split(","))
    if args.decoder_layers_to_keep:
        args.decoder_layers = len(args.decoder_layers_to_keep.split(","))
    if getattr(args, "max_source_positions", None) is None:
        args.max_source_positions = DEFAULT_MAX_SOURCE_POSITIONS
    if getattr(args, "max_target_positions", None) is None:
        args.max_target_positions = DEFAULT_MAX_TARGET_POSITIONS
    if args.share_all_embeddings:
        if task.source_dictionary != task.target_dictionary:
            raise OutlayersConfigError("--share-all-embeddings requires a joined dictionary")
        if args.encoder_embed_dim != args.decoder_embed_dim:
            raise OutlayersConfigError("--share-all-embeddings requires --encoder-embed-dim to match "
                                       "--decoder-embed-dim")
        if args.decoder_embed_path and args.decoder_embed_path != args.encoder_embed_path:
            raise OutlayersConfigError("--share-all-embeddings not compatible with --decoder-embed-path")
    if getattr(args, "offload_activations", False):
        args.checkpoint_activations = True  # offloading implies checkpointing
    if not args.share_all_embeddings:
        args.min_params_to_wrap = getattr(args, "min_params_to_wrap", DEFAULT_MIN_PARAMS_TO_WRAP)
    cfg = TransformerConfig.from_namespace(args)
    cfg.decoder.input_dim = int(cfg.decoder.input_dim)  # fairseq's workaround for OmegaConf (T96535332)
    cfg.decoder.output_dim = int(cfg.decoder.output_dim)
    if args.share_all_embeddings:
        cfg.share_decoder_input_output_embed = True  # as fairseq sets it; the output layer is ours anyway
    return cfg


def _preset(name, fairseq_arch):
    """Register ``name`` as fairseq's ``fairseq_arch`` settings plus the core's defaults."""

    @register_model_architecture("outlayers_transformer", name)
    def arch(args):
        fairseq_arch(args)
        core_defaults(args)

    return arch


outlayers_transformer = _preset("outlayers_transformer", base_architecture)
outlayers_transformer_iwslt_de_en = _preset("outlayers_transformer_iwslt_de_en", transformer_iwslt_de_en)
outlayers_transformer_wmt_en_de = _preset("outlayers_transformer_wmt_en_de", transformer_wmt_en_de)
outlayers_transformer_wmt_en_de_big = _preset("outlayers_transformer_wmt_en_de_big", transformer_vaswani_wmt_en_de_big)


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
