"""Registrations of the baseline seams: standard embeddings; softmax, tied and tied-all output layers."""
from fairseq_outlayers.core.output_layer import folded_linear, lookup_table
from fairseq_outlayers.core.registry import register_embeddings, register_output_layer

from .softmax import LearnedSoftmaxOutput, TiedSoftmaxOutput

#: the README's row of this method (``python -m fairseq_outlayers.lab.docs`` renders the table from it)
ABOUT = {"summary": "learned output matrix, untied or tied to the decoder embedding",
         "paper": "Press & Wolf 2017", "page": "usage.md"}


@register_embeddings("standard", help="one learned matrix per dictionary (fairseq's usual embeddings)",
                     export=lookup_table)
def build_standard_embeddings(args, task, encoder_dim, decoder_dim, share_all, make_embedding):
    encoder_embed = make_embedding(task.source_dictionary, encoder_dim)
    decoder_embed = encoder_embed if share_all else make_embedding(task.target_dictionary, decoder_dim)
    return encoder_embed, decoder_embed


@register_output_layer("softmax", help="learned |V| x d output matrix, untied (the NMT baseline)", output_bias=True,
                       export=folded_linear)
def build_softmax(args, task, decoder_embed_tokens, input_dim):
    return LearnedSoftmaxOutput(len(task.target_dictionary), input_dim, bias=args.output_bias)


@register_output_layer("tied", help="output matrix tied to the decoder input embedding (Press & Wolf 2017)",
                       ties_decoder_embedding=True, embedding_sized_input=True, output_bias=True,
                       export=folded_linear)
def build_tied(args, task, decoder_embed_tokens, input_dim):
    return TiedSoftmaxOutput(decoder_embed_tokens, input_dim, bias=args.output_bias)


@register_output_layer("tied-all", help="three-way tying of source, target and output embeddings "
                       "(needs fairseq-preprocess --joined-dictionary)",
                       requires_joined_dictionary=True, shares_all_embeddings=True, ties_decoder_embedding=True,
                       embedding_sized_input=True, output_bias=True, export=folded_linear)
def build_tied_all(args, task, decoder_embed_tokens, input_dim):
    return TiedSoftmaxOutput(decoder_embed_tokens, input_dim, bias=args.output_bias)
