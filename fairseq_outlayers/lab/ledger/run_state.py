"""What a ledger run's folder holds now: a checkpoint's progress (``checkpoint_state``), and the lock that keeps one
training or export at a time in a run folder (``locked``). The runner, its decodes and its teachers share them."""
import contextlib
import fcntl
import os
from typing import Dict


def checkpoint_state(path: str) -> Dict:
    """Completed epochs, updates, fairseq's cumulative training time and the best validation value saved in a
    checkpoint (fairseq saves the iterator of the next epoch, position 0, at the end of an epoch)."""
    import torch

    import fairseq_outlayers.models  # noqa: F401  (allow-lists what fairseq checkpoints hold for weights-only loading)

    state = torch.load(path, map_location="cpu", weights_only=True)
    extra = state.get("extra_state") or {}
    iterator = extra.get("train_iterator") or {}
    epoch = iterator.get("epoch", 1) - (0 if iterator.get("iterations_in_epoch") else 1)
    return {"epoch": epoch,
            "updates": state["optimizer_history"][-1]["num_updates"],
            "training_seconds": round(extra.get("previous_training_time", 0.0), 1),
            "best": extra.get("best")}


@contextlib.contextmanager
def locked(run_dir: str, name: str = ".lock"):
    """Hold ``run_dir``'s lock: one training at a time in a run directory (a row and the step rows ``from`` it,
    or two ``ledger run`` calls, may reach the same seed at once: the second waits, then finds it trained)."""
    with open(os.path.join(run_dir, name), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
