"""Criterions registered with fairseq; every module in this package is imported (add a file to add one). Importing
this package registers the whole plugin, as ``fairseq_outlayers.models`` does (it imports this package last)."""
import importlib
import os

from .. import models  # noqa: F401  (the plugin's registration; a no-op when models/ is loading this package)

for _name in sorted(os.listdir(os.path.dirname(__file__))):
    if _name.endswith(".py") and not _name.startswith("_"):
        importlib.import_module(f"{__name__}.{_name[:-3]}")
