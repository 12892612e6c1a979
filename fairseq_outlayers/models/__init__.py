"""Registered fairseq models: what ``--user-dir`` loads (fairseq imports a user directory's ``models/``).

The order is fixed in three stages:

1. every method's ``register.py`` (``methods/*/``), ``baselines`` first: the layers, embeddings and criterions,
   which import only the core and their own folder;
2. the models, ``transformer`` and ``lstm``: their command-line options list every registered seam;
3. ``presets``: the named ``--arch`` presets, the one file that imports both architectures and methods.

Then every module of ``losses/`` (the shared criterions), and the checkpoint allow-list. A method is added by adding
its folder; this file names none.
"""
import importlib
import os

from fairseq_outlayers.core import checkpoint_safety

_METHODS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "methods")
for _name in ["baselines"] + sorted(n for n in os.listdir(_METHODS) if n != "baselines"):
    if os.path.isfile(os.path.join(_METHODS, _name, "register.py")):
        importlib.import_module(f"fairseq_outlayers.methods.{_name}.register")
from . import transformer, lstm  # noqa: E402,F401  (stage 2)
from . import presets  # noqa: E402,F401  (stage 3)
_LOSSES = os.path.join(os.path.dirname(_METHODS), "losses")
for _name in sorted(n[:-3] for n in os.listdir(_LOSSES) if n.endswith(".py") and not n.startswith("_")):
    importlib.import_module(f"fairseq_outlayers.losses.{_name}")  # the shared losses' criterions

checkpoint_safety.install()
