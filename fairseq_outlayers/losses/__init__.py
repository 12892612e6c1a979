"""Losses any softmax-type layer trains with: sampled softmax with its negative sampling, and the fused linear +
cross-entropy with its fairseq criterion. The continuous outputs' losses are in ``methods/continuous/``."""
