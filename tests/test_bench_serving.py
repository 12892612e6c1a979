"""``scripts/bench_serving.py``: every mistake in its options is one line before any work, and its report never
replaces a file it reads (``--force`` included). The checks come before any checkpoint is loaded, so most tests
give a placeholder file as the checkpoint; the continuous model is a tiny one trained for one update."""
import os
import sys

import pytest

from harness import REPO, load_script, run, train
from fairseq_outlayers.errors import PREFIX

SCRIPT = os.path.join(REPO, "scripts", "bench_serving.py")


@pytest.fixture
def files(tiny_raw, tiny_bin, tmp_path):
    """A placeholder checkpoint, the tiny test split's source and references, and where the report goes."""
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"a checkpoint")
    reference = tmp_path / "ref.en"
    reference.write_text(open(os.path.join(tiny_raw, "test.en"), encoding="utf-8").read(), encoding="utf-8")
    return {"data": tiny_bin, "checkpoint": str(checkpoint), "source": os.path.join(tiny_raw, "test.de"),
            "reference": str(reference), "output": str(tmp_path / "report.md"), "dir": tmp_path}


def _bench(files, *extra, model=None, source=None, reference=None, output=None):
    """The script's exit status and its standard error's lines, with ``files`` and ``extra`` as options."""
    argv = [sys.executable, SCRIPT, "--data", files["data"], "--model", model or f"tiny={files['checkpoint']}",
            "--source", source or files["source"], "--reference", reference or files["reference"],
            "--output", output or files["output"], *extra]
    proc = run(argv, check=False)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.returncode, lines


def _snapshot(folder):
    return {name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))
            if os.path.isfile(os.path.join(folder, name))}


@pytest.mark.parametrize("which", ["reference", "source", "checkpoint", "data", "a link to the reference"])
def test_the_report_never_replaces_an_input_even_with_force(files, which):
    """Before: ``--reference R --output R --force`` replaced the reference it had read with the report."""
    target = os.path.join(files["data"], "dict.en.txt") if which == "data" else files.get(which, files["reference"])
    output = target
    if which.startswith("a link"):
        output = str(files["dir"] / "report-link.md")
        os.symlink(target, output)
    before = open(target, "rb").read()
    code, lines = _bench(files, "--force", output=output)
    named = f"a file of '{files['data']}', which it reads" if which == "data" else f"'{target}'"
    assert code == 1 and lines == [f"{PREFIX}--output '{output}' is also an input of this command ({named}); choose "
                                   "another output path (--force never overwrites an input)"]
    assert open(target, "rb").read() == before and os.path.islink(output) == (output != target)


def test_a_reference_of_another_length_is_refused(files):
    """Before: 10 references for a 24-sentence test set scored "24 of 24" and a verdict, without a word."""
    short = files["dir"] / "short.en"
    short.write_text("".join(open(files["reference"], encoding="utf-8").readlines()[:10]), encoding="utf-8")
    before = _snapshot(files["dir"])
    code, lines = _bench(files, reference=str(short))
    assert code == 1 and lines == [f"{PREFIX}--reference '{short}' has 10 lines but the test set has 24 sentences; "
                                   "give the references of the same test set, one line per sentence"]
    code, lines = _bench(files, source=str(short))
    assert code == 1 and lines == [f"{PREFIX}--source '{short}' has 10 lines but the test split of --data "
                                   f"'{files['data']}' has 24 sentences; give the source side of that test split"]
    assert _snapshot(files["dir"]) == before


@pytest.mark.parametrize("case", ["no source", "no name", "rounds 0", "beam 0", "no checkpoint", "same name"])
def test_each_mistake_is_one_line_naming_the_option_and_the_fix(files, case):
    """Before: a ``FileNotFoundError``, ``ValueError`` or ``StatisticsError`` traceback, after the exports for some."""
    missing = str(files["dir"] / "missing.de")
    ckpt = files["checkpoint"]
    extra, model, source, expected = [], None, None, None
    if case == "no source":
        source = missing
        expected = (f"--source '{missing}' does not exist; give the test split's source side (BPE), one sentence "
                    "per line")
    elif case == "no name":
        model = ckpt
        expected = (f"--model '{ckpt}' is not NAME=CHECKPOINT; name the model and its checkpoint, e.g. --model "
                    f"tiny={ckpt}")
    elif case == "rounds 0":
        extra = ["--rounds", "0"]
        expected = "--rounds 0: must be a positive integer (e.g. --rounds 3)"
    elif case == "beam 0":
        extra = ["--beam", "0"]
        expected = "--beam 0: must be a positive integer (e.g. --beam 5)"
    elif case == "no checkpoint":
        model = f"tiny={missing}"
        expected = (f"--model 'tiny={missing}': the checkpoint '{missing}' does not exist; give the path of a .pt file "
                    "written by fairseq-train")
    else:
        extra = ["--model", f"tiny={ckpt}"]
        expected = f"--model 'tiny={ckpt}': the name 'tiny' is given twice; give each model its own name"
    before = _snapshot(files["dir"])
    code, lines = _bench(files, *extra, model=model, source=source)
    assert code == 1 and lines == [PREFIX + expected]
    assert _snapshot(files["dir"]) == before


def test_a_model_that_cannot_be_exported_is_one_line_and_nothing_is_written(files, tiny_bin, tmp_path):
    """Before: ``ExportRefused`` as a traceback (``outlayers-export`` prints its message in one line)."""
    from fairseq_outlayers.tools.vectors import write_random_vectors

    vectors = str(tmp_path / "v.vec")
    write_random_vectors(os.path.join(tiny_bin, "dict.en.txt"), vectors, 16, 1, False)
    save = str(tmp_path / "continuous")
    train(tiny_bin, save, extra=["--output-layer", "continuous", "--target-vectors", vectors, "--criterion", "cosine"],
          max_update=1)
    checkpoint = os.path.join(save, "checkpoint_last.pt")
    before = sorted(os.listdir(tmp_path))
    code, lines = _bench(files, model=f"vmf={checkpoint}")
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"{PREFIX}--model vmf={checkpoint}: --output-layer continuous cannot be exported: ")
    assert lines[0].endswith("; leave this model out of the benchmark (docs/serving.md lists the models that export)")
    assert sorted(os.listdir(tmp_path)) == before  # no report, no export left behind


def test_a_model_with_an_output_bias_is_served_by_ctranslate2_and_its_stock_row_says_why_not(files, tiny_bin,
                                                                                            tmp_path):
    """Stock fairseq's Transformer has no output bias, so outlayers-export --to fairseq refuses such a model;
    CTranslate2 holds the bias. Before: the whole model was refused. Now the report has its CTranslate2 rows, and
    the stock row gives the exporter's reason."""
    pytest.importorskip("ctranslate2")
    save = str(tmp_path / "bias")
    train(tiny_bin, save, extra=["--output-layer", "softmax", "--output-bias"], max_update=2)
    code, lines = _bench(files, "--rounds", "1", model=f"bias={os.path.join(save, 'checkpoint_last.pt')}")
    assert code == 0, lines
    lines = open(files["output"], encoding="utf-8").read().splitlines()
    described = [x for x in lines if x.startswith("| bias | `")]  # the table of what each model is
    assert len(described) == 1 and "2 updates" in described[0], described
    rows = [x for x in lines if x.startswith("| bias |") and x not in described]
    assert [r.split(" | ")[1] for r in rows] == ["package fairseq-generate", "stock fairseq-generate (export)",
                                                 "CTranslate2 float32", "CTranslate2 int8"]
    assert "export refused: " in rows[1] and "bias" in rows[1].split("export refused: ")[1]
    for row in (rows[0], rows[2], rows[3]):
        assert "refused" not in row and float(row.split(" | ")[2].replace(",", "")) > 0


def test_the_report_states_the_load_at_the_start_and_at_the_end(tmp_path):
    """The machine may be shared while the run times: the page gives the load average at both ends, in the form
    docs/benchmarks/README.md's table reads. Before: the start only, so a run that others joined looked idle."""
    from argparse import Namespace

    from harness import load_script
    from fairseq_outlayers.lab import docs

    bench = load_script("bench_serving.py")
    args = Namespace(argv=["--model", "m=c.pt"], beam=5, batch_size=64, threads=1, rounds=3,
                     trained=[("m", "c.pt", "outlayers_transformer_tiny, epoch 2, 200 updates, seed 1")])
    row = dict(seconds=2.0, sentences=10, tokens=100, bleu=20.0, same=10)
    rows = [dict(row, system=s) for s in bench.SYSTEMS]
    text = bench.report([("m", rows)], args, 0.0, ["0.7 1.7 1.8", "3.1 2.2 1.9"])
    head = text.split("\n|", 1)[0]
    assert "Load average (1, 5, 15 min) 0.7 1.7 1.8 at the start, 3.1 2.2 1.9 at the end, on " in head
    assert "| m | `c.pt` | outlayers_transformer_tiny, epoch 2, 200 updates, seed 1 |" in text  # a table of its own
    page = tmp_path / "serving.md"
    page.write_text(text, encoding="utf-8")
    assert docs.benchmark_load(str(page)) == "0.7 at the start, 3.1 at the end"
    assert "| m | CTranslate2 int8 | 5.0 | 50 | 1.00 | 20.00 | 10 of 10 |" in text


def test_every_system_stops_an_output_at_the_same_length(monkeypatch, tmp_path):
    """fairseq-generate and CTranslate2 get one limit (fairseq's default, 200 tokens): with 1.2 x source + 10 for
    fairseq and 256 for CTranslate2, barely trained models that repeat themselves were cut at other lengths."""
    import subprocess
    import types

    bench = load_script("bench_serving.py")
    seen = {}

    def fake_run(cmd, **kwargs):
        seen["fairseq"] = cmd
        (tmp_path / "generate-test.txt").write_text("H-0\t-1.0\ta b\nTranslated 1 sentences (2 tokens) in 0.5s\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    class Translator:
        def __init__(self, *args, **kwargs):
            pass

        def translate_batch(self, source, **kwargs):
            seen["ctranslate2"] = kwargs["max_decoding_length"]
            return [types.SimpleNamespace(hypotheses=[["a", "b"]]) for _ in source]

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    monkeypatch.setitem(sys.modules, "ctranslate2", types.SimpleNamespace(Translator=Translator))
    bench.fairseq_generate("data", "model.pt", 5, 64, 1, str(tmp_path))
    bench.ctranslate2_translate("dir", [["x"]], 5, 64, 1, "float32")
    cmd = seen["fairseq"]
    assert cmd[cmd.index("--max-len-a") + 1] == "0"
    assert int(cmd[cmd.index("--max-len-b") + 1]) == seen["ctranslate2"] == 200
