"""Faults that used to end in a raw traceback or a wrong success, each now one line before any expensive work:
--fp16 without CUDA, an unwritable --save-dir, a data directory without a training split, a --model-overrides that
changes the model, a refused or NaN checkpoint (every decoding entry point), a misspelt ledger. And a disk that
fills up while a checkpoint, or any file the package writes, is written: the last good file stays, one line.

Most checks run the entry point in this process (the check comes before fairseq loads anything); one tiny model is
trained once for the module, and two short runs fill the disk while a checkpoint is saved or copied."""
import errno
import io
import os
import sys

import pytest
import torch

from harness import REPO, TINY_TRANSFORMER, load_script, run, train, train_args

from fairseq_outlayers.errors import PREFIX


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch /tmp/outlayers-pwned-faults",))


@pytest.fixture(scope="module")
def checkpoints(tiny_bin, tmp_path_factory):
    """A tied model with an output bias after 2 updates, a copy whose bias holds a NaN, and a crafted pickle."""
    folder = tmp_path_factory.mktemp("faults")
    train(tiny_bin, str(folder / "good"), extra=["--output-layer", "tied", "--output-bias"], max_update=2)
    good = str(folder / "good" / "checkpoint_last.pt")
    state = torch.load(good, map_location="cpu")
    state["model"]["decoder.output_projection.bias"][3] = float("nan")
    torch.save(state, str(folder / "nan.pt"))
    torch.save({"model": {}, "cfg": {}, "payload": _RunsCode()}, str(folder / "crafted.pt"))
    return {"good": good, "nan": str(folder / "nan.pt"), "crafted": str(folder / "crafted.pt"), "dir": folder}


NAN_LINE = ("tensor 'decoder.output_projection.bias' holds 1 NaN or infinite value(s) of {v}; training diverged "
            "before this save: use an earlier checkpoint of the run")
REFUSED_LINE = "was refused and nothing in it was run: its pickle asks for 'posix.system'"


def _one_line(capsys):
    """The one line a command printed on standard error (fairseq's INFO logging aside)."""
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip() and " | INFO | " not in x and not x.startswith("INFO:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _entry(monkeypatch, capsys, func, argv, code=1):
    """Run a wrappers.py entry point with ``argv``; its one line on standard error."""
    monkeypatch.setattr(sys, "argv", ["outlayers"] + list(argv))
    with pytest.raises(SystemExit) as e:
        func()
    assert e.value.code == code
    return _one_line(capsys)


# ---- outlayers-train ---------------------------------------------------------------------------------------------

def _train_argv(tiny_bin, save_dir, extra=()):
    return train_args(tiny_bin, save_dir, TINY_TRANSFORMER, ["--output-layer", "tied"] + list(extra), max_update=1)


@pytest.mark.parametrize("cpu", [True, False], ids=["cpu-given", "no-cuda"])
def test_fp16_without_cuda_is_one_line(tiny_bin, tmp_path, monkeypatch, capsys, cpu):
    from fairseq_outlayers.tools import wrappers

    if not cpu:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = [a for a in _train_argv(tiny_bin, str(tmp_path / "ckpt"), ["--fp16"]) if cpu or a != "--cpu"]
    line = _entry(monkeypatch, capsys, wrappers.train, argv)
    where = "--cpu was given" if cpu else "torch here sees no CUDA GPU"
    assert line == (f"{PREFIX}--fp16 needs a CUDA GPU, and {where}; drop --fp16 to train in float32, or use --bf16, "
                    "which also trains on the CPU")
    assert not os.path.exists(tmp_path / "ckpt")  # refused before fairseq made the save directory


def test_unwritable_save_dir_is_one_line(tiny_bin, tmp_path, monkeypatch, capsys):
    from fairseq_outlayers import outfiles
    from fairseq_outlayers.tools import wrappers

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = _entry(monkeypatch, capsys, wrappers.train, _train_argv(tiny_bin, str(blocker / "ckpt")))
    assert line == f"{PREFIX}--save-dir '{blocker}/ckpt': cannot create it (Not a directory); choose another directory"
    # a folder the user may not write: chmod where that binds (not for root), else the error the system gives
    locked = tmp_path / "locked"
    locked.mkdir()
    if os.geteuid() != 0:
        locked.chmod(0o500)
    else:
        def refuse(path, *a, **k):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

        monkeypatch.setattr(outfiles.os, "makedirs", refuse)
    try:
        line = _entry(monkeypatch, capsys, wrappers.train, _train_argv(tiny_bin, str(locked / "ckpt")))
    finally:
        locked.chmod(0o700)
    assert line == (f"{PREFIX}--save-dir '{locked}/ckpt': cannot create it (Permission denied); choose another "
                    "directory")


def _disk_full_driver(mode):
    """A Python program that runs outlayers-train with the disk filling up half-way through a checkpoint write:
    ``save`` (fairseq's torch.save of the checkpoint) or ``copy`` (its copy of it to checkpoint_last.pt)."""
    return f'''
import errno, io, os, shutil, sys, time
import torch
real_save, real_copy = torch.save, shutil.copyfile
def full(f, data):
    f.write(data[: len(data) // 2])
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
def save(obj, f, *a, **k):
    buf = io.BytesIO()
    real_save(obj, buf, *a, **k)
    full(f, buf.getvalue())
def copy(src, dst, *a, **k):
    if "checkpoint_last" not in os.path.basename(dst):
        return real_copy(src, dst, *a, **k)
    with open(src, "rb") as s, open(dst, "wb") as d:
        full(d, s.read())
if {mode!r} == "save":
    torch.save = save
else:
    shutil.copyfile = copy
time.sleep = lambda seconds: None  # fairseq retries a failed save twice, 2.5 s apart
sys.argv = ["outlayers-train"] + sys.argv[1:]
from fairseq_outlayers.tools.wrappers import train
train()
'''


@pytest.mark.parametrize("mode", ["save", "copy"])
def test_disk_full_during_a_checkpoint_write_keeps_the_last_one(tiny_bin, tmp_path, mode):
    """A run of 2 updates, then the same run to 4 updates on a disk that fills up while fairseq writes the new
    checkpoint (``save``) or copies it to checkpoint_last.pt (``copy``): one line, checkpoint_last.pt is the one of
    update 2 (bytes unchanged, loadable), no partial file is left, and the same command then resumes."""
    save = str(tmp_path / "ckpt")
    extra = ["--output-layer", "tied"] + (["--save-interval-updates", "4"] if mode == "copy" else [])
    train(tiny_bin, save, extra=extra, max_update=2, cli="outlayers-train")
    last = os.path.join(save, "checkpoint_last.pt")
    with open(last, "rb") as f:
        before = f.read()
    argv = train_args(tiny_bin, save, TINY_TRANSFORMER, extra, max_update=4)
    proc = run([sys.executable, "-c", _disk_full_driver(mode)] + argv, check=False)
    lines = [x for x in proc.stderr.splitlines() if x.startswith(PREFIX)]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    name = "checkpoint_last.pt" if mode == "copy" else "checkpoint_best.pt"  # the first file fairseq writes
    assert lines == [f"{PREFIX}could not write checkpoint '{save}/{name}' (No space left on device); the "
                     f"checkpoints saved before are intact: free space in '{save}' (or give another --save-dir) and "
                     "run the same command again to resume from checkpoint_last.pt"], proc.stderr[-3000:]
    with open(last, "rb") as f:
        assert f.read() == before
    from fairseq_outlayers.core.checkpoint_safety import read

    assert read(last)["optimizer_history"][-1]["num_updates"] == 2
    assert not [n for n in os.listdir(save) if n.endswith(".tmp")], os.listdir(save)
    if mode == "copy":  # with space again, the same command resumes from update 2
        proc = train(tiny_bin, save, extra=extra, max_update=4, cli="outlayers-train")
        assert "Loaded checkpoint" in proc.stdout + proc.stderr
        assert read(last)["optimizer_history"][-1]["num_updates"] == 4


def test_a_refused_checkpoint_last_is_not_called_a_broken_copy(tmp_path, checkpoints):
    from fairseq_outlayers.tools.resume import restore_args

    save = tmp_path / "ckpt"
    save.mkdir()
    with open(checkpoints["crafted"], "rb") as f:
        (save / "checkpoint_last.pt").write_bytes(f.read())
    with open(checkpoints["good"], "rb") as f:
        (save / "checkpoint_2.pt").write_bytes(f.read())  # intact, but a tampered last is not to be skipped
    with pytest.raises(SystemExit) as e:
        restore_args(["data", "--save-dir", str(save)])
    message = str(e.value.code)
    assert message.startswith(f"fairseq_outlayers: error: checkpoint '{save}/checkpoint_last.pt' {REFUSED_LINE}")
    assert "interrupted" not in message and "\n" not in message
    assert not os.path.exists("/tmp/outlayers-pwned-faults")


# ---- decoding ----------------------------------------------------------------------------------------------------

def test_nan_weights_are_refused_naming_the_tensor(tiny_bin, checkpoints, monkeypatch, capsys):
    from fairseq_outlayers.tools import wrappers

    vocab = torch.load(checkpoints["good"], map_location="cpu")["model"]["decoder.output_projection.bias"].numel()
    expected = f"{PREFIX}checkpoint '{checkpoints['nan']}': {NAN_LINE.format(v=vocab)}"
    for func in (wrappers.generate, wrappers.validate, wrappers.interactive):
        line = _entry(monkeypatch, capsys, func, [tiny_bin, "--path", checkpoints["nan"], "--cpu"])
        assert line.startswith(expected), (func.__name__, line)
    # an ensemble: the bad one of the two is named
    line = _entry(monkeypatch, capsys, wrappers.generate,
                  [tiny_bin, "--path", checkpoints["good"] + ":" + checkpoints["nan"], "--cpu"])
    assert line.startswith(expected)


def test_model_overrides_that_change_the_model_are_one_line(tiny_bin, checkpoints, monkeypatch, capsys):
    from fairseq_outlayers.tools import wrappers

    line = _entry(monkeypatch, capsys, wrappers.generate, [
        tiny_bin, "--path", checkpoints["good"], "--cpu", "--model-overrides", "{'output_layer': 'joint'}"])
    assert line.startswith(f"{PREFIX}checkpoint '{checkpoints['good']}' does not fit the model its options build "
                           "(weights: 4 missing (e.g. decoder.output_projection.out_proj.weight)")
    assert line.endswith("drop output_layer='joint' (trained with 'tied') from --model-overrides: it changes the "
                         "model, not only its decoding")


@pytest.mark.parametrize("kind", ["crafted", "nan"])
def test_every_scoring_path_says_why_a_checkpoint_is_refused(tiny_bin, tiny_raw, checkpoints, tmp_path, capsys,
                                                              kind):
    """tune_continuous_decoding.py, translate, score_raw and evaluate.sh's preflight: the package's line, before
    any decoding, not fairseq-generate's last line of torch's boilerplate."""
    from fairseq_outlayers.tools import translate
    from fairseq_outlayers.tools.evaluation import preflight, score_raw

    ckpt = checkpoints[kind]
    vocab = torch.load(checkpoints["good"], map_location="cpu")["model"]["decoder.output_projection.bias"].numel()
    why = REFUSED_LINE if kind == "crafted" else NAN_LINE.format(v=vocab)
    ref, src = os.path.join(tiny_raw, "valid.en"), os.path.join(tiny_raw, "valid.de")
    tune = load_script("tune_continuous_decoding.py")
    with pytest.raises(SystemExit) as e:
        tune.main(["--checkpoint", ckpt, "--data-bin", tiny_bin, "--raw-ref", ref, "-o", str(tmp_path / "t.json")])
    assert e.value.code == 1 and why in _one_line(capsys)
    assert translate.main(["--checkpoint", ckpt, "--data", tiny_bin, "--input", src,
                           "--output", str(tmp_path / "out.en")]) == 2
    assert why in _one_line(capsys)
    assert score_raw.main(["--checkpoint", ckpt, "--data", tiny_bin, "--test-set", f"v={src},{ref}",
                           "--out", str(tmp_path / "raw")]) == 2
    assert why in _one_line(capsys)
    assert preflight.main(["--data", tiny_bin, "--out", str(tmp_path / "eval"), "--checkpoint", ckpt]) == 1
    assert why in _one_line(capsys)
    assert not os.path.exists("/tmp/outlayers-pwned-faults")
    assert sorted(os.listdir(tmp_path)) == []  # nothing written


def test_a_failed_generate_is_reported_by_its_reason():
    from fairseq_outlayers.tools.evaluation.scoring import failure_line

    boilerplate = ("Traceback (most recent call last):\n  File \"x.py\", line 1\n_pickle.UnpicklingError: Weights "
                   "only load failed.\n\tWeightsUnpickler error: Unsupported global\n\nCheck the documentation of "
                   "torch.load to learn more\n")
    assert failure_line(boilerplate) == "_pickle.UnpicklingError: Weights only load failed."
    assert failure_line("INFO x\nfairseq_outlayers: error: checkpoint 'c.pt' was refused\n") == \
        "checkpoint 'c.pt' was refused"
    assert failure_line("") == ""


# ---- data and files ----------------------------------------------------------------------------------------------

def test_fit_bias_on_a_folder_without_a_train_split(tiny_bin, checkpoints, tmp_path, capsys):
    from fairseq_outlayers.tools.fit_bias import main

    dicts = tmp_path / "dicts"
    dicts.mkdir()
    for name in ("dict.de.txt", "dict.en.txt"):
        with open(os.path.join(tiny_bin, name)) as f:
            (dicts / name).write_text(f.read())
    with pytest.raises(SystemExit) as e:
        main([checkpoints["good"], "--out", str(tmp_path / "new.pt"), "--data", str(dicts)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert (f"error: --data '{dicts}' has no binarised train or valid split (train.SRC-TGT.*.idx/.bin); the bias is "
            "fitted on the training split") in err and "Traceback" not in err
    assert not os.path.exists(tmp_path / "new.pt")


def test_ledger_render_of_a_missing_ledger_creates_nothing(tmp_path, capsys):
    from fairseq_outlayers.lab.ledger.__main__ import main

    missing = tmp_path / "MISSING"
    assert main(["render", "--ledger", str(missing), "--out", str(missing / "x.md")]) == 2
    assert _one_line(capsys) == (f"ledger: error: --ledger '{missing}' does not exist; give the folder of the records "
                                 "that 'ledger run' wrote (default docs/results/runs)")
    assert not os.path.exists(missing)


class _FillsUp(io.TextIOWrapper):
    """A text file whose disk is full after ``room`` characters."""
    room = 200

    def write(self, text):
        left = self.room - getattr(self, "_written", 0)
        if len(text) > left:
            super().write(text[:left])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._written = getattr(self, "_written", 0) + len(text)
        return super().write(text)


def test_disk_full_during_a_vector_export_keeps_the_old_file(checkpoints, tmp_path, monkeypatch, capsys):
    from fairseq_outlayers import outfiles
    from fairseq_outlayers.tools.vectors import main

    out = tmp_path / "vectors.vec"
    out.write_text("2 1\na 1\nb 2\n")
    real = os.fdopen

    def fdopen(fd, mode="r", *a, **k):
        f = real(fd, mode.replace("b", "") + "b" if "b" not in mode else mode)
        return f if "b" in mode else _FillsUp(f, encoding=k.get("encoding") or "utf-8")

    monkeypatch.setattr(outfiles.os, "fdopen", fdopen)
    assert main(["export", checkpoints["good"], str(out), "--force"]) == 1
    assert _one_line(capsys) == (f"fairseq_outlayers: error: could not write '{out}' (No space left on device); it is "
                                 f"left as it was: free space in '{tmp_path}' (or choose another path) and run again")
    assert out.read_text() == "2 1\na 1\nb 2\n" and os.listdir(tmp_path) == ["vectors.vec"]


# ---- imports -----------------------------------------------------------------------------------------------------

def test_the_error_modules_import_nothing_of_the_package():
    """errors.py imports no module of the package (the circle test of the whole package: tests/test_import_graph.py)."""
    from test_import_graph import import_graph

    assert import_graph()["fairseq_outlayers.errors"] == set()
