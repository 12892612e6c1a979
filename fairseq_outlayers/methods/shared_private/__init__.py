"""Shared-private bilingual word embeddings (Liu et al. 2019): ``--embeddings shared-private``, and the pairing
file's reader (``word_pairs/``)."""
