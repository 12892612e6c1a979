"""Load fairseq checkpoints under torch >= 2.6 without turning off ``weights_only``.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True`` and refuses any pickled object that is not a
tensor or a plain container. A checkpoint written by ``fairseq-train`` stores its legacy options as an
``argparse.Namespace``, which torch then refuses, so ``fairseq-generate`` fails with an ``UnpicklingError``.
Setting ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` would make it work by letting *any* pickle run code.

Instead, when the plugin is imported, we allow-list exactly the classes a fairseq checkpoint's pickle names.
``torch.serialization.get_unsafe_globals_in_checkpoint`` on checkpoints of this package and of plain fairseq
(written by ``fairseq-train`` and by ``fairseq-hydra-train``, which stores plain dicts) lists only
``argparse.Namespace``; ``tests/test_checkpoint_safety.py`` re-checks that on every run. A run with fairseq's
``--eval-bleu`` also stores numpy arrays (the BLEU n-gram counts among the saved metrics), pickled as
``numpy.ndarray`` rebuilt by ``numpy.core.multiarray._reconstruct`` with a ``numpy.dtype`` (whose class, with
numpy >= 1.25, is one of ``numpy.dtypes``): those are allow-listed too, for boolean and numeric dtypes only
(numpy's array reconstruction creates only arrays of them; no object arrays). ``tests/test_ledger_raw_sets.py`` checks a ``--eval-bleu`` checkpoint. Anything else --
e.g. ``os.system`` in a crafted pickle -- is still refused.
"""
import argparse

import numpy
import torch

try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct
except ImportError:  # pragma: no cover  (numpy 1.x)
    from numpy.core.multiarray import _reconstruct

#: numpy's dtype classes of booleans and numbers (numpy >= 1.25; none before, where numpy.dtype is enough)
NUMERIC_DTYPES = tuple(getattr(getattr(numpy, "dtypes", None), name) for name in (
    "BoolDType", "Int8DType", "UInt8DType", "Int16DType", "UInt16DType", "Int32DType", "UInt32DType", "Int64DType",
    "UInt64DType", "LongLongDType", "ULongLongDType", "Float16DType", "Float32DType", "Float64DType",
    "LongDoubleDType") if hasattr(getattr(numpy, "dtypes", None), name))
#: the classes fairseq checkpoints need beyond torch's default weights-only set
ALLOWED_GLOBALS = (argparse.Namespace, numpy.ndarray, numpy.dtype, _reconstruct) + NUMERIC_DTYPES


def install():
    """Register the allow-list with torch (idempotent; a no-op on torch without ``add_safe_globals``)."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:
        add(list(ALLOWED_GLOBALS))
