"""outlayers-fit-bias (python -m fairseq_outlayers fit-bias): the per-word bias fitted on a frozen model is the one
output_bias.fit_bias finds on the same features, it goes into the checkpoint fairseq-generate loads, and bad input
stops before any work with a message naming the argument."""
import json
import os
import subprocess
import sys

import pytest
import torch

from harness import REPO, TINY_TRANSFORMER, train

from fairseq_outlayers.tools.fit_bias import main as fit_bias_main
from fairseq_outlayers.tools.output_bias import BIAS_KEY


@pytest.fixture(scope="module")
def sampled_joint(tiny_bin, tmp_path_factory):
    """A tiny joint model trained with the sampled softmax (the case the step is for)."""
    save = str(tmp_path_factory.mktemp("sampled"))
    train(tiny_bin, save, TINY_TRANSFORMER, ["--output-layer", "joint", "--joint-dim", "16", "--criterion",
                                             "sampled_softmax", "--sample-ratio", "0.5"], max_update=6)
    return os.path.join(save, "checkpoint_last.pt")


def test_the_bias_written_is_the_one_fitted_and_fairseq_builds_it(sampled_joint, tiny_bin, tmp_path, capsys):
    from fairseq_outlayers.tools import output_bias

    out = tmp_path / "joint+bias.pt"
    assert fit_bias_main([sampled_joint, "--out", str(out), "--data", tiny_bin, "--train-sentences", "0",
                          "--epochs", "5", "--lr", "0.1"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["train_sentences"] is None and figures["epochs"] == 5 and figures["lr"] == 0.1
    assert figures["train_nll_bits"]["fitted bias"] < figures["train_nll_bits"]["as trained"]
    # independently: the same features and fit, added to the joint layer's own bias
    model, task, _ = output_bias.load(sampled_joint, tiny_bin)
    feats, targets = output_bias.features(model, task, "train", 4096)
    fitted = output_bias.fit_bias(model.decoder.output_projection, feats, targets, len(task.target_dictionary), 5, 0.1)
    before = torch.load(sampled_joint, map_location="cpu", weights_only=False)["model"][output_bias.BIAS_KEY]
    after = torch.load(out, map_location="cpu", weights_only=False)["model"][output_bias.BIAS_KEY]
    assert torch.equal(after, before + fitted) and fitted.abs().sum() > 0
    assert figures["valid_nll_bits"]["as trained"] == round(
        output_bias.nll_bits(model.decoder.output_projection, *output_bias.features(model, task, "valid", 4096)), 4)
    # fairseq-generate loads it: the model it builds holds the new bias
    reloaded, _, _ = output_bias.load(str(out), tiny_bin)
    assert torch.equal(reloaded.decoder.output_projection.bias.detach(), after)
    # the module entry point is the same command
    res = subprocess.run([sys.executable, "-m", "fairseq_outlayers", "fit-bias", sampled_joint, "--out",
                          str(out)], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2 and "exists; give another name (nothing is overwritten)" in res.stderr


@pytest.mark.parametrize("extra, message", [
    (["--epochs", "0"], "--epochs must be >= 1, not 0"),
    (["--train-sentences", "-1"], "--train-sentences must be >= 0, not -1"),
    (["--lr", "0"], "--lr must be in (0, 10], got 0 (Adam moves each bias"),
    (["--lr", "inf"], "--lr must be in (0, 10], got inf"),
    (["--lr", "nan"], "--lr must be in (0, 10], got nan"),
    (["--data", "nowhere"], "--data 'nowhere' is not a directory"),
    (["--device", "gpu"], "--device must be cpu, cuda or cuda:N, not 'gpu'"),
])
def test_bad_arguments_stop_before_any_work(sampled_joint, tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit):
        fit_bias_main([sampled_joint, "--out", str(tmp_path / "o.pt"), *extra])
    assert message in capsys.readouterr().err and not (tmp_path / "o.pt").exists()


def test_a_missing_checkpoint_and_a_missing_out_directory_are_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        fit_bias_main([str(tmp_path / "none.pt"), "--out", str(tmp_path / "o.pt")])
    assert "none.pt' does not exist" in capsys.readouterr().err
    (tmp_path / "c.pt").write_bytes(b"x")
    with pytest.raises(SystemExit):
        fit_bias_main([str(tmp_path / "c.pt"), "--out", str(tmp_path / "no" / "o.pt")])
    assert "its directory does not exist" in capsys.readouterr().err


def test_a_half_precision_checkpoint_is_fitted_in_float32_and_keeps_its_precision(sampled_joint, tiny_bin,
                                                                                   tmp_path, capsys):
    """A checkpoint whose weights were saved in float16 (as --memory-efficient-fp16 saves them) is fitted in
    float32 on the CPU; the checkpoint written keeps float16, its bias the float32 one rounded."""
    state = torch.load(sampled_joint, map_location="cpu", weights_only=False)
    state["model"] = {k: (v.half() if torch.is_floating_point(v) else v) for k, v in state["model"].items()}
    half = tmp_path / "half.pt"
    torch.save(state, half)
    out = tmp_path / "half+bias.pt"
    assert fit_bias_main([str(half), "--out", str(out), "--data", tiny_bin, "--train-sentences", "0"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["train_nll_bits"]["fitted bias"] < figures["train_nll_bits"]["as trained"]
    written = torch.load(out, map_location="cpu", weights_only=False)["model"]
    assert written[BIAS_KEY].dtype == torch.float16 and not torch.equal(written[BIAS_KEY], state["model"][BIAS_KEY])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message is for a machine without CUDA")
def test_cuda_asked_for_without_a_gpu_is_named(sampled_joint, tmp_path, capsys):
    with pytest.raises(SystemExit):
        fit_bias_main([sampled_joint, "--out", str(tmp_path / "o.pt"), "--device", "cuda"])
    assert "torch sees no CUDA device; use cpu" in capsys.readouterr().err and not (tmp_path / "o.pt").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_gpu_fit_matches_the_cpu_fit(sampled_joint, tiny_bin, tmp_path, capsys):
    """The same fit on the GPU (the default there) and on the CPU: the same figures and bias up to float32
    rounding of a different summation order."""
    written = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / f"{device}.pt"
        assert fit_bias_main([sampled_joint, "--out", str(out), "--data", tiny_bin, "--train-sentences", "0",
                              "--device", device]) == 0
        written[device] = (json.loads(capsys.readouterr().out),
                           torch.load(out, map_location="cpu", weights_only=False)["model"])
    (cpu_figures, cpu_state), (gpu_figures, gpu_state) = written["cpu"], written["cuda"]
    assert gpu_state[BIAS_KEY].device.type == "cpu"
    torch.testing.assert_close(gpu_state[BIAS_KEY], cpu_state[BIAS_KEY], rtol=1e-4, atol=1e-4)
    for split in ("train_nll_bits", "valid_nll_bits"):
        for name in ("as trained", "fitted bias"):
            assert abs(gpu_figures[split][name] - cpu_figures[split][name]) < 2e-3


class _RunsCode:
    """Unpickling this calls os.system: a crafted checkpoint's payload."""

    def __reduce__(self):
        return (os.system, ("touch /tmp/outlayers-pwned-fit",))


@pytest.mark.parametrize("swap", ["crafted", "another model"])
def test_a_checkpoint_replaced_during_the_fit_runs_nothing_and_writes_nothing(sampled_joint, tiny_bin, tmp_path,
                                                                              monkeypatch, capsys, swap):
    """The checkpoint is read again to write --out: a file swapped in while the fit runs is read with the safe
    loader (a crafted pickle is refused, its code never runs), and weights that are not the ones fitted are
    refused too; nothing is written in either case."""
    import shutil

    from fairseq_outlayers.tools import output_bias
    from fairseq_outlayers.core.checkpoint_safety import read

    marker = "/tmp/outlayers-pwned-fit"
    if os.path.exists(marker):
        os.remove(marker)
    path = str(tmp_path / "model.pt")
    shutil.copyfile(sampled_joint, path)
    if swap == "crafted":
        replacement = {"model": {}, "cfg": {}, "payload": _RunsCode()}
        message = "was refused and nothing in it was run: its pickle asks for 'posix.system'"
    else:
        replacement = read(sampled_joint)
        replacement["model"]["decoder.embed_tokens.weight"] = replacement["model"]["decoder.embed_tokens.weight"] + 1
        message = "changed while the bias was fitted"
    real_fit = output_bias.fit_bias

    def replace_then_fit(*args, **kwargs):
        torch.save(replacement, path)
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(output_bias, "fit_bias", replace_then_fit)
    out = tmp_path / "out.pt"
    with pytest.raises(SystemExit):
        fit_bias_main([path, "--out", str(out), "--data", tiny_bin, "--epochs", "1"])
    assert message in capsys.readouterr().err
    assert not os.path.exists(marker) and not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]  # no temporary file left either


def test_an_unwritable_out_directory_is_named_before_the_fit(sampled_joint, tmp_path, monkeypatch, capsys):
    import tempfile

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)  # as in a read-only directory (root ignores chmod)
    with pytest.raises(SystemExit):
        fit_bias_main([sampled_joint, "--out", str(tmp_path / "o.pt")])
    assert "cannot create a file in" in capsys.readouterr().err and not (tmp_path / "o.pt").exists()
