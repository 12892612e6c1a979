"""Fixed random target embeddings, a frozen random classifier (Shalev et al. 2021): ``--output-layer fixed``."""
