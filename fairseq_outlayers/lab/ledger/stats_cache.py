"""Sentence statistics and bootstrap resamples kept on disk between renders of the ledger.

Scoring every kept translation with sacreBLEU and resampling it costs most of a render (about 20 s for the
committed ledger on one CPU core); both depend only on their inputs. ``memo(kind, parts, compute)`` keeps each
result as one ``.npy`` file named by a sha256 of ``kind``, the sacreBLEU and numpy versions and ``parts``. A
changed translation, reference or option is another name, so an entry is never stale.

The folder is ``$OUTLAYERS_CACHE_DIR``, else ``$XDG_CACHE_HOME/fairseq_outlayers/ledger``, else
``~/.cache/fairseq_outlayers/ledger``. ``OUTLAYERS_CACHE_DIR=off`` keeps nothing. Files are written atomically;
an unreadable entry is computed again, and a folder that cannot be written is only a slower render.
"""
import hashlib
import os
import tempfile
from typing import Callable, Iterable, Optional

import numpy as np

ENV = "OUTLAYERS_CACHE_DIR"
OFF = "off"


def folder() -> Optional[str]:
    """Where entries are kept, or None when ``$OUTLAYERS_CACHE_DIR`` is ``off``."""
    chosen = os.environ.get(ENV)
    if chosen == OFF:
        return None
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fairseq_outlayers", "ledger")


def key(kind: str, parts: Iterable[bytes]) -> str:
    import sacrebleu

    h = hashlib.sha256(f"{kind}\0{sacrebleu.__version__}\0{np.__version__}\0".encode())
    for part in parts:
        h.update(len(part).to_bytes(8, "little") + part)
    return h.hexdigest()


def memo(kind: str, parts: Iterable[bytes], compute: Callable[[], np.ndarray]) -> np.ndarray:
    """``compute()``, or the array an earlier call with the same ``kind`` and ``parts`` kept."""
    where = folder()
    if where is None:
        return compute()
    path = os.path.join(where, kind, key(kind, parts) + ".npy")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        pass  # absent, cut short or not an array: computed again below
    value = compute()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, value, allow_pickle=False)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError:
        pass  # a read-only or full disk: the value is still right, only not kept
    return value
