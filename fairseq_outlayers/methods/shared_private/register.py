"""``--embeddings shared-private``: shared-private bilingual word embeddings (Liu et al. 2019).

The pairing file (``--pairing``) is read once, when training starts; its index maps become buffers of the
embedding module and its category sizes and dictionary hashes are recorded in the model's saved arguments,
so ``fairseq-generate`` rebuilds the model from the checkpoint alone. The decoder's output layer must tie to
the assembled target matrix (``--output-layer tied``, the paper's decoder weight tying; any layer that reads
the decoder input embedding works); an untied softmax or three-way tying is refused with a message.
"""
import logging

from fairseq_outlayers import model_args
from fairseq_outlayers.core import fingerprints
from fairseq_outlayers.core.output_layer import lookup_table
from fairseq_outlayers.core.registry import Option, get_output_layer_spec, register_embeddings
from fairseq_outlayers.errors import OutlayersConfigError

from .embedding import CATEGORIES, SharedPrivateEmbedding, SharedPrivateEmbeddings
from .word_pairs.corpus import special_indices
from .word_pairs.pairs import index_maps, lambdas_from_string, read_pairing, write_example_pairing

logger = logging.getLogger(__name__)

#: the README's row of this method (``python -m fairseq_outlayers.lab.docs`` renders the table from it)
ABOUT = {"summary": "source and target words share part of their embedding",
         "paper": "Liu et al. 2019", "page": "shared-private.md"}

DEFAULT_LAMBDAS = "0.9,0.7,0.5"
#: the embeddings' options: flag, default (filled when left unset), help
OPTIONS = (
    Option("--pairing", None, metavar="PATH",
           help="shared-private: pairing file from python -m fairseq_outlayers.tools.pairing (read at training; "
           "stored in the checkpoint)", file="its pairing (index maps)",
           example=write_example_pairing,
           resume="free"),
    Option("--shared-private-lambdas", DEFAULT_LAMBDAS, metavar="LM,WF,UR",
           help="shared-private: share of the d features shared by a pair of each category (lexical meaning, same "
           "word form, unrelated), each in [0, 1]",
           resume="shape", effective=lambda a: lambdas_from_string(a.shared_private_lambdas)),
)


def _placeholder_pairs(dictionary, sizes):
    """A one-to-one map with the recorded category sizes; the real maps come from the checkpoint buffers."""
    specials = special_indices(dictionary)  # once: it scans every symbol (a call per index took 8 s at 4k words)
    free = [i for i in range(len(dictionary)) if i not in specials]
    out, k = {}, 0
    for c in CATEGORIES:
        out[c] = free[k:k + sizes[c]]
        k += sizes[c]
    if k > len(free):
        raise OutlayersConfigError("the checkpoint's shared-private pairing has more pairs than the dictionary has "
                                   "words; generate with the data-bin directory used for training")
    return out


def check_shared_private_args(args, num_words=None):
    """--shared-private-lambdas: three numbers in [0, 1], checked when the options are parsed."""
    lambdas_from_string(args.shared_private_lambdas if args.shared_private_lambdas is not None else DEFAULT_LAMBDAS)


@register_embeddings("shared-private", help="shared-private bilingual embeddings (Liu et al. 2019): paired source "
                     "and target words share their first lambda*d features (needs --pairing)",
                     options=OPTIONS, check_args=check_shared_private_args,
                     export=lookup_table)  # the assembled tables, one plain matrix a language
def build_shared_private(args, task, encoder_dim, decoder_dim, share_all, make_embedding):
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    out_spec = get_output_layer_spec(args.output_layer)
    if share_all or out_spec.shares_all_embeddings:
        raise OutlayersConfigError(
            "--embeddings shared-private builds separate source and target matrices; it cannot be combined with "
            "three-way tying (--output-layer tied-all / --share-all-embeddings): use --output-layer tied"
        )
    if not out_spec.ties_decoder_embedding:
        raise OutlayersConfigError(
            f"--embeddings shared-private ties the output projection to the assembled target embeddings (Liu et "
            f"al. 2019), but --output-layer {args.output_layer} is untied; use --output-layer tied"
        )
    for option in ("encoder_embed_path", "decoder_embed_path", "encoder_freeze_embed", "decoder_freeze_embed"):
        if getattr(args, option, None):
            raise OutlayersConfigError(
                f"--{option.replace('_', '-')} loads or freezes a plain embedding matrix; shared-private embeddings "
                "are assembled from blocks, so it cannot be combined with --embeddings shared-private (drop it)"
            )
    if encoder_dim != decoder_dim:
        raise OutlayersConfigError(
            f"--embeddings shared-private shares features between source and target vectors, so "
            f"--encoder-embed-dim ({encoder_dim}) must equal --decoder-embed-dim ({decoder_dim})"
        )
    lambdas = lambdas_from_string(args.shared_private_lambdas)
    recorded = getattr(args, "shared_private_counts", None)
    if fingerprints.kept(args, "pairing") and recorded:  # a trained model rebuilt: no pairing file needed
        # its dictionaries were checked against the recorded hashes by the core (fingerprints.check_dictionaries)
        sizes = dict(zip(CATEGORIES, (int(v) for v in str(recorded).split(","))))
        src_pairs, tgt_pairs = _placeholder_pairs(src_dict, sizes), _placeholder_pairs(tgt_dict, sizes)
        pairs = {c: (src_pairs[c], tgt_pairs[c]) for c in CATEGORIES}
        pads = (None, None)
    else:
        if not args.pairing:
            raise OutlayersConfigError("--embeddings shared-private needs --pairing PATH (make the file with "
                                       "python -m fairseq_outlayers.tools.pairing; see docs/shared-private.md)")
        pairing = read_pairing(args.pairing)
        pairs = index_maps(pairing, src_dict, tgt_dict, path=args.pairing)
        counts = ",".join(str(len(pairs[c][0])) for c in CATEGORIES)
        model_args.record(args, shared_private_counts=counts, shared_private_src_sha256=pairing.src_hash,
                          shared_private_tgt_sha256=pairing.tgt_hash)
        pads = (src_dict.pad(), tgt_dict.pad())
        logger.info(f"shared-private pairing {args.pairing}: lm,wf,ur = {counts}; lambdas = {lambdas}")
    core = SharedPrivateEmbeddings(len(src_dict), len(tgt_dict), encoder_dim, pairs, lambdas,
                                   src_padding_idx=pads[0], tgt_padding_idx=pads[1])
    return SharedPrivateEmbedding(core, "src", src_dict.pad()), SharedPrivateEmbedding(core, "tgt", tgt_dict.pad())
