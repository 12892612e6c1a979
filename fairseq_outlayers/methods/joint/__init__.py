"""Joint input-output embedding (Pappas et al. 2018): ``--output-layer joint``."""
