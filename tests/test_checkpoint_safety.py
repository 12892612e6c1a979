"""fairseq checkpoints load under torch's weights-only unpickler; a pickle that would run code is refused."""
import os
import pickle
import sys

import pytest
import torch

from fairseq_outlayers.checkpoint_safety import ALLOWED_GLOBALS
from harness import generate, run, train


class _RunsCode:
    """Unpickling this calls os.system: the classic malicious-checkpoint payload."""

    def __reduce__(self):
        return (os.system, ("touch /tmp/outlayers-pwned",))


def test_checkpoint_needs_only_allow_listed_globals(tiny_bin, tmp_path):
    save = str(tmp_path / "ckpt")
    train(tiny_bin, save, extra=["--output-layer", "tied"], max_update=2)
    path = os.path.join(save, "checkpoint_last.pt")
    # ask a fresh interpreter that has not imported the plugin (this one has already allow-listed the classes)
    probe = run([sys.executable, "-c", "import sys, torch; print('\\n'.join("
                 "torch.serialization.get_unsafe_globals_in_checkpoint(sys.argv[1])))", path])
    needed = set(probe.stdout.split())
    allowed = {f"{c.__module__}.{c.__qualname__}" for c in ALLOWED_GLOBALS}
    assert needed == {"argparse.Namespace"} and needed <= allowed
    # and fairseq-generate loads it with no TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD in the environment (harness.run)
    _, hyps = generate(tiny_bin, path)
    assert len(hyps) == 24


def test_crafted_checkpoint_is_refused(tmp_path):
    marker = "/tmp/outlayers-pwned"
    if os.path.exists(marker):
        os.remove(marker)
    path = str(tmp_path / "evil.pt")
    torch.save({"model": {}, "payload": _RunsCode()}, path)
    with pytest.raises(pickle.UnpicklingError, match="os.system|posix.system|Unsupported global"):
        torch.load(path, map_location="cpu")
    from fairseq import checkpoint_utils

    with pytest.raises(pickle.UnpicklingError):
        checkpoint_utils.load_checkpoint_to_cpu(path)
    assert not os.path.exists(marker)


def test_weights_only_stays_on_globally():
    assert os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD") in (None, "", "0")
    path = os.path.join(os.path.dirname(__file__), "..", "fairseq_outlayers", "checkpoint_safety.py")
    assert "weights_only=False" not in open(path).read()
