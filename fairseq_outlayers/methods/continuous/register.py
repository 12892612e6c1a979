"""Registrations for continuous outputs (Kumar & Tsvetkov 2019): ``--output-layer continuous`` and the tied input
embeddings ``--embeddings target-vectors`` (section 4.4); their ``--arch`` presets are in ``models/presets.py``.
Beside this file: the modules (``continuous_output.py``), the maths (``bessel.py``: log C_m, ``vmf_losses.py``,
``nn_search.py``), the criterions (``criterions.py``) and the vector reader (``target_vectors.py``).

The frozen target table is read from ``--target-vectors`` when a model is built for training; it is a buffer of
the model, so it is saved in every checkpoint. A model rebuilt from a checkpoint (``fairseq-generate``,
``fairseq-interactive``) takes its table from the checkpoint and does not need the vector file any more.
"""
import logging

import torch

from fairseq_outlayers import model_args
from fairseq_outlayers.core import fingerprints
from fairseq_outlayers.core.output_layer import lookup_table
from fairseq_outlayers.core.registry import Option, register_embeddings, register_output_layer
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.value_checks import Range

from .continuous_output import DEFAULT_FAISS_TOPK, SEARCHES, ContinuousOutput, TargetVectorEmbedding
from .target_vectors import TargetTable, load_target_table, write_example_vectors

logger = logging.getLogger(__name__)

#: the README's row of this method (``python -m fairseq_outlayers.lab.docs`` renders the table from it)
ABOUT = {"summary": "predicts a word vector (vMF, cosine, L2, max-margin losses)",
         "paper": "Kumar & Tsvetkov 2019", "page": "continuous-outputs.md"}

#: the smallest --continuous-topk fairseq's beam search can run with: K = 1 leaves a hypothesis whose best word is
#: </s> (not allowed before --min-len) with no finite continuation, and fairseq asserts at the maximum length
MIN_TOPK = 2


#: ``--continuous-score-scale``: also checked when a model is built (decoding may set it with --model-overrides)
SCORE_SCALE = Range(0, 10000, low_open=True, why="an inverse temperature on cosines: past 10^4 the scores are one-hot")
#: the options of the layer and of ``--embeddings target-vectors``: flag, default (filled when left unset), help,
#: allowed values
OPTIONS = (
    Option("--target-vectors", None, metavar="FILE",
           help="continuous output layer: word vectors of the target language (word2vec/fastText .vec text, or a "
           ".bin model read with gensim); unit-normalised, aligned to the target dictionary, frozen and saved in the "
           "checkpoint", file="its target-vector table", example=write_example_vectors,
           resume="free"),
    Option("--continuous-dim", None, type=int, metavar="M", range=Range(1, integer=True),
           help="continuous output layer: dimension m of the target vectors; when given it must match the file",
           default_text="read from --target-vectors",
           resume="free"),
    Option("--continuous-layernorm", False, store_true=True,
           help="continuous output layer: LayerNorm on the decoder features before the linear map to R^m",
           resume="shape", effective=lambda a: bool(a.continuous_layernorm)),
    Option("--tie-input-to-target-vectors", False, store_true=True,
           help="decoder input embeddings = the frozen target table + a learned linear map to the model size "
           "(paper, section 4.4); same as --embeddings target-vectors",
           resume="free"),
    Option("--target-vectors-center", False, store_true=True, default_text="off, as in the paper",
           help="centre the unit target vectors (subtract their mean over the dictionary, renormalise) before use: "
           "removes the common direction of vectors trained on small corpora, near which rare words crowd",
           resume="table", effective=lambda a: bool(a.target_vectors_center)),
    Option("--target-vectors-min-coverage", 0.5, type=float, metavar="F",
           range=Range(0, 1, why="a fraction of the target dictionary"),
           help="fail when fewer than this fraction of target dictionary words have a vector",
           resume="free"),
    Option("--continuous-score-scale", None, type=float, metavar="S", range=SCORE_SCALE, default_text="vMF",
           help="decoding scores: log_softmax(S * cos(ê, e_w)) instead of the vMF log-density log_softmax(ê . e_w); "
           "for models trained with cosine/l2/max_margin",
           resume="free"),
    Option("--continuous-search", "exact", choices=SEARCHES,
           help="decoding: how the best words are found; exact: torch (with --continuous-topk, a chunked top-K "
           "search), faiss: an exact faiss inner-product index (IndexFlatIP) of the target vectors, built on first "
           "use (needs faiss-cpu)",
           resume="free"),
    Option("--continuous-topk", None, type=int, metavar="K", range=Range(1, integer=True),
           default_text=f"every word with exact search, {DEFAULT_FAISS_TOPK} with faiss",
           help="decoding: only the K best words and </s> get a finite log-probability, renormalised over them",
           resume="free"),
)


def target_table(args, task):
    """The aligned unit target table: from ``--target-vectors`` for a new model, or an empty table of the right
    shape for a model rebuilt from a checkpoint (its state dict fills it)."""
    dictionary = task.target_dictionary
    if fingerprints.kept(args, "target_vectors") and getattr(args, "continuous_dim", None):
        n = len(dictionary)
        return TargetTable(torch.zeros(n, args.continuous_dim), torch.ones(n, dtype=torch.bool), None)
    if args.target_vectors_min_coverage is not None and not 0 <= args.target_vectors_min_coverage <= 1:
        raise OutlayersConfigError(f"--target-vectors-min-coverage must be in [0, 1], got "
                                   f"{args.target_vectors_min_coverage}")
    table = load_target_table(dictionary, args.target_vectors, args.target_vectors_min_coverage,
                              args.continuous_dim, center=args.target_vectors_center)
    for line in table.report.lines():
        logger.info(line)
    model_args.record(args, continuous_dim=table.report.dim)
    return table


def decoding_options(args, task):
    """The decoding-search keyword arguments of ``ContinuousOutput``, checked."""
    topk = args.continuous_topk  # values are checked by ContinuousOutput (below 1: refused there)
    if topk is not None and 1 <= topk < MIN_TOPK:
        logger.warning(f"--continuous-topk {topk}: with fewer than {MIN_TOPK} words a hypothesis whose best word is "
                       f"</s> has nothing else to extend and fairseq's search fails at the maximum length; using "
                       f"K = {MIN_TOPK}")
        topk = MIN_TOPK
    if args.continuous_search == "faiss":
        from .nn_search import import_faiss

        import_faiss()  # fail now, not at the first decoding step
    return dict(score_scale=args.continuous_score_scale, search=args.continuous_search,
                topk=topk, eos=task.target_dictionary.eos())


@register_output_layer("continuous", help="continuous outputs: predict a word vector, frozen pretrained target "
                       "vectors (Kumar & Tsvetkov 2019; train with --criterion vmf_nll/cosine/l2/max_margin)",
                       options=OPTIONS, selects={"tie_input_to_target_vectors": "target-vectors"},
                       softmax_type=False,
                       decode_scale="continuous_score_scale",
                       export="it scores words by the vMF density or cosine of a predicted vector, which a stock "
                       "decoder's softmax over one linear map cannot compute")
def build_continuous(args, task, decoder_embed_tokens, input_dim):
    if args.continuous_score_scale is not None:  # also set when decoding (--model-overrides): checked here too
        SCORE_SCALE.check("--continuous-score-scale", args.continuous_score_scale, "give a value in that range (e.g. "
                          "10 or 40), or leave it out for the vMF scores")
    decoding = decoding_options(args, task)
    if isinstance(decoder_embed_tokens, TargetVectorEmbedding):  # one frozen table for input and output
        return ContinuousOutput(None, decoder_embed_tokens.decodable_mask, input_dim,
                                layernorm=args.continuous_layernorm, tied_embedding=decoder_embed_tokens,
                                **decoding)
    table = target_table(args, task)
    return ContinuousOutput(table.table, table.decodable, input_dim, layernorm=args.continuous_layernorm,
                            **decoding)


@register_embeddings("target-vectors", help="decoder input embeddings = the frozen --target-vectors table + a "
                     "learned linear map to the model size (Kumar & Tsvetkov 2019, section 4.4)",
                     options_from="continuous", no_word_matrix="are a frozen vector table and a learned m x d map, "
                     "with no word matrix to tie to", export=lookup_table)
def build_target_vector_embeddings(args, task, encoder_dim, decoder_dim, share_all, make_embedding):
    if share_all:
        raise OutlayersConfigError("--embeddings target-vectors ties the decoder input to the target vectors; it "
                                   "cannot share one matrix with the source (drop --share-all-embeddings)")
    encoder_embed = make_embedding(task.source_dictionary, encoder_dim)
    table = target_table(args, task)
    decoder_embed = TargetVectorEmbedding(table.table, decoder_dim, task.target_dictionary.pad())
    decoder_embed.decodable_mask = table.decodable  # handed to the continuous output layer, if any
    return encoder_embed, decoder_embed


from . import criterions  # noqa: E402,F401  (registers the continuous outputs' criterions with fairseq)
