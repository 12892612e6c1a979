"""Load fairseq checkpoints under torch >= 2.6 without turning off ``weights_only``.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True`` and refuses any pickled object that is not a
tensor or a plain container. A checkpoint written by ``fairseq-train`` stores its legacy options as an
``argparse.Namespace``, which torch then refuses, so ``fairseq-generate`` fails with an ``UnpicklingError``.
Setting ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` would make it work by letting *any* pickle run code.

Instead, when the plugin is imported, we allow-list exactly the classes a fairseq checkpoint's pickle names.
``torch.serialization.get_unsafe_globals_in_checkpoint`` on checkpoints of this package and of plain fairseq
(written by ``fairseq-train`` and by ``fairseq-hydra-train``, which stores plain dicts) lists only
``argparse.Namespace``; ``tests/test_checkpoint_safety.py`` re-checks that on every run. Anything else -- e.g.
``os.system`` in a crafted pickle -- is still refused.
"""
import argparse

import torch

#: the classes fairseq checkpoints need beyond torch's default weights-only set
ALLOWED_GLOBALS = (argparse.Namespace,)


def install():
    """Register the allow-list with torch (idempotent; a no-op on torch without ``add_safe_globals``)."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:
        add(list(ALLOWED_GLOBALS))
