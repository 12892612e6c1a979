"""The tools a user runs around the plugin: ``outlayers-train``/``-generate``/``-interactive``/``-validate``
(fairseq's programs with the plugin loaded and one-line errors), translation of raw text and its scoring, the
pairing file of bilingual embeddings, target vectors, parameter reports, the output-bias fit and the option listing.

They import the plugin (``fairseq_outlayers``); the plugin never imports them.
"""
