"""``outlayers-export`` never deletes a user's data and ends every mistake in one line.

Every input the export reads (the checkpoint, its folder, ``--data``, the data folder recorded in the checkpoint) is
protected from OUT and ``--force``; a full disk, an immutable OUT, a broken ``ctranslate2`` and a bad OUT or
``--data`` are one line each and write nothing; ``--force`` leaves the old or the new OUT at every instant, and a
next run names what an interrupted one left. The tiny models are trained on a copy of the data in the test's own
folder, so that a failure here could never delete the shared fixtures.
"""
import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from fairseq_outlayers import outfiles
from fairseq_outlayers.errors import ExportRefused, OutlayersConfigError
from fairseq_outlayers.tools import export as exporter
from harness import TINY_TRANSFORMER, run, tool, train, train_args

PREFIX = "fairseq_outlayers: error: "


def _cli(*argv, cwd=None):
    proc = run([tool("outlayers-export"), *argv], check=False, cwd=cwd)
    return proc.returncode, proc.stderr.strip().splitlines()


def _listing(folder):
    """{relative path: size} of every file under ``folder``."""
    found = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder)] = os.path.getsize(path)
    return found


@pytest.fixture(scope="module")
def own_data(tiny_bin, tmp_path_factory):
    """(checkpoint, data folder it records): a tiny tied model trained on a copy of the data."""
    root = tmp_path_factory.mktemp("own")
    data = str(root / "data" / "data-bin")  # the folder above holds the data, not the checkpoint
    shutil.copytree(tiny_bin, data)
    save = str(root / "ck")
    train(data, save, extra=["--output-layer", "tied"], max_update=2)
    return os.path.join(save, "checkpoint_last.pt"), data


@pytest.fixture(scope="module")
def bias_checkpoint(tiny_bin, tmp_path_factory):
    save = str(tmp_path_factory.mktemp("bias"))
    train(tiny_bin, save, extra=["--output-layer", "softmax", "--output-bias"], max_update=2)
    return os.path.join(save, "checkpoint_last.pt")


# -- the inputs ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["data", "above", "link", "inside"])
def test_the_recorded_data_folder_is_protected_without_data(own_data, where, tmp_path):
    """Without --data the export reads the data folder the checkpoint records: OUT may not be it, hold it (the
    folder above), reach it through a link, nor lie inside it, even with --force."""
    checkpoint, data = own_data
    before = _listing(data)
    out = {"data": data, "above": os.path.dirname(data), "inside": os.path.join(data, "serve")}.get(where)
    if where == "link":
        out = str(tmp_path / "link")
        os.symlink(data, out)
    code, lines = _cli(checkpoint, out, "--to", "fairseq", "--force")
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(PREFIX + f"OUT '{out}' is, holds or lies inside an input of this export")
    assert f"(the data folder recorded in the checkpoint '{data}')" in lines[0], lines[0]
    assert _listing(data) == before and os.path.isfile(checkpoint)


def test_recorded_inputs_name_every_data_folder_and_file():
    state = {"cfg": {"task": {"data": "a:b"}, "model": {"target_vectors": "v.vec"}}}
    found = exporter.recorded_inputs(state, None)
    assert ("the data folder recorded in the checkpoint", "a", True) in found
    assert ("the data folder recorded in the checkpoint", "b", True) in found
    assert ("the file of --target-vectors recorded in the checkpoint", "v.vec", False) in found
    assert not [f for f in exporter.recorded_inputs(state, "given") if f[2]]  # --data replaces the recorded one


def test_out_may_lie_beside_the_checkpoint(own_data, tmp_path):
    """OUT inside the checkpoint's folder (checkpoints/NAME/serve) is allowed; the checkpoint's folder itself is
    not."""
    checkpoint, _ = own_data
    folder = os.path.dirname(checkpoint)
    code, lines = _cli(checkpoint, folder, "--to", "fairseq", "--force")
    assert code == 1 and "is, holds or lies inside an input of this export (the checkpoint" in lines[-1], lines
    out = os.path.join(folder, "serve")
    try:
        code, lines = _cli(checkpoint, out, "--to", "fairseq")
        assert code == 0, lines
        assert sorted(os.listdir(out)) == ["dict.de.txt", "dict.en.txt", "model.pt"]
    finally:
        shutil.rmtree(out, ignore_errors=True)


# -- one line each -----------------------------------------------------------------------------------------------
def test_an_empty_out_is_one_line(own_data):
    code, lines = _cli(own_data[0], "", "--to", "fairseq")
    assert code == 1 and lines == [PREFIX + "OUT is empty; give the directory to write, e.g. serve/model"]


@pytest.mark.parametrize("out", [".", ".."])
def test_the_current_directory_as_out_is_one_line(own_data, out, tmp_path):
    work = tmp_path / "here"
    work.mkdir()
    (work / "mine.txt").write_text("keep")
    code, lines = _cli(own_data[0], out, "--to", "fairseq", "--force", cwd=str(work))
    assert code == 1 and lines == [PREFIX + f"OUT '{out}' is the current directory or holds it; give a new "
                                   "directory for the export, e.g. serve/model"]
    assert (work / "mine.txt").read_text() == "keep" and os.listdir(work) == ["mine.txt"]


def test_a_file_as_data_is_one_line(own_data, tmp_path):
    checkpoint, data = own_data
    given = os.path.join(data, "dict.de.txt")
    code, lines = _cli(checkpoint, str(tmp_path / "out"), "--to", "fairseq", "--data", given)
    assert code == 1 and lines == [PREFIX + f"--data '{given}' is not a directory; give the data directory that "
                                   "holds the dictionaries (dict.SRC.txt, dict.TGT.txt)"]
    assert os.listdir(tmp_path) == []


def test_a_stock_fairseq_checkpoint_is_refused_in_one_line(tiny_bin, tmp_path):
    """A checkpoint of stock fairseq's transformer (no --user-dir) reaches the "not one of this package's models"
    line."""
    save = str(tmp_path / "stock")
    run([tool("fairseq-train")] + train_args(tiny_bin, save, ["--arch", "transformer"] + TINY_TRANSFORMER[2:],
                                             max_update=1, user_dir=None))
    code, lines = _cli(os.path.join(save, "checkpoint_last.pt"), str(tmp_path / "out"), "--to", "fairseq")
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(PREFIX + "the model is a TransformerModel, not one of this package's")
    assert sorted(os.listdir(tmp_path)) == ["stock"]


class _BrokenLibrary:
    """A meta-path finder under which importing ctranslate2 raises OSError, as a broken shared library does."""

    def find_spec(self, name, path=None, target=None):
        if name == "ctranslate2" or name.startswith("ctranslate2."):
            raise OSError("libctranslate2.so.4: cannot open shared object file: No such file or directory")
        return None


def test_a_ctranslate2_that_does_not_load_is_one_line(own_data, tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "ctranslate2" or m.startswith("ctranslate2.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_BrokenLibrary()] + sys.meta_path)
    with pytest.raises(OutlayersConfigError) as refused:
        exporter.export(own_data[0], str(tmp_path / "out"), "ctranslate2")
    assert str(refused.value) == ("--to ctranslate2: the ctranslate2 package does not load (libctranslate2.so.4: "
                                  "cannot open shared object file: No such file or directory); reinstall it: pip "
                                  "install --force-reinstall ctranslate2")
    assert os.listdir(tmp_path) == []


#: exports in a new Python whose files may not grow past a few kilobytes: the disk is "full" for them; prints the
#: exit status of each argv of the JSON list
FULL_DISK = r"""
import json, resource, signal, sys
from fairseq_outlayers.tools.export import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
codes = []
for argv in json.loads(sys.argv[1]):
    try:
        codes.append(main(argv))
    except SystemExit as e:
        codes.append(e.code)
print(json.dumps(codes))
"""


def test_a_full_disk_is_one_line_and_keeps_the_old_out(own_data, tmp_path):
    """Both targets, each over an existing OUT with --force, in one new Python."""
    outs = {to: tmp_path / to for to in ("fairseq", "ctranslate2")}
    for out in outs.values():
        out.mkdir()
        (out / "mine.txt").write_text("the old export")
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    runs = [[own_data[0], str(out), "--to", to, "--force"] for to, out in outs.items()]
    proc = subprocess.run([sys.executable, "-c", FULL_DISK, json.dumps(runs)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [1, 1], proc.stdout[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith(PREFIX)]
    assert lines == [PREFIX + f"could not write '{out}' (File too large); OUT is not written, the old one is left as "
                     f"it was: free space in '{tmp_path}' (or choose another path) and run again"
                     for out in outs.values()], proc.stderr[-3000:]
    for out in outs.values():
        assert os.listdir(out) == ["mine.txt"] and (out / "mine.txt").read_text() == "the old export"
    assert sorted(os.listdir(tmp_path)) == ["ctranslate2", "fairseq"]  # no work folder left


def test_an_immutable_out_is_one_line(own_data, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    if subprocess.run(["chattr", "+i", str(out)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i needs root and a file system with attributes")
    try:
        code, lines = _cli(own_data[0], str(out), "--to", "fairseq", "--force")
    finally:
        subprocess.run(["chattr", "-i", str(out)], check=True)
    assert code == 1 and lines == [PREFIX + f"could not write OUT '{out}' (Operation not permitted); OUT is not "
                                   f"written, the old one is left as it was: check the permissions of '{out}' "
                                   "(chmod, chattr -i) or choose another path"]
    assert os.listdir(out) == ["mine.txt"] and sorted(os.listdir(tmp_path)) == ["out"]


# -- replacing OUT ----------------------------------------------------------------------------------------------
def test_outputs_get_the_users_file_mode(own_data, tmp_path):
    old = os.umask(0o022)
    try:
        out = tmp_path / "out"
        exporter.export(own_data[0], str(out), "fairseq")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o755
    assert {stat.S_IMODE(os.stat(out / name).st_mode) for name in os.listdir(out)} == {0o644}


def test_force_swaps_the_old_out_for_the_new_one(own_data, tmp_path, monkeypatch):
    """With --force OUT is replaced in one step: never missing, the old one gone afterwards."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("old")
    swaps = []
    exchange = outfiles._exchange

    def watched(a, b):
        swaps.append(os.path.basename(b))
        assert os.path.isdir(b)
        return exchange(a, b)

    monkeypatch.setattr(outfiles, "_exchange", watched)
    exporter.export(own_data[0], str(out), "fairseq", force=True)
    assert swaps == ["out"] and sorted(os.listdir(out)) == ["dict.de.txt", "dict.en.txt", "model.pt"]
    assert sorted(os.listdir(tmp_path)) == ["out"]


#: an export whose replacement of OUT is killed between its two renames (a system without the one-step swap)
KILLED = r"""
import os, signal, sys
from fairseq_outlayers import outfiles
from fairseq_outlayers.tools.export import main
outfiles._exchange = lambda a, b: False
renames = []
plain = os.rename
def rename(a, b):
    renames.append(a)
    if len(renames) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    plain(a, b)
os.rename = rename
sys.exit(main(sys.argv[1:]))
"""


def test_a_replacement_killed_midway_is_named_on_the_next_run(own_data, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("old")
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", KILLED, own_data[0], str(out), "--to", "fairseq", "--force"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9, proc.stderr[-3000:]
    assert not out.exists()
    [left] = outfiles.leftovers(str(out))
    assert (tmp_path / left / "old" / "mine.txt").read_text() == "old"
    code, lines = _cli(own_data[0], str(out), "--to", "fairseq", "--force")
    old = os.path.join(left, "old")
    assert code == 1 and lines == [PREFIX + f"OUT '{out}' is missing and its previous version is in '{old}' (an "
                                   f"earlier replacement was interrupted): move it back (mv '{old}' '{out}') or "
                                   f"remove '{left}', then run again"]
    os.rename(old, out)
    code, lines = _cli(own_data[0], str(out), "--to", "fairseq", "--force")
    assert code == 1 and lines == [PREFIX + f"'{left}' holds an unfinished write of OUT '{out}' (a run was "
                                   f"interrupted, or is still running): remove it (rm -r '{left}') and run again"]
    shutil.rmtree(left)
    code, lines = _cli(own_data[0], str(out), "--to", "fairseq", "--force")
    assert code == 0 and sorted(os.listdir(tmp_path)) == ["out"]


def test_missing_folders_above_out_are_removed_on_failure(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    with pytest.raises(OutlayersConfigError, match=rf"^could not write '{out}' \(No space left on device\); OUT is not "
                       r"written: free space in "):
        with outfiles.atomic_dir(str(out)) as new:
            with open(os.path.join(new, "x"), "w") as f:
                f.write("x")
            raise OSError(28, "No space left on device")
    assert os.listdir(tmp_path) == []
    with outfiles.atomic_dir(str(out)) as new:
        with open(os.path.join(new, "x"), "w") as f:
            f.write("x")
    assert os.listdir(out) == ["x"] and os.listdir(out.parent) == ["out"]


def test_an_old_out_that_cannot_be_removed_is_named(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    notes = []
    real_rmtree = shutil.rmtree
    monkeypatch.setattr(outfiles.shutil, "rmtree", lambda path, ignore_errors=False: None)
    with outfiles.atomic_dir(str(out), "OUT", notes) as new:
        with open(os.path.join(new, "new.txt"), "w") as f:
            f.write("new")
    monkeypatch.setattr(outfiles.shutil, "rmtree", real_rmtree)
    [left] = outfiles.leftovers(str(out))
    assert os.listdir(out) == ["new.txt"]
    assert notes == [f"the previous OUT could not be removed: it is in '{left}/old'; remove it (rm -r '{left}')"]
    with pytest.raises(OutlayersConfigError, match=r"holds the previous version of OUT .*, which could not be "
                       r"removed: remove it"):
        outfiles.check_leftovers(str(out))
    assert outfiles.leftovers(str(tmp_path / "ou")) == [] and outfiles.leftovers(str(tmp_path / "o")) == []
    (tmp_path / ".outlayers-out-x-abcdefgh").mkdir()  # the work folder of OUT 'out-x', not of 'out'
    assert outfiles.leftovers(str(out)) == [left]


def test_the_checkpoint_copy_is_the_one_atomic_helper(tmp_path, monkeypatch):
    """fairseq's checkpoint copies (checkpoint_last.pt) go through outfiles.atomic_copy, which flushes the copy to
    the disk before the rename."""
    from fairseq_outlayers.core import fairseq_compat

    source = tmp_path / "a.pt"
    source.write_bytes(b"x" * 100)
    synced = []
    monkeypatch.setattr(outfiles.os, "fsync", lambda fd: synced.append(fd))
    assert fairseq_compat.atomic_copy(str(source), str(tmp_path / "b.pt"))
    assert synced and (tmp_path / "b.pt").read_bytes() == b"x" * 100
    assert not fairseq_compat.atomic_copy(str(source), str(tmp_path / "b.pt"))  # exists, no overwrite


# -- the bias ---------------------------------------------------------------------------------------------------
def test_an_output_bias_is_refused_by_fairseq_and_taken_by_ctranslate2(bias_checkpoint, tmp_path):
    code, lines = _cli(bias_checkpoint, str(tmp_path / "out"), "--to", "fairseq")
    assert code == 1 and lines == [PREFIX + "stock fairseq's Transformer output projection has no bias, and this "
                                   "model's output layer has a per-word one (--output-layer softmax with "
                                   "--output-bias, or the layer's own); export it with --to ctranslate2"]
    assert os.listdir(tmp_path) == []
    report = exporter.export(bias_checkpoint, str(tmp_path / "ct2"), "ctranslate2")
    assert report.startswith(f"wrote {tmp_path / 'ct2'}: a CTranslate2 model of a Transformer")
    assert "model.bin" in os.listdir(tmp_path / "ct2")


def test_the_targets_are_declarations():
    """Each target names the families it takes and its writer; each family its stock twin; the parser's --to and
    the target options come from the table."""
    assert {t.name for t in exporter.TARGETS} == {"fairseq", "ctranslate2"}
    for target in exporter.TARGETS:
        assert callable(target.writer) and set(target.families) <= {f.name for f in exporter.FAMILIES}
    assert {f.name: f.stock for f in exporter.FAMILIES} == {"transformer": "transformer", "lstm": "lstm"}
    help_text = exporter.parser().format_help()
    assert "--quantization" in help_text and "{fairseq,ctranslate2}" in help_text
    with pytest.raises(OutlayersConfigError, match=r"^--quantization is CTranslate2's; it needs --to ctranslate2$"):
        exporter.export("x.pt", "out", "fairseq", quantization="int8")
    with pytest.raises(OutlayersConfigError, match=r"^--to 'onnx' is unknown; choose one of: fairseq, ctranslate2$"):
        exporter.export("x.pt", "out", "onnx")
    with pytest.raises(ExportRefused, match=r"^--to ctranslate2: CTranslate2 converts fairseq Transformers only, "
                       r"not the lstm; use --to fairseq$"):
        exporter._check_family(exporter.get_target("ctranslate2"), exporter.FAMILIES[1])


@pytest.mark.parametrize("export", [None, "", "  ", 3])
def test_a_registration_must_decide_its_export(export):
    """export= is a function or a sentence: a registration without one (or with anything else) is refused when it
    registers, and every registered entry of the package has decided."""
    from fairseq_outlayers.core.registry import (EMBEDDING_REGISTRY, OUTPUT_LAYER_REGISTRY, register_embeddings,
                                                   register_output_layer)

    flags = {} if export is None else {"export": export}
    for register, registry, kind in ((register_output_layer, OUTPUT_LAYER_REGISTRY, "output layer"),
                                     (register_embeddings, EMBEDDING_REGISTRY, "embeddings")):
        with pytest.raises(ValueError, match=rf"^{kind} 'undecided' must declare export=: a function of the built "
                           r"module .* or a sentence saying why it cannot export$"):
            register("undecided", help="x", **flags)(lambda *args, **kwargs: None)
        assert "undecided" not in registry
        for name, spec in registry.items():
            assert callable(spec.export) or (isinstance(spec.export, str) and spec.export.strip()), name


def test_what_ctranslate2_cannot_hold_is_one_line(tiny_bin, tmp_path):
    """CTranslate2's converter lists what its Transformer cannot hold (here the activation): one line, nothing
    written."""
    save = str(tmp_path / "ck")
    train(tiny_bin, save, arch_args=TINY_TRANSFORMER + ["--activation-fn", "tanh"], extra=["--output-layer", "tied"],
          max_update=1)
    code, lines = _cli(os.path.join(save, "checkpoint_last.pt"), str(tmp_path / "out"), "--to", "ctranslate2")
    assert code == 1 and lines[-1].startswith(PREFIX + "--to ctranslate2: CTranslate2 cannot hold this model "
                                              "(Option --activation-fn tanh is not supported"), lines
    assert lines[-1].endswith("); use --to fairseq")  # CTranslate2's list of its activations in between
    assert sorted(os.listdir(tmp_path)) == ["ck"]
