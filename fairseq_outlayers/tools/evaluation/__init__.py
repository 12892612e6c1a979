"""Evaluation, in two modules imported by name (nothing is loaded here):

* ``scoring``: translate a test set with a checkpoint and score it (sacreBLEU and tokenised BLEU), for the data
  directory's test split or a raw ``SRC_FILE,REF_FILE`` pair (used by the ledger, ``translate`` and
  ``score_raw``);
* ``unknown_words``: unknown-word replacement with a lexicon, used by ``outlayers-generate`` /
  ``outlayers-interactive --replace-unk [LEXICON]`` and ``scripts/evaluate.sh --replace-unk [LEXICON]``.
"""
