"""Criterions registered with fairseq; every module in this package is imported (add a file to add one)."""
import importlib
import os

for _name in sorted(os.listdir(os.path.dirname(__file__))):
    if _name.endswith(".py") and not _name.startswith("_"):
        importlib.import_module(f"{__name__}.{_name[:-3]}")
