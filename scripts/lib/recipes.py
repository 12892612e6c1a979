#!/usr/bin/env python3
"""The recipe table of this checkout, as ``scripts/train.sh`` reads it: ``fairseq_outlayers/tools/recipes.py`` run
with the checkout's ``configs/``.

    python scripts/lib/recipes.py list | settings METHOD DATASET | args METHOD DATASET [GROUP.KEY=VALUE ...]

The module's file is run from this checkout (it needs only PyYAML), so the table is this checkout's even where
another copy of the package is installed.
"""
import os
import runpy
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if __name__ == "__main__":
    recipes = runpy.run_path(os.path.join(ROOT, "fairseq_outlayers", "tools", "recipes.py"))
    sys.exit(recipes["main"](configs=os.path.join(ROOT, "configs")))
