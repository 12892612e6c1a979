"""translate and outlayers-interactive on bad input: options refused at parse time with
their range; no file the command reads is written over (--force or not), nor a --keep-work directory's files;
over-long lines named by line number, skipped (an empty output line, named) or truncated; temporary work
directories removed on SIGTERM. One tiny model (max_source_positions 12) is trained once for the module."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from harness import NO_ALIGNER, REPO, TINY_TRANSFORMER, run, tool, train

from fairseq_outlayers.tools.translate import _invalid_size, binarised_sizes, main as translate_main, source_limit

pytestmark = pytest.mark.usefixtures("commands_in_process")  # translate's fairseq-preprocess and fairseq-generate


def _error(capsys):
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("INFO")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("option, value, expected", [
    ("--lenpen", "nan", "--lenpen: must be in [-10, 10], got"),
    ("--lenpen", "inf", "--lenpen: must be in [-10, 10], got"),
    ("--lenpen", "11", "--lenpen: must be in [-10, 10], got"),
    ("--batch-size", "0", "--batch-size: must be a positive integer, got 0"),
    ("--batch-size", "-5", "--batch-size: must be a positive integer, got -5"),
    ("--beam", "0", "--beam: must be a positive integer, got 0"),
    ("--long-lines", "drop", "--long-lines: invalid choice: 'drop'"),
])
def test_options_are_refused_at_parse_time_with_their_range(capsys, option, value, expected):
    with pytest.raises(SystemExit) as e:
        translate_main(["--checkpoint", "c.pt", "--data", "d", "--input", "in", "--output", "out", option, value])
    assert e.value.code == 2 and expected in capsys.readouterr().err


@pytest.fixture
def files(tmp_path, tiny_bin):
    ckpt = tmp_path / "checkpoint.pt"
    ckpt.write_bytes(b"not read before the output checks")
    text = tmp_path / "in.de"
    text.write_text("s1 s2\n")
    return {"ckpt": str(ckpt), "input": str(text), "data": tiny_bin}


def _argv(f, output, *more):
    return ["--checkpoint", f["ckpt"], "--data", f["data"], "--input", f["input"], "--output", str(output), *more]


def test_no_file_the_command_reads_is_written_over_even_with_force(files, tmp_path, capsys):
    """The data directory's dictionary and binaries are read without being named: never an output."""
    for target in (os.path.join(files["data"], "dict.en.txt"), os.path.join(files["data"], "test.de-en.de.bin"),
                   files["ckpt"], files["input"]):
        before = open(target, "rb").read()
        assert translate_main(_argv(files, target, "--force")) == 2
        assert "is also an input of this command" in _error(capsys)
        assert open(target, "rb").read() == before
    assert translate_main(_argv(files, files["input"] + ".new")) != 0  # a new file beside them: checked further
    capsys.readouterr()


def test_keep_work_never_writes_over_what_is_in_it(files, tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()
    (work / "generate-test.txt").write_text("earlier results\n")
    assert translate_main(_argv(files, tmp_path / "out.en", "--keep-work", str(work))) == 2
    assert f"--keep-work '{work}' is not empty; give a new or empty directory" in _error(capsys)
    assert (work / "generate-test.txt").read_text() == "earlier results\n"
    # with --force a work directory holding an input is still refused
    assert translate_main(_argv(files, tmp_path / "out.en", "--force", "--keep-work", str(tmp_path))) == 2
    assert "holds an input of this command" in _error(capsys)
    (tmp_path / "a-file").write_text("x")
    assert translate_main(_argv(files, tmp_path / "out.en", "--keep-work", str(tmp_path / "a-file"))) == 2
    assert "exists and is not a directory" in _error(capsys)


def test_fairseqs_refusal_of_a_long_sample_is_read():
    message = ("Exception: Size of sample #3 is invalid (=(3501, 0)) since max_positions=(1024, 1024), skip this "
               "example with --skip-invalid-size-inputs-valid-test")
    assert _invalid_size(message) == (3, 3501) and _invalid_size("other") is None
    assert _invalid_size(message.replace("(3501,", "(np.int32(3501),")) == (3, 3501)  # numpy 2's repr


# ----------------------------------------------------------------------------------------------------------
# SIGTERM removes the temporary directories


def _killed_while_working(tmp_path, driver, prefix):
    """Run ``driver`` (Python code that stops inside a temporary directory named ``prefix``...) with TMPDIR in
    tmp_path, SIGTERM it there, and return (exit status, what is left in TMPDIR)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(driver)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (tmp / "started").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline
        time.sleep(0.1)
    assert [p for p in os.listdir(tmp) if p.startswith(prefix)]  # the work directory is there
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    return proc.returncode, sorted(p for p in os.listdir(tmp) if p != "started")


def test_sigterm_removes_the_translate_work_directory(files, tmp_path):
    driver = f"""
        import os, time
        from fairseq_outlayers.tools.evaluation import scoring
        from fairseq_outlayers.tools import translate

        def stuck(*args, **kwargs):  # fairseq-generate, translating for ever
            open(os.path.join(os.environ["TMPDIR"], "started"), "w").close()
            time.sleep(600)

        scoring.generate = stuck
        translate.source_limit = lambda checkpoint: 1024
        translate.main({_argv(files, tmp_path / "out.en")!r})
    """
    code, left = _killed_while_working(tmp_path, driver, "outlayers-translate-")
    assert code == 128 + signal.SIGTERM and left == []
    assert not (tmp_path / "out.en").exists()


def test_sigterm_removes_the_alignment_work_directory(tmp_path, tiny_raw, tiny_bin):
    pytest.importorskip("systran_align", reason=NO_ALIGNER)  # the built-in aligner's work directory
    out = tmp_path / "pairs.txt"
    driver = f"""
        import os, time
        from fairseq_outlayers.tools.pairing import alignment
        from fairseq_outlayers.tools.pairing.__main__ import main

        def stuck(*args, **kwargs):  # fast_align, training for ever
            open(os.path.join(os.environ["TMPDIR"], "started"), "w").close()
            time.sleep(600)

        alignment.train_fast_align = stuck
        main(["--src-text", {os.path.join(tiny_raw, 'train.de')!r}, "--tgt-text", {os.path.join(tiny_raw, 'train.en')!r},
              "--src-dict", {os.path.join(tiny_bin, 'dict.de.txt')!r}, "--tgt-dict", {os.path.join(tiny_bin, 'dict.en.txt')!r},
              "-o", {str(out)!r}])
    """
    code, left = _killed_while_working(tmp_path, driver, "outlayers-align-")
    assert code == 128 + signal.SIGTERM and left == [] and not out.exists()


# ----------------------------------------------------------------------------------------------------------
# over-long lines, with a model that reads at most 12 source tokens


@pytest.fixture(scope="module")
def short_model(tiny_bin, tmp_path_factory):
    save = str(tmp_path_factory.mktemp("short-model"))
    train(tiny_bin, save, TINY_TRANSFORMER, extra=["--max-source-positions", "12", "--max-target-positions", "12"],
          max_update=1)
    return os.path.join(save, "checkpoint_last.pt")


LONG = " ".join(f"s{k % 30}" for k in range(20))  # 20 tokens + the end of sentence: more than 12


def test_translate_names_an_over_long_line_and_skips_or_truncates_it(short_model, tiny_bin, tmp_path, capsys):
    assert source_limit(short_model) == 12
    text = tmp_path / "in.de"
    text.write_text("s1 s2 s3\n\n" + LONG + "\ns4 s5\n")
    out = tmp_path / "out.en"
    argv = ["--checkpoint", short_model, "--data", tiny_bin, "--input", str(text), "--output", str(out),
            "--beam", "2", "--keep-work", str(tmp_path / "work")]
    assert translate_main(argv) == 2
    assert _error(capsys) == (
        "translate: error: --input line 3 (21 tokens): longer than the model reads (12 tokens with the end of "
        "sentence, after tokenisation and BPE); pass --long-lines skip (an empty output line for each) or "
        "--long-lines truncate (its first 11 tokens translated), or split the line")
    assert not out.exists()
    assert binarised_sizes(os.path.join(tmp_path / "work", "data", "test.de-en.de.idx")) == [4, 21, 3]
    assert not (tmp_path / "work" / "generate-test.txt").exists()  # refused before translating
    assert translate_main(argv[:-2] + ["--long-lines", "skip"]) == 0
    lines = out.read_text().split("\n")[:-1]
    assert len(lines) == 4 and lines[1] == "" and lines[2] == "" and lines[0] and lines[3]
    assert ("translate: 1 line(s) longer than the model reads (12 tokens) skipped (their output lines are empty): "
            "line 3 (21 tokens)") in capsys.readouterr().err
    assert translate_main(argv[:-2] + ["--long-lines", "truncate", "--force"]) == 0
    truncated = out.read_text().split("\n")[:-1]
    assert len(truncated) == 4 and truncated[2] and [truncated[0], truncated[3]] == [lines[0], lines[3]]
    assert "truncated to their first 11 tokens: line 3 (21 tokens)" in capsys.readouterr().err


def test_interactive_names_an_over_long_line_and_skips_it_marked(short_model, tiny_bin):
    stdin = "s1 s2 s3\n" + LONG + "\ns4 s5\n" + LONG + "\n"
    base = [tool("outlayers-interactive"), tiny_bin, "--path", short_model, "--beam", "2", "--cpu"]
    proc = run(base, input=stdin, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "fairseq_outlayers: error: input line 2 has 21 tokens (after tokenisation and BPE, with the end of "
        "sentence), more than the model reads (max_positions (12, 12)); pass --skip-invalid-size-inputs-valid-test "
        "to skip such lines (each gets empty H- and D- lines and is named on standard error), or split the line")
    for buffer_size in ("1", "3"):
        proc = run(base + ["--skip-invalid-size-inputs-valid-test", "--buffer-size", buffer_size], input=stdin,
                   check=False)
        assert proc.returncode == 0, proc.stderr
        hyps = [line.split("\t") for line in proc.stdout.splitlines() if line.startswith("H-")]
        assert [h[0] for h in hyps] == ["H-0", "H-1", "H-2", "H-3"]
        assert hyps[1][1:] == ["-inf", ""] and hyps[3][1:] == ["-inf", ""] and hyps[0][2] and hyps[2][2]
        for line in (2, 4):
            assert (f"outlayers-interactive: line {line} skipped: longer than the model reads (max_positions "
                    f"(12, 12)); its H-{line - 1} and D-{line - 1} lines are empty") in proc.stderr
