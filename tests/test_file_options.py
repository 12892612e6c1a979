"""An option declared with ``Option(..., file=...)``, on a layer registered from outside the package: a new run
records its file's fingerprint, a resume with the same file passes, and a resume with another file is refused in one
line naming both files and what the checkpoint keeps (allowed with --outlayers-allow-mismatch, which keeps the
checkpoint's)."""
import argparse
import hashlib
import os

import pytest
import torch

from fairseq_outlayers import fingerprints
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.models import seam_checks
from fairseq_outlayers.models.registry import Option, register_output_layer, unregister_output_layer

NAME = "file-test-layer"


@pytest.fixture
def file_layer():
    options = (Option("--file-test-table", None, metavar="FILE", help="a table", file="its test table"),)
    register_output_layer(NAME, help="reads a file", options=options, export="a test layer")(
        lambda *args, **kwargs: None)
    yield
    unregister_output_layer(NAME)


def run_args(table, save, **more):
    return argparse.Namespace(output_layer=NAME, embeddings="standard", output_bias=False, file_test_table=table,
                              save_dir=save, restore_file="checkpoint_last.pt", **more)


def test_a_file_option_is_fingerprinted_and_checked_at_resume(file_layer, tmp_path):
    table, other, save = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "ckpt"
    table.write_text("a\n")
    other.write_text("b\n")
    save.mkdir()
    first = run_args(str(table), str(save))
    seam_checks.check_resume(first)  # a new run: nothing to resume from
    theirs = {"sha256": hashlib.sha256(b"a\n").hexdigest(), "path": os.path.abspath(table)}
    assert fingerprints.recorded(first) == {"file_test_table": theirs}
    torch.save({"cfg": {"model": first}}, save / "checkpoint_last.pt")

    seam_checks.check_resume(run_args(str(table), str(save)))  # the same file: resumes
    with pytest.raises(OutlayersConfigError) as refused:
        seam_checks.check_resume(run_args(str(other), str(save)))
    message = str(refused.value)
    assert message.startswith(f"--file-test-table {other} (sha256 ") and "\n" not in message
    assert f"differs from the one {save}/checkpoint_last.pt was trained with, {table} (sha256" in message
    assert "the checkpoint would keep its test table" in message

    allowed = run_args(str(other), str(save), outlayers_allow_mismatch=True)
    seam_checks.check_resume(allowed)
    assert fingerprints.recorded(allowed)["file_test_table"] == theirs  # the checkpoint's table from now on
