"""Evaluation, in four modules imported by name (nothing is loaded here):

* ``scoring``: translate a test set with a checkpoint and score it (sacreBLEU and tokenised BLEU), for the data
  directory's test split or a raw ``SRC_FILE,REF_FILE`` pair (used by the ledger, ``translate`` and
  ``score_raw``);
* ``score_raw``: ``scripts/evaluate.sh --test-set NAME=SRC,REF``, raw test sets scored with ``scoring``;
* ``score_translations``: the scores of ``scripts/evaluate.sh`` (BLEU, rare-word F1 by frequency);
* ``unknown_words``: unknown-word replacement with a lexicon, used by ``outlayers-generate`` /
  ``outlayers-interactive --replace-unk [LEXICON]`` and ``scripts/evaluate.sh --replace-unk [LEXICON]``.
"""
