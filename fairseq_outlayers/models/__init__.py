"""Registered fairseq models.

Every module in this package is imported here (as fairseq does for its own ``models/``), so a method registers
its output layer or embeddings by adding a file, without editing this one. The order is fixed in three stages:

1. ``baselines`` first, then every other file alphabetically: the methods, which import only the registries,
   the core and their own modules (never an architecture);
2. the models, ``transformer`` and ``lstm``: their command-line options list every registered seam;
3. ``presets`` last: the named ``--arch`` presets, the one file that imports both architectures and methods.

Then the criterions. This package is what registers the plugin: ``--user-dir`` imports it (fairseq imports a user
directory's ``models/``), and so does any module of it a tool loads. Last, the checkpoint allow-list.
"""
import importlib
import os

from .. import checkpoint_safety
from . import baselines  # noqa: F401  (the standard embeddings and output layers)

_HERE = os.path.dirname(__file__)
_MODELS = ("transformer", "lstm")  # stage 2: their options are generated from the registries
_PRESETS = ("presets",)  # stage 3: architectures x methods
for _name in sorted(os.listdir(_HERE)):
    _mod = _name[:-3]
    if _name.endswith(".py") and not _name.startswith("_") and _mod not in _MODELS + _PRESETS:
        importlib.import_module(f"{__name__}.{_mod}")
for _mod in _MODELS + _PRESETS:
    importlib.import_module(f"{__name__}.{_mod}")
from .. import criterions  # noqa: E402,F401  (registers the criterions)

checkpoint_safety.install()
