"""``outlayers-pairing`` (``python -m fairseq_outlayers.tools.pairing --src-text ... --tgt-text ... --src-dict ...
--tgt-dict ... -o pairs.txt``): aligns the training corpus (fast_align through systran-align, or a Pharaoh file),
estimates A(y|x) from the links, pairs the two dictionaries (lexical meaning, same word form, unrelated) and writes
the pairing file that ``fairseq-train --embeddings shared-private --pairing pairs.txt`` reads
(``fairseq_outlayers.methods.shared_private.word_pairs``).
"""
import logging
import time
from fairseq_outlayers.methods.shared_private.word_pairs import DEFAULT_THRESHOLD, load_dictionary, pair_dictionaries, read_parallel

from .alignment import estimate_probabilities, read_pharaoh, systran_links
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.methods.shared_private.word_pairs.corpus import coverage_warnings

__all__ = ["make_pairing"]


def make_pairing(src_text, tgt_text, src_dict_path, tgt_dict_path, aligner="systran", alignment=None,
                 direction="forward", threshold=DEFAULT_THRESHOLD, iterations=5, log=None):
    """The whole pipeline as a Python call; returns (Pairing, timings dict with seconds and word counts)."""

    if log is None:

        log = logging.getLogger(__name__).warning
    src_dict, tgt_dict = load_dictionary(src_dict_path), load_dictionary(tgt_dict_path)
    warnings = coverage_warnings(src_text, tgt_text, src_dict, tgt_dict, src_dict_path, tgt_dict_path)
    for w in warnings:
        log(f"warning: {w}")
    corpus = lambda: read_parallel(src_text, tgt_text)  # noqa: E731
    skipped = []
    t0 = time.perf_counter()
    if aligner == "systran":
        linked = systran_links(corpus, direction=direction, iterations=iterations, log=log, skipped=skipped)
        info = {"aligner": "systran-align", "direction": direction, "iterations": str(iterations)}
    elif aligner == "pharaoh":
        if not alignment:
            raise OutlayersConfigError("--aligner pharaoh needs --alignment FILE (Pharaoh 'i-j' links, one line "
                                       "per sentence pair)")
        linked = read_pharaoh(alignment, corpus(), log=log)
        info = {"aligner": "pharaoh-file"}
    else:
        raise OutlayersConfigError(f"--aligner must be 'systran' or 'pharaoh', not '{aligner}'")
    probs, counter = estimate_probabilities(linked)
    t1 = time.perf_counter()
    words = counter.words
    if skipped:
        info["skipped-lines"] = str(len(skipped))
    pairing = pair_dictionaries(src_dict, tgt_dict, probs, threshold,
                                dict(info, sentences=str(counter.sentences), links=str(counter.links)))
    t2 = time.perf_counter()
    return pairing, {"align_s": t1 - t0, "pair_s": t2 - t1, "words": words, "sentences": counter.sentences,
                     "skipped": skipped, "warnings": warnings}
