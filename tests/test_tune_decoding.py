"""scripts/tune_continuous_decoding.py: the beam-search score scale of a continuous model, chosen on validation."""
import json
import os
import shutil

import numpy as np
import pytest
from fairseq.data import Dictionary

from harness import TINY_TRANSFORMER, train, load_script

pytestmark = pytest.mark.usefixtures("commands_in_process")  # the script's fairseq-generate runs


@pytest.fixture(scope="module")
def tune():
    return load_script("tune_continuous_decoding.py")


@pytest.fixture(scope="module")
def vmf_checkpoint(tiny_bin, tmp_path_factory):
    d = Dictionary.load(os.path.join(tiny_bin, "dict.en.txt"))
    rng = np.random.default_rng(0)
    tmp = tmp_path_factory.mktemp("tune")
    vec = tmp / "en.vec"
    words = [w for w in d.symbols[d.nspecial:] if not w.startswith("madeupword")]
    with open(vec, "w") as f:
        f.write(f"{len(words)} 8\n")
        for w in words:
            f.write(w + " " + " ".join(f"{x:.5f}" for x in rng.standard_normal(8)) + "\n")
    save = str(tmp / "ckpt")
    train(tiny_bin, save, TINY_TRANSFORMER, ["--output-layer", "continuous", "--target-vectors", str(vec),
                                            "--criterion", "vmf_nll", "--lr", "0.005"], max_update=20)
    return os.path.join(save, "checkpoint_last.pt")


def test_scale_does_not_change_nearest_neighbour_decoding(tune, tiny_raw, tiny_bin, vmf_checkpoint, tmp_path):
    """At beam 1 every scale picks the nearest neighbour of ê, so every row has the same BLEU; the JSON names
    the best row and the subset it was tuned on."""
    out = tmp_path / "tune.json"
    assert tune.main(["--checkpoint", vmf_checkpoint, "--data-bin", tiny_bin, "--raw-ref",
                      os.path.join(tiny_raw, "valid.en"), "--beam", "1", "--scales", "none", "0.5", "30",
                      "-o", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["subset"] == "valid" and [r["scale"] for r in result["rows"]] == [None, 0.5, 30.0]
    assert len({r["bleu"] for r in result["rows"]}) == 1
    assert result["best"] == result["rows"][0]


def test_refuses_test_data_bad_scales_and_existing_output(tune, tiny_raw, tiny_bin, vmf_checkpoint, tmp_path,
                                                          capsys):
    base = ["--checkpoint", vmf_checkpoint, "--data-bin", tiny_bin, "--raw-ref", os.path.join(tiny_raw, "valid.en")]
    for extra, message in ((["--subset", "test", "-o", str(tmp_path / "a.json")], "never on the test set"),
                           (["--scales", "0", "-o", str(tmp_path / "b.json")], "must be > 0"),
                           (["--scales", "big", "-o", str(tmp_path / "c.json")], "neither 'none' nor a number")):
        with pytest.raises(SystemExit):
            tune.main(base + extra)
        assert message in capsys.readouterr().err
    existing = tmp_path / "kept.json"
    existing.write_text("mine")
    with pytest.raises(SystemExit):
        tune.main(base + ["-o", str(existing)])
    assert "--force" in capsys.readouterr().err and existing.read_text() == "mine"
