"""Files and command-line tools: one-line errors for broken inputs (params, vectors report,
train_target_vectors), header/body checks of vector files, outputs never overwritten without --force and written
atomically (evaluate.sh, shared_private_pca.py, train_target_vectors.py)."""
import os
import subprocess
import sys
import types

import pytest
import torch

from fairseq_outlayers.tools.params import main as params_main
from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.methods.continuous.target_vectors import load_target_table
from fairseq_outlayers.tools.vectors import main as vectors_main

from harness import load_script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script(name):
    return load_script(name)


def _one_line_error(err):
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("INFO")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _dictionary(tmp_path, words=("the", "house", "cat")):
    path = tmp_path / "dict.en.txt"
    path.write_text("".join(f"{w} {10 - k}\n" for k, w in enumerate(words)), encoding="utf-8")
    return str(path)


# ----------------------------------------------------------------------------------------------------------
# the shared helper


def test_check_output_path_cases(tmp_path):
    from fairseq_outlayers.outfiles import check_output_path

    inp = tmp_path / "in.txt"
    inp.write_text("x")
    with pytest.raises(OutlayersConfigError, match="is also an input of this command"):
        check_output_path(str(inp), force=True, inputs=[str(inp)])
    with pytest.raises(OutlayersConfigError, match="exists; choose another path or pass --force"):
        check_output_path(str(inp), force=False)
    check_output_path(str(inp), force=True)
    with pytest.raises(OutlayersConfigError, match="is a directory"):
        check_output_path(str(tmp_path), force=True)
    with pytest.raises(OutlayersConfigError, match="is not a directory"):
        check_output_path(str(inp / "out.txt"))
    with pytest.raises(OutlayersConfigError, match="does not exist; create it"):
        check_output_path(str(tmp_path / "missing" / "out.txt"))
    assert os.listdir(tmp_path) == ["in.txt"]  # the writability probe left nothing behind


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path):
    from fairseq_outlayers.outfiles import atomic_write

    path = tmp_path / "out.txt"
    path.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_write(str(path)) as f:
            f.write("half")
            raise RuntimeError("killed")
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["out.txt"]
    with atomic_write(str(path)) as f:
        f.write("new\n")
    assert path.read_text() == "new\n" and os.listdir(tmp_path) == ["out.txt"]


# ----------------------------------------------------------------------------------------------------------
# python -m fairseq_outlayers params


def test_params_on_broken_files_prints_one_line(tmp_path, capsys):
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    text = tmp_path / "notes.pt"
    text.write_text("not a checkpoint\n")
    whole = tmp_path / "whole.pt"
    torch.save({"model": {"w": torch.zeros(20000)}, "cfg": None, "args": None}, str(whole))
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, str(foreign))
    cases = {str(tmp_path / "missing.pt"): "does not exist", str(empty): "is empty (0 bytes)",
             str(text): "cannot be read (UnpicklingError", str(truncated): "cannot be read (",
             str(foreign): "not a fairseq checkpoint", str(tmp_path): "does not exist"}
    import logging

    core = logging.getLogger("fairseq_outlayers.core.build")
    level = core.level
    for path, expected in cases.items():
        assert params_main([path]) == 1, path
        line = _one_line_error(capsys.readouterr().err)
        assert expected in line and path in line, line
        assert core.level == level  # the report's quiet logger is put back: fairseq-train logs its table after
    from fairseq_outlayers.__main__ import main

    assert main(["params", str(truncated)]) == 1
    assert "truncated, damaged or not a .pt file" in _one_line_error(capsys.readouterr().err)


# ----------------------------------------------------------------------------------------------------------
# vectors: report CLI and the header check


@pytest.mark.parametrize("content, expected", [
    (None, "does not exist"),
    (b"the\nhouse 3\n", "cannot be read as a fairseq dictionary"),
    (b"the x\n", "cannot be read as a fairseq dictionary"),
    (b"the 3\nthe 2\n", "cannot be read as a fairseq dictionary"),
    (b"caf\xe9 3\n", ":1: dictionary is not valid UTF-8"),
])
def test_vectors_report_with_bad_dictionary(tmp_path, capsys, content, expected):
    vec = tmp_path / "v.vec"
    vec.write_text("2 3\nthe 1 0 0\nhouse 0 1 0\n")
    d = tmp_path / "dict.en.txt"
    if content is not None:
        d.write_bytes(content)
    assert vectors_main(["report", str(d), str(vec)]) == 1
    line = _one_line_error(capsys.readouterr().err)
    assert expected in line and str(d) in line


@pytest.mark.parametrize("header, body, shown", [
    ("5 3", 3, "the header says 5 vectors of size 3 but the file holds 3 vector lines"),
    ("2 3", 3, "the header says 2 vectors of size 3 but the file holds 3 vector lines"),
])
def test_vector_header_count_mismatch_warns(tmp_path, capsys, header, body, shown):
    from fairseq.data import Dictionary

    vec = tmp_path / "v.vec"
    rows = ["the 1 0 0", "house 0 1 0", "cat 0 0 1"][:body]
    vec.write_text(header + "\n" + "".join(r + "\n" for r in rows))
    table = load_target_table(Dictionary.load(_dictionary(tmp_path)), str(vec))
    assert any(shown in w and str(vec) in w for w in table.report.warnings), table.report.warnings
    assert vectors_main(["report", _dictionary(tmp_path), str(vec)]) == 0
    assert f"warning: {vec}: {shown}" in capsys.readouterr().out
    vec.write_text(f"{body} 3\n" + "".join(r + "\n" for r in rows))  # a correct header: no warning
    assert load_target_table(Dictionary.load(_dictionary(tmp_path)), str(vec)).report.warnings == []


def test_vector_header_with_zero_dim_is_an_error(tmp_path):
    from fairseq.data import Dictionary

    vec = tmp_path / "v.vec"
    vec.write_text("3 0\nthe 1 0 0\n")
    with pytest.raises(OutlayersConfigError, match="line 1: the header 'COUNT DIM' gives DIM = 0"):
        load_target_table(Dictionary.load(_dictionary(tmp_path)), str(vec))


# ----------------------------------------------------------------------------------------------------------
# scripts/train_target_vectors.py: every check before training


@pytest.fixture
def ttv(monkeypatch):
    """The script, with gensim replaced by a stub that fails the test if training starts."""
    def no_training(*args, **kwargs):
        raise AssertionError("training started before the inputs/outputs were checked")

    models = types.ModuleType("gensim.models")
    models.FastText = models.Word2Vec = no_training
    monkeypatch.setitem(sys.modules, "gensim.models", models)
    return _script("train_target_vectors.py")


def _exit_message(main, argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    message = str(e.value.code)
    assert "\n" not in message
    return message


def test_train_target_vectors_checks_before_training(ttv, tmp_path):
    text = tmp_path / "train.en"
    text.write_text("a house\nthe cat\n")
    good = ["--input", str(text)]
    afile = tmp_path / "afile"
    afile.write_text("x")
    msg = _exit_message(ttv.main, good + ["--output", str(afile / "en.vec")])
    assert "is not a directory" in msg and "--output" in msg
    msg = _exit_message(ttv.main, good + ["--output", "/sys/en.vec"])  # not writable, even for root
    assert "cannot create a file in '/sys'" in msg
    msg = _exit_message(ttv.main, good + ["--output", str(tmp_path / "missing" / "en.vec")])
    assert "does not exist; create it" in msg
    msg = _exit_message(ttv.main, good + ["--output", str(text), "--force"])
    assert "is also an input" in msg and text.read_text() == "a house\nthe cat\n"
    latin = tmp_path / "latin1.en"
    latin.write_bytes("a house\nun caf\xe9\n".encode("latin-1"))
    msg = _exit_message(ttv.main, ["--input", str(latin), "--output", str(tmp_path / "v.vec")])
    assert f"{latin}:2: --input is not valid UTF-8" in msg and "iconv" in msg
    empty = tmp_path / "empty.en"
    empty.write_text("\n \n")
    msg = _exit_message(ttv.main, ["--input", str(empty), "--output", str(tmp_path / "v.vec")])
    assert f"--input {empty} is empty (no words)" in msg
    for dim in ("0", "-3"):
        msg = _exit_message(ttv.main, good + ["--output", str(tmp_path / "v.vec"), "--dim", dim])
        assert f"--dim must be at least 1, got {dim}" in msg
    d = tmp_path / "dict.en.txt"
    d.write_bytes(b"caf\xe9 3\n")
    msg = _exit_message(ttv.main, good + ["--output", str(tmp_path / "v.vec"), "--dict", str(d)])
    assert f"{d}:1: --dict is not valid UTF-8" in msg
    assert not os.path.exists(tmp_path / "v.vec")


def test_train_target_vectors_writes_atomically(tmp_path):
    pytest.importorskip("gensim")
    text = tmp_path / "train.en"
    text.write_text("a house is red\nthe cat is black\n" * 20)
    out = tmp_path / "en.vec"
    ttv = _script("train_target_vectors.py")
    assert ttv.main(["--input", str(text), "--output", str(out), "--dim", "4", "--epochs", "1", "--workers", "1"]) == 0
    first = out.read_text()
    assert first.split("\n", 1)[0].split()[1] == "4"
    msg = _exit_message(ttv.main, ["--input", str(text), "--output", str(out), "--dim", "4"])
    assert "exists" in msg and out.read_text() == first
    assert sorted(os.listdir(tmp_path)) == ["en.vec", "train.en"]


def test_train_target_vectors_pins_the_openblas_kernel_only_where_it_can(capsys, monkeypatch):
    """--blas-core sets OPENBLAS_CORETYPE before numpy loads; not over the environment's, not with 'native', not
    once OpenBLAS is loaded (warned), not on a CPU without AVX2/FMA (warned)."""
    ttv = _script("train_target_vectors.py")
    monkeypatch.setattr(ttv, "_cpu_flags", lambda: {"sse2", "avx2", "fma"})
    env = {}
    assert ttv.pin_blas_core("Haswell", env, loaded=set()) == "Haswell (pinned)"
    assert env == {"OPENBLAS_CORETYPE": "Haswell"}
    env = {"OPENBLAS_CORETYPE": "Zen"}
    assert ttv.pin_blas_core("Haswell", env, loaded=set()).startswith("Zen (OPENBLAS_CORETYPE from the environment")
    assert env == {"OPENBLAS_CORETYPE": "Zen"}
    env = {}
    assert ttv.pin_blas_core("native", env, loaded=set()).startswith("OpenBLAS's choice") and env == {}
    assert capsys.readouterr().err == ""
    assert ttv.pin_blas_core("Haswell", env, loaded={"numpy"}).endswith("(loaded before it could be pinned)")
    assert "numpy was loaded before --blas-core Haswell could be set" in capsys.readouterr().err and env == {}
    monkeypatch.setattr(ttv, "_cpu_flags", lambda: {"sse2", "avx"})
    assert ttv.pin_blas_core("Haswell", env, loaded=set()).endswith("(no AVX2/FMA)") and env == {}
    assert "this CPU lacks AVX2/FMA" in capsys.readouterr().err


def test_train_target_vectors_are_made_on_the_pinned_kernel(tmp_path):
    """One worker thread and the pinned kernel: the default run equals OPENBLAS_CORETYPE=Haswell (which wins over
    --blas-core), and another kernel (--blas-core Prescott, SSE3) rounds differently, so the pin is what makes the
    file the same on machines whose OpenBLAS would pick different kernels (AVX-512 here vs AVX2)."""
    pytest.importorskip("gensim")
    ttv = _script("train_target_vectors.py")
    if not {"avx2", "fma"} <= ttv._cpu_flags():
        pytest.skip("the portable kernel needs AVX2 and FMA")
    import random

    rng = random.Random(0)
    words = [f"w{i}" for i in range(200)]
    text = tmp_path / "train.en"
    text.write_text("".join(" ".join(rng.choice(words) for _ in range(10)) + "\n" for _ in range(500)))
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    runs = {"default": ([], {}), "prescott": (["--blas-core", "Prescott"], {}),
            "env": (["--blas-core", "Prescott"], {"OPENBLAS_CORETYPE": "Haswell"})}
    out = {}
    for name, (extra, more_env) in runs.items():
        vec = tmp_path / f"{name}.vec"
        proc = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "train_target_vectors.py"), "--input",
                               str(text), "--output", str(vec), "--dim", "128", "--epochs", "1", "--workers", "1",
                               *extra], capture_output=True, text=True, timeout=300, env=dict(env, **more_env))
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[name] = (vec.read_bytes(), proc.stdout.strip().splitlines()[-1])
    assert out["default"][1].endswith("OpenBLAS kernel Haswell (pinned))")
    assert out["prescott"][1].endswith("OpenBLAS kernel Prescott (pinned))")
    assert out["env"][1].endswith("OpenBLAS kernel Haswell (OPENBLAS_CORETYPE from the environment))")
    assert out["default"][0] == out["env"][0] != out["prescott"][0]


# ----------------------------------------------------------------------------------------------------------
# scripts/evaluate.sh --out and scripts/shared_private_pca.py -o


def _evaluate(*args):
    return subprocess.run(["bash", os.path.join(REPO, "scripts", "evaluate.sh"), *args], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))


@pytest.mark.parametrize("existing", ["generate.out", "hyp.tok", "scores.json", "hyp.detok"])
def test_evaluate_never_overwrites_any_output_without_force(tmp_path, existing):
    ckpt = tmp_path / "checkpoint_best.pt"
    ckpt.write_bytes(b"not used")
    (tmp_path / "data").mkdir()
    out = tmp_path / "eval"
    out.mkdir()
    (out / existing).write_text("earlier result\n")
    proc = _evaluate(str(ckpt), str(tmp_path / "data"), "--out", str(out))
    assert proc.returncode == 1 and f"{out}/{existing} already exists; pass --force" in proc.stderr
    assert "fairseq-generate" not in proc.stdout
    assert (out / existing).read_text() == "earlier result\n"


def test_evaluate_failed_run_with_force_keeps_earlier_results(tmp_path):
    ckpt = tmp_path / "checkpoint_best.pt"
    # a fairseq checkpoint to the preflight (a damaged one stops there, tests/test_faults.py), with no model in it
    torch.save({"model": {}, "cfg": {"model": {}}}, str(ckpt))
    (tmp_path / "data").mkdir()
    out = tmp_path / "eval"
    out.mkdir()
    for name in ("generate.out", "hyp.tok", "bleu.txt"):
        (out / name).write_text(f"earlier {name}\n")
    proc = _evaluate(str(ckpt), str(tmp_path / "data"), "--out", str(out), "--force", "--cpu")
    assert proc.returncode == 1 and "fairseq-generate failed" in proc.stderr
    for name in ("generate.out", "hyp.tok", "bleu.txt"):
        assert (out / name).read_text() == f"earlier {name}\n"
    assert sorted(os.listdir(out)) == ["bleu.txt", "generate.err.failed", "generate.out", "hyp.tok"]


def test_shared_private_pca_checks_outputs_first(tmp_path):
    pca = _script("shared_private_pca.py")
    ckpt = tmp_path / "checkpoint.pt"
    ckpt.write_bytes(b"never loaded")
    svg = tmp_path / "pca.svg"
    svg.write_text("<svg/>")
    with pytest.raises(SystemExit, match=r"pca.svg' exists; choose another path or pass --force"):
        pca.main([str(ckpt), "-o", str(svg)])
    svg.unlink()
    (tmp_path / "pca.tsv").write_text("earlier table")
    with pytest.raises(SystemExit, match=r"its .tsv table\) '.*pca.tsv' exists"):
        pca.main([str(ckpt), "-o", str(svg)])
    with pytest.raises(SystemExit, match="does not exist; create it"):
        pca.main([str(ckpt), "-o", str(tmp_path / "no" / "pca.svg")])
    with pytest.raises(SystemExit, match="is also an input"):
        pca.main([str(ckpt), "-o", str(ckpt), "--force"])
    assert (tmp_path / "pca.tsv").read_text() == "earlier table" and ckpt.read_bytes() == b"never loaded"
