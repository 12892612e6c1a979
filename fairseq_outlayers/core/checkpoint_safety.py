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
import contextlib
import contextvars
import os
import sys
from typing import Optional, Sequence

import numpy
import torch

from fairseq_outlayers.core.fairseq_compat import command_line_checkpoint
from fairseq_outlayers.errors import OutlayersConfigError, describe_load_error, load_error_message  # noqa: F401

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
#: the checkpoint being loaded, as the code that loads it says (``loading``)
_LOADING: contextvars.ContextVar = contextvars.ContextVar("outlayers_loading_checkpoint", default=None)


def install():
    """Register the allow-list with torch (idempotent; a no-op on torch without ``add_safe_globals``)."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:
        add(list(ALLOWED_GLOBALS))


def read(path: str, mmap: bool = False) -> dict:
    """The state of a fairseq checkpoint, loaded with torch's weights-only unpickler and this allow-list, on the
    CPU; ``OutlayersConfigError`` with one line (``describe_load_error``) when it is missing, damaged, unsafe or
    not a fairseq checkpoint. ``mmap`` maps the tensors instead of reading them (for a look at the options)."""
    install()
    error = None
    for kwargs in ([{"mmap": True}] if mmap else []) + [{}]:  # a file of torch's legacy format cannot be mapped
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, **kwargs)
            break
        except Exception as e:  # torch, pickle and zip errors of a foreign, truncated or crafted file
            error = e
    else:
        raise OutlayersConfigError(describe_load_error(path, error)) from error
    if not isinstance(state, dict) or "model" not in state or (state.get("cfg") is None and state.get("args") is None):
        raise OutlayersConfigError(f"checkpoint '{path}' is a torch file but not a fairseq checkpoint (no model "
                                   "weights and configuration); pass a .pt file written by fairseq-train")
    return state


def non_finite(weights: dict):
    """[(name, values that are NaN or infinite, values)] of the floating-point tensors of a state dict."""
    found = []
    for name, value in weights.items():
        if torch.is_tensor(value) and (value.is_floating_point() or value.is_complex()):
            bad = value.numel() - int(torch.isfinite(value).sum())
            if bad:
                found.append((name, bad, value.numel()))
    return found


def check_finite(path: str, state: dict):
    """Refuse, in one line naming the tensor, a checkpoint whose weights hold NaN or infinite values (a run that
    diverged before the save): decoding it would fail deep in the beam search or give garbage."""
    check_finite_weights(path, state.get("model") or {})


@contextlib.contextmanager
def loading(path: Optional[str]):
    """Within it, ``loading_path`` is ``path``: set by the code that hands a checkpoint to fairseq's loader (the
    tools' ``load_model_ensemble_and_task``, ``outlayers-train``), so a model's ``load_state_dict`` names it."""
    token = _LOADING.set(path)
    try:
        yield
    finally:
        _LOADING.reset(token)


def loading_path(argv: Optional[Sequence[str]] = None) -> str:
    """The checkpoint being loaded, for a model's ``load_state_dict`` to name it: the one set with ``loading``;
    else, under fairseq's own commands (``fairseq-generate --user-dir``, a resumed ``fairseq-train``), the one their
    command line (``argv``, default ``sys.argv``) names (``fairseq_compat.command_line_checkpoint``); else "the
    checkpoint being loaded"."""
    path = _LOADING.get() or command_line_checkpoint(sys.argv[1:] if argv is None else argv)
    return path or "the checkpoint being loaded"


def check_finite_weights(path: str, weights: dict):
    """``check_finite`` on a state dict: what the package's models run when fairseq loads weights into them, so
    ``fairseq-generate --user-dir`` and a resumed ``fairseq-train`` refuse NaN weights in the same line."""
    bad = non_finite(weights)
    if bad:
        name, count, total = bad[0]
        more = f"; {len(bad) - 1} more tensor(s) too" if len(bad) > 1 else ""
        raise OutlayersConfigError(f"checkpoint '{path}': tensor '{name}' holds {count} NaN or infinite value(s) of "
                                   f"{total}{more}; training diverged before this save: use an earlier checkpoint "
                                   "of the run, or train again with a lower --lr")


def check_decodable(paths):
    """Each checkpoint of ``paths`` (a list, or fairseq's ``--path A.pt:B.pt``) is readable by the safe loader, a
    fairseq checkpoint, and holds finite weights; else ``OutlayersConfigError`` with one line. The tensors are
    memory-mapped, so the check costs one read of the file."""
    if isinstance(paths, str):
        paths = paths.split(os.pathsep)
    for path in paths:
        check_finite(path, read(path, mmap=True))
