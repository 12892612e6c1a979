"""Checks that the binarised data belongs to the dictionaries fairseq loaded next to it.

If ``dict.en.txt`` is replaced (another preprocessing run, a copied file), fairseq trains on ids that mean other
words or, when an id is past the end of the dictionary, fails deep inside torch with an index error. The model
core calls ``check_binarised_data`` before the model is built: it reads the largest token id of each binarised
split of the task's data directory (a memory-mapped max, no copy) and compares it with the dictionary size.
"""
import glob
import os

import numpy as np

from .errors import OutlayersConfigError


def _max_token_id(bin_path):
    idx_path = bin_path[: -len(".bin")] + ".idx"
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    if not MMapIndexedDataset.exists(bin_path[: -len(".bin")]):
        return None
    index = MMapIndexedDataset.Index(idx_path)
    data = np.memmap(bin_path, dtype=index.dtype, mode="r")
    return int(data.max()) if data.size else None


def check_binarised_data(task):
    """Raise OutlayersConfigError if a split of the task's data holds a token id the dictionary lacks."""
    data = getattr(getattr(task, "cfg", None), "data", None) or getattr(getattr(task, "args", None), "data", None)
    src, tgt = getattr(task.cfg, "source_lang", None), getattr(task.cfg, "target_lang", None)
    if not data or not src or not tgt:
        return
    for path in str(data).split(os.pathsep):
        for lang, dictionary in ((src, task.source_dictionary), (tgt, task.target_dictionary)):
            for bin_path in sorted(glob.glob(os.path.join(path, f"*.{src}-{tgt}.{lang}.bin"))):
                try:
                    largest = _max_token_id(bin_path)
                except (OSError, ValueError):
                    continue  # not a fairseq mmap dataset: leave it to fairseq
                if largest is not None and largest >= len(dictionary):
                    raise OutlayersConfigError(
                        f"{bin_path} holds token id {largest} but {os.path.join(path, f'dict.{lang}.txt')} has only "
                        f"{len(dictionary)} entries: that dictionary does not belong to this binarised data; "
                        "restore the dictionary written by fairseq-preprocess or re-run fairseq-preprocess"
                    )
