"""fairseq_outlayers: output layers and embeddings for fairseq NMT, loaded with ``--user-dir``.

Importing the package registers its models, architectures and criterions with fairseq and allow-lists the
classes that fairseq checkpoints need for torch's safe (``weights_only``) loading.
"""
import os

from .version import __version__  # noqa: F401

USER_DIR = os.path.dirname(os.path.abspath(__file__))


def _register():
    from . import checkpoint_safety, errors

    checkpoint_safety.install()
    errors.install_excepthook()
    from .pairing import lexicon

    lexicon.install_fairseq_replace_unk()  # a working fairseq-generate/-interactive --replace-unk [LEXICON]
    from . import models  # noqa: F401  (registers models and architectures)
    from . import criterions  # noqa: F401


_register()
