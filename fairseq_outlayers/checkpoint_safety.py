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


def _global_named(exc: BaseException):
    """The ``module.name`` a refused pickle asked for, from torch's weights-only error, or None."""
    import re

    found = re.search(r"GLOBAL ([\w.]+)", str(exc))
    return found.group(1) if found else None


def describe_load_error(path: str, exc: BaseException) -> str:
    """One line for a checkpoint that could not be loaded: missing, empty, unsafe (a pickle that names code a
    fairseq checkpoint never holds; nothing of it ran) or damaged."""
    import os
    import pickle

    if not os.path.exists(path):
        return f"checkpoint '{path}' does not exist; pass the path of a .pt file written by fairseq-train"
    if os.path.isdir(path):
        return f"checkpoint '{path}' is a directory; pass the path of a .pt file in it (e.g. checkpoint_best.pt)"
    if os.path.getsize(path) == 0:
        return (f"checkpoint '{path}' is empty (0 bytes): an interrupted save? use another checkpoint of the run "
                "(e.g. checkpoint_best.pt or the newest checkpointN.pt)")
    name = _global_named(exc)
    if isinstance(exc, pickle.UnpicklingError) and name is not None:
        return (f"checkpoint '{path}' was refused and nothing in it was run: its pickle asks for '{name}', which no "
                "fairseq checkpoint holds (a crafted or tampered file?); use a checkpoint you trained or trust")
    import re

    text = " ".join(str(exc).split())
    cause = re.search(r"WeightsUnpickler error: (.*?)(?: Check the documentation|\. |$)", text)  # torch's weights-only boilerplate
    text = cause.group(1) if cause else re.split(r"(?<=[a-z])\. ", text)[0]
    reason = f"{type(exc).__name__}: {text}"[:160]
    return (f"checkpoint '{path}' cannot be read ({reason}); it is truncated, damaged or not a .pt file written by "
            "fairseq-train: use another checkpoint of the run")


def read(path: str, mmap: bool = False) -> dict:
    """The state of a fairseq checkpoint, loaded with torch's weights-only unpickler and this allow-list, on the
    CPU; ``OutlayersConfigError`` with one line (``describe_load_error``) when it is missing, damaged, unsafe or
    not a fairseq checkpoint. ``mmap`` maps the tensors instead of reading them (for a look at the options)."""
    from fairseq_outlayers.errors import OutlayersConfigError

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


def load_error_message(exc: BaseException):
    """The one line for an exception raised while fairseq loaded a checkpoint (inside its
    ``checkpoint_utils.load_checkpoint_to_cpu``, or its "Model file not found"), or None for any other."""
    import traceback

    for frame, _ in reversed(list(traceback.walk_tb(exc.__traceback__))):
        if not frame.f_code.co_filename.replace("\\", "/").endswith("fairseq/checkpoint_utils.py"):
            continue
        if frame.f_code.co_name == "load_checkpoint_to_cpu" and isinstance(frame.f_locals.get("path"), str):
            return describe_load_error(frame.f_locals["path"], exc)
        if isinstance(exc, OSError) and "Model file not found" in str(exc) and isinstance(
                frame.f_locals.get("filename"), str):
            return describe_load_error(frame.f_locals["filename"], exc)
    return None


def load_model_ensemble_and_task(paths, arg_overrides=None, **kwargs):
    """fairseq's ``checkpoint_utils.load_model_ensemble_and_task`` (the safe load, with this allow-list), a missing,
    damaged or unsafe checkpoint raised as ``OutlayersConfigError`` with one line."""
    from fairseq import checkpoint_utils

    from fairseq_outlayers.errors import OutlayersConfigError

    install()
    try:
        return checkpoint_utils.load_model_ensemble_and_task(list(paths), arg_overrides=arg_overrides, **kwargs)
    except OutlayersConfigError:
        raise
    except Exception as e:
        message = load_error_message(e)
        if message is None:
            raise
        raise OutlayersConfigError(message) from e
