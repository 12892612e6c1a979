"""Loading a trained checkpoint from a tool: the plugin registered first, then fairseq's loader with the safe
(weights-only) allow-list, and one-line errors. The tools' floor: fairseq skips a ``--user-dir`` already imported,
so a tool that loads a checkpoint registers the plugin itself, here."""
import os

from fairseq import checkpoint_utils

import fairseq_outlayers.models  # noqa: F401  (registers the plugin: the checkpoint's --user-dir is this package)
from fairseq_outlayers.core.checkpoint_safety import install, loading
from fairseq_outlayers.errors import OutlayersConfigError, load_error_message


def load_model_ensemble_and_task(paths, arg_overrides=None, **kwargs):
    """fairseq's ``checkpoint_utils.load_model_ensemble_and_task`` (the safe load, with this allow-list), a missing,
    damaged or unsafe checkpoint raised as ``OutlayersConfigError`` with one line."""
    install()
    try:
        with loading(os.pathsep.join(paths)):
            return checkpoint_utils.load_model_ensemble_and_task(list(paths), arg_overrides=arg_overrides, **kwargs)
    except OutlayersConfigError:
        raise
    except Exception as e:
        message = load_error_message(e)
        if message is None:
            raise
        raise OutlayersConfigError(message) from e


def load_trained(checkpoint: str, data=None):
    """(model, configuration, task) of one checkpoint through the safe load, its data directory replaced by ``data`` when given;
    a data directory that is gone is one line asking for ``--data DIR``."""
    try:
        overrides = {"data": data} if data else {}
        models, cfg, task = load_model_ensemble_and_task([checkpoint], arg_overrides=overrides)
    except FileNotFoundError as e:
        raise OutlayersConfigError(f"'{checkpoint}': {e}; give the data directory with its dictionaries as "
                                   "--data DIR") from None
    return models[0], cfg, task
