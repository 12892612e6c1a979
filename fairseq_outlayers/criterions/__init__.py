"""Criterions registered with fairseq (each method adds its own module here)."""
