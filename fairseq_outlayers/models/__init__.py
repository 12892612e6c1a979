"""Registered fairseq models.

Every module in this package is imported here (as fairseq does for its own ``models/``), so a method registers
its output layer or embeddings by adding a file, without editing this one. The baselines come first because
the models' command-line options list every registered seam.
"""
import importlib
import os

from . import baselines  # noqa: F401  (standard embeddings; softmax / tied / tied-all output layers)

_HERE = os.path.dirname(__file__)
_MODELS = ("transformer", "lstm")  # imported last: their options are generated from the registries
for _name in sorted(os.listdir(_HERE)):
    _mod = _name[:-3]
    if _name.endswith(".py") and not _name.startswith("_") and _mod not in _MODELS:
        importlib.import_module(f"{__name__}.{_mod}")
for _mod in _MODELS:
    importlib.import_module(f"{__name__}.{_mod}")
