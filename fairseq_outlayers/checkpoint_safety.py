"""Load fairseq checkpoints under torch >= 2.6 without turning off ``weights_only``.

Since torch 2.6, ``torch.load`` defaults to ``weights_only=True`` and refuses any pickled object that is not a
tensor or a plain container. fairseq checkpoints also hold their configuration: an ``argparse.Namespace``
(legacy options) and omegaconf containers, which torch then refuses, so ``fairseq-generate`` fails with an
``UnpicklingError``. Setting ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` would let *any* pickle run code.

Instead, when the plugin is imported, we allow-list exactly the classes a fairseq checkpoint's pickle names
(found by ``torch.serialization.get_unsafe_globals_in_checkpoint`` on checkpoints of this package and of plain
fairseq). Anything else -- e.g. ``os.system`` in a crafted pickle -- is still refused.
"""
import argparse
import collections
import typing

import torch

SAFE_GLOBALS = [argparse.Namespace, collections.defaultdict, typing.Any, dict, list, int]


def _omegaconf_globals():
    try:
        import omegaconf
        from omegaconf import nodes
        from omegaconf.base import ContainerMetadata, Metadata
    except ImportError:  # pragma: no cover - fairseq always installs omegaconf
        return []
    return [
        omegaconf.DictConfig, omegaconf.ListConfig, ContainerMetadata, Metadata,
        nodes.AnyNode, nodes.StringNode, nodes.IntegerNode, nodes.FloatNode, nodes.BooleanNode,
        nodes.EnumNode, nodes.ValueNode,
    ]


def _numpy_globals():
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        return []
    found = [np.dtype, np.ndarray]
    for module_name in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            module = __import__(module_name, fromlist=["scalar", "_reconstruct"])
            found += [module.scalar, module._reconstruct]
            break
        except (ImportError, AttributeError):
            continue
    found += [type(np.dtype(t)) for t in ("float64", "float32", "int64", "int32", "bool")]
    return found


def allowed_globals():
    return SAFE_GLOBALS + _omegaconf_globals() + _numpy_globals()


def install():
    """Register the allow-list with torch (idempotent; a no-op on torch without add_safe_globals)."""
    add = getattr(torch.serialization, "add_safe_globals", None)
    if add is not None:
        add(allowed_globals())
