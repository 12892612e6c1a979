"""Registered fairseq models. Importing this module registers the seams' builders, then the models."""
from . import baselines  # noqa: F401  (standard embeddings; softmax / tied / tied-all output layers)
from . import lstm, transformer  # noqa: F401
