"""fairseq_outlayers: output layers and embeddings for fairseq NMT, loaded with ``--user-dir``.

Importing the package loads nothing but the standard library. ``--user-dir`` imports the package and then its
``models/`` folder (fairseq's ``utils.import_user_module``); ``fairseq_outlayers.models`` registers the models,
architectures and criterions and allow-lists the classes fairseq checkpoints need for torch's safe
(``weights_only``) loading. In Python, ``import fairseq_outlayers.models`` does the same. Nothing else changes:
no ``sys.excepthook``, no fairseq function replaced (``tests/test_import_side_effects.py``). The shell recipes'
text tools therefore start without torch or fairseq.
"""
import os

from .version import __version__  # noqa: F401

USER_DIR = os.path.dirname(os.path.abspath(__file__))
