"""fairseq_outlayers: output layers and embeddings for fairseq NMT, loaded with ``--user-dir``.

Importing the package registers its models, architectures and criterions with fairseq and allow-lists the
classes that fairseq checkpoints need for torch's safe (``weights_only``) loading; nothing else (no
``sys.excepthook``, no fairseq function replaced; ``tests/test_import_side_effects.py`` checks it).
"""
import os

from .version import __version__  # noqa: F401

USER_DIR = os.path.dirname(os.path.abspath(__file__))


def _register():
    from . import checkpoint_safety

    checkpoint_safety.install()
    from . import models  # noqa: F401  (registers models and architectures)
    from . import criterions  # noqa: F401


_register()
