#!/usr/bin/env python3
"""The scores of ``scripts/evaluate.sh``: ``fairseq_outlayers.tools.evaluation.score_translations``."""
from fairseq_outlayers.tools.evaluation.score_translations import main

if __name__ == "__main__":
    main()
