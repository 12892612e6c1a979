"""Evaluation: unknown-word replacement with a lexicon (``unknown_words``), used by ``outlayers-generate`` /
``outlayers-interactive --replace-unk [LEXICON]`` and ``scripts/evaluate.sh --replace-unk [LEXICON]``."""
