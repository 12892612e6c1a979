"""The pairing file of shared-private bilingual word embeddings (Liu et al. 2019, Sec. 2.1): its format, the
pairing of two dictionaries from word-translation probabilities, and the readers the model uses.
``fairseq-train --embeddings shared-private --pairing pairs.txt`` reads the file; ``outlayers-pairing``
(``fairseq_outlayers.tools.pairing``) makes it from a training corpus.
"""
from .corpus import dictionary_hash, load_dictionary, read_parallel, special_indices
from .pairs import (CATEGORIES, DEFAULT_THRESHOLD, Pair, Pairing, index_maps, lambdas_from_string, pair_dictionaries,
                    pair_identical, pair_words, read_pairing, vocabulary, write_pairing)

__all__ = [
    "CATEGORIES", "DEFAULT_THRESHOLD", "Pair", "Pairing", "dictionary_hash", "index_maps", "lambdas_from_string",
    "load_dictionary", "pair_dictionaries", "pair_identical", "pair_words", "read_pairing", "read_parallel",
    "special_indices", "vocabulary", "write_pairing",
]
