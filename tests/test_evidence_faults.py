"""The evidence cannot be silently wrong and its check cannot be silenced: the ledger reads only records (a stray
copy of a record beside it, a duplicate, a score or a claim's target out of range is one line naming the file),
and the docs renderer runs only its own fixed table of renderers (a block naming a module, a table index out of
range, a block that cannot be rendered, an unreadable file: one line, and ``--check`` fails)."""
import json
import math
import os
import shutil

import pytest

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.lab import docs
from fairseq_outlayers.lab.ledger import records
from fairseq_outlayers.lab.ledger.__main__ import main as ledger_main
from fairseq_outlayers.lab.ledger.render import read_claims, render
from harness import REPO
from test_ledger import one_line, two_row_ledger


def _copy_with(ledger, name, **changes):
    """A copy of tied.seed1.json under ``name`` in the ledger, its test score changed (an edited record kept
    beside the real one)."""
    with open(records.record_path(ledger, "tied", 1), encoding="utf-8") as f:
        record = json.load(f)
    record["test"]["test2016"].update(changes)
    path = os.path.join(ledger, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f)
    return path


@pytest.mark.parametrize("name", ["tied.seed1.old.json", "tied.seed01.json", "tied.seed1 (copy).json",
                                  "notes.json"])
def test_a_stray_json_file_in_the_ledger_is_refused_naming_it(tmp_path, capsys, name):
    """Before: ``tied.seed1.old.json`` (sacreBLEU 99) was read and replaced seed 1 in the table (99.00) while the
    difference came from the translation files; ``tied.seed01.json`` did the same."""
    ledger = two_row_ledger(tmp_path)
    clean = render(ledger)
    stray = _copy_with(ledger, name, sacrebleu=99.0, tokenized_bleu=99.0)
    with pytest.raises(OutlayersConfigError) as e:
        records.read_records(ledger)
    assert str(e.value).startswith(f"{stray}: not a record name (ROW.seedN.json)") and "\n" not in str(e.value)
    for argv in (["render", "--ledger", ledger, "--out", "-", "--claims", ""],
                 ["compare", "tied", "softmax", "--ledger", ledger]):
        capsys.readouterr()
        assert ledger_main(argv) == 2
        assert one_line(capsys.readouterr().err).startswith(f"ledger: error: {stray}: not a record name")
    os.remove(stray)
    assert render(ledger) == clean and "99.00" not in clean


def test_two_records_of_one_row_and_seed_are_an_error_naming_both(tmp_path, monkeypatch):
    """File names are checked against the records they hold, so two files of one row and seed can only come from
    a file system that folds names; the check after reading names both files all the same."""
    ledger = two_row_ledger(tmp_path)
    path = records.record_path(ledger, "tied", 1)
    monkeypatch.setattr(records, "record_files", lambda d: [records.record_path(d, "softmax", 1), path, path])
    with pytest.raises(OutlayersConfigError, match=rf"^{path}: a second record of row 'tied' seed 1 \(the first is "
                                                   rf"{path}\)"):
        records.read_records(ledger)


@pytest.mark.parametrize("field,value,expected", [
    ("sacrebleu", -5.0, "field 'test.test2016.sacrebleu' is -5.0, expected a finite number from 0 to 100"),
    ("sacrebleu", 100.5, "field 'test.test2016.sacrebleu' is 100.5, expected a finite number from 0 to 100"),
    ("tokenized_bleu", -0.01, "field 'test.test2016.tokenized_bleu' is -0.01, expected a finite number from 0"),
])
def test_a_score_out_of_range_is_refused_naming_the_file(tmp_path, capsys, field, value, expected):
    """Before: a record with sacreBLEU -5 was accepted and rendered."""
    ledger = two_row_ledger(tmp_path)
    path = records.record_path(ledger, "tied", 1)
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    record["test"]["test2016"][field] = value
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f)
    capsys.readouterr()
    assert ledger_main(["render", "--ledger", ledger, "--out", "-", "--claims", ""]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"ledger: error: {path}: ") and expected in line


@pytest.mark.parametrize("field,value", [("training_seconds", -1.0), ("wall_seconds", -3.0),
                                         ("tokens_per_second", -10.0)])
def test_negative_times_are_refused(tmp_path, field, value):
    ledger = two_row_ledger(tmp_path)
    path = records.record_path(ledger, "tied", 1)
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    record[field] = value
    with pytest.raises(OutlayersConfigError, match=f"field '{field}' is {value}, expected a finite number >= 0"):
        records.check_record(path, record)


@pytest.mark.parametrize("key", ["trained", "embedding", "output"])
def test_a_parameter_count_above_the_total_is_refused(tmp_path, key):
    ledger = two_row_ledger(tmp_path)
    path = records.record_path(ledger, "tied", 1)
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    record["params"][key] = 11
    with pytest.raises(OutlayersConfigError, match=f"field 'params.{key}' is 11, more than 'params.total' 10"):
        records.check_record(path, record)


def _claims(path, **extra):
    claim = {"name": "tied", "label": "`tied`", "page": "x.md", "claim": "tied beats softmax", "table": "t",
             "row": "tied", "baseline": "softmax", "target": 0.5}
    claim.update(extra)
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"claims": [claim]}, allow_nan=True))
    return str(path)


@pytest.mark.parametrize("change,message", [
    ({"target": math.nan}, "\"target\" must be the least BLEU difference claimed, a finite number"),
    ({"target": math.inf}, "\"target\" must be"),
    ({"target": 250.0}, "from -100 to 100"),
    ({"target": True}, "\"target\" must be"),
    ({"saving": {"parameters": "trained", "at_least": math.nan}}, "\"at_least\" (a percent, a finite number"),
    ({"saving": {"parameters": "trained", "at_least": 140}}, "\"saving\" needs"),
    ({"saving": {"parameters": "trained", "at_least": -5}}, "\"saving\" needs"),
    ({"at_least": math.nan}, "\"at_least\" must be a mean BLEU, a finite number from 0 to 100, not nan"),
    ({"at_least": 101}, "\"at_least\" must be a mean BLEU"),
    ({"further_seeds": [1, 1, 2]}, "\"further_seeds\" must be a list of distinct seed numbers"),
    ({"further_seeds": [True, 2]}, "\"further_seeds\""),
])
def test_a_claim_with_a_non_finite_or_out_of_range_figure_is_refused(tmp_path, capsys, change, message):
    """Before: a NaN target or saving was accepted and rendered as "Δ ≥ +nan BLEU ... inconclusive" or
    "≥ nan % fewer: not met"."""
    path = _claims(tmp_path / "claims.json", **change)
    with pytest.raises(OutlayersConfigError) as e:
        read_claims(path)
    assert str(e.value).startswith(f"{path}: claim 'tied': ") and message in str(e.value)
    assert "\n" not in str(e.value)
    ledger = two_row_ledger(tmp_path)
    capsys.readouterr()
    assert ledger_main(["render", "--ledger", ledger, "--out", "-", "--claims", path]) == 2
    assert "nan" not in capsys.readouterr().out


# --- the docs renderer ----------------------------------------------------------------------------------------------

@pytest.fixture
def tree(tmp_path):
    """A copy of the files the blocks read: docs/benchmarks and docs/results (claims, records)."""
    for sub in ("benchmarks", "results"):
        shutil.copytree(os.path.join(REPO, "docs", sub), tmp_path / "docs" / sub)
    return tmp_path


STALE = "<!-- generated: options fixed -->\nold\n<!-- end generated -->\n"


@pytest.mark.parametrize("spec", ["cli sys:exit", "cli os:getcwd", "cli fairseq_outlayers.tools.pairing.__main__:"
                                  "build_parser", "cli", "cli outlayers-pairing outlayers-vectors"])
def test_a_cli_block_names_a_command_of_the_fixed_table_and_runs_nothing_else(tree, capsys, monkeypatch, spec):
    """Before: ``cli sys:exit`` after a stale block made ``--check`` exit 0 with no output."""
    called = []
    monkeypatch.setattr("sys.exit", lambda *a: called.append(a))
    page = tree / "docs" / "page.md"
    page.write_text(STALE + f"\n<!-- generated: {spec} -->\n<!-- end generated -->\n")
    assert docs.main(["--check", str(page)]) == 2 and called == []
    line = one_line(capsys.readouterr().err)
    assert f"block '{spec}': a cli block names one command, one of outlayers-pairing" in line


def test_the_cli_block_of_a_command_renders_its_options():
    text = docs.render_text("<!-- generated: cli outlayers-pairing -->\n<!-- end generated -->\n",
                            docs.Context(REPO))
    assert "Generated from the parser of `outlayers-pairing`" in text and "| `--force` | `off` |" in text


@pytest.mark.parametrize("error", [ValueError("bad value"), KeyError("x"), SystemExit(0), ImportError("gone")])
def test_a_block_that_cannot_be_rendered_fails_the_check(tree, capsys, monkeypatch, error):
    """Any error of a renderer, whatever its kind (a SystemExit(0) included), is one line and exit 2, never a pass."""
    def broken(ctx, args):
        raise error

    monkeypatch.setitem(docs.KINDS, "rule", broken)
    page = tree / "docs" / "page.md"
    page.write_text("<!-- generated: rule -->\n<!-- end generated -->\n" + STALE)
    assert docs.main(["--check", str(page)]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"block 'rule' cannot be rendered ({type(error).__name__}" in line


@pytest.mark.parametrize("numbers", ["0", "-1", "99", "1.5", "one", "1 0"])
def test_a_bench_table_number_out_of_range_is_refused(numbers):
    """Before: ``bench PAGE 0`` rendered the last table and ``-1`` the one before it."""
    with pytest.raises(OutlayersConfigError) as e:
        docs.render_text(f"<!-- generated: bench fused_loss_cpu.md {numbers} -->\n<!-- end generated -->\n",
                         docs.Context(REPO), "page.md")
    assert "fused_loss_cpu.md has " in str(e.value) and "give their numbers from 1 to" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("page", ["../README.md", "/etc/passwd", "fused_loss_cpu"])
def test_a_bench_block_names_a_page_of_the_benchmarks_folder(page):
    with pytest.raises(OutlayersConfigError, match="does not exist"):
        docs.render_text(f"<!-- generated: bench {page} -->\n<!-- end generated -->\n", docs.Context(REPO))


@pytest.mark.parametrize("make,expected", [
    (lambda p: None, "cannot be read (No such file or directory)"),
    (lambda p: p.mkdir(), "cannot be read (Is a directory)"),
    (lambda p: p.write_bytes("caf\xe9\n<!-- generated: rule -->\n".encode("latin-1")), ":1: not valid UTF-8"),
])
def test_check_of_an_unreadable_file_is_one_line(tmp_path, capsys, make, expected):
    """Before: a missing, Latin-1 or directory FILE given to ``--check`` was a traceback."""
    path = tmp_path / "page.md"
    make(path)
    assert docs.main(["--check", str(path)]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"docs: error: {path}") and expected in line


def test_a_block_error_names_the_file_and_block(tree, capsys):
    page = tree / "docs" / "page.md"
    page.write_text("<!-- generated: rows no-such-row -->\n<!-- end generated -->\n")
    assert docs.main(["--check", str(page)]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith("docs: error: ") and "docs/page.md: block 'rows no-such-row': no record of row" in line


def test_the_demo_table_never_writes_over_what_it_reads(tmp_path, monkeypatch, capsys):
    """``lab.compare --out`` rewrites its own results.md/.json/.png, never an input: a reference named results.md
    in the folder given as --out is refused before any run."""
    from fairseq_outlayers.lab import compare

    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "results.md").write_text("a b\n")
    data = tmp_path / "bin"
    data.mkdir()
    row = tmp_path / "10-tied.args"
    row.write_text("--output-layer tied\n")
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(compare.runner, "run", lambda *a: pytest.fail("a run started"))
    with pytest.raises(SystemExit):
        compare.main(["--data-bin", str(data), "--raw-dir", str(raw), "--test-prefix", "results", "--tgt", "md",
                      "--rows", str(row), "--out", str(raw), "--max-update", "30"])
    assert f"--out '{raw}/results.md' is also an input of this command" in capsys.readouterr().err
    assert (raw / "results.md").read_text() == "a b\n"


@pytest.mark.parametrize("argv", [["tags", "{a}", "{a}"], ["tokenize", "{a}", "{a}", "--lang", "en"],
                                  ["every", "2", "{a}", "{b}", "{a}"], ["clean", "{a}", "{b}", "{b}", "{c}"],
                                  ["every", "2", "{a}", "{b}", "{b}"]])
def test_a_preparation_step_never_writes_over_what_it_reads(tmp_path, argv):
    from fairseq_outlayers.tools import corpus_tools

    paths = {k: str(tmp_path / k) for k in "abc"}
    for p in paths.values():
        with open(p, "w", encoding="utf-8") as f:
            f.write("one line\n")
    with pytest.raises(SystemExit) as e:
        corpus_tools.main([x.format(**paths) for x in argv])
    assert "is also an input of this step" in str(e.value.code) or "given twice" in str(e.value.code)
    assert all(open(p, encoding="utf-8").read() == "one line\n" for p in paths.values())
