"""The ledger checks what it reads: damaged records, row files and hypothesis files
give one line naming the file (and the field) in `render`, `compare`, `status` and `run`, never a traceback;
identical systems are reported as identical (p = 1); `render --out` writes over no user file and no ledger file;
`run` checks its output directories before training. Fuzz tests mutate valid records and hypothesis files at
random and require either that one-line error or a render that works."""
import gzip
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.lab.ledger import records
from fairseq_outlayers.lab.ledger.__main__ import main as ledger_main
from fairseq_outlayers.lab.ledger.render import compare_line, render
from fairseq_outlayers.lab.ledger.stats import paired_bootstrap_test, sentence_stats

from fairseq_outlayers.lab.ledger.rows import read_ledger_row

from test_ledger import HYP_A, HYP_B, REFS, fake_record, one_line, one_row_table, two_row_ledger
from test_readers_hypothesis import corrupted

pytestmark = pytest.mark.usefixtures("commands_in_process")  # what the runners start: in this process


FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _record_file(ledger, row="tied", seed=1):
    return records.record_path(ledger, row, seed)


def _edit(path, change):
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    change(record)
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(record, allow_nan=True))


def _set(*keys, value):
    def change(record):
        target = record
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value
    return change


# each: (what is written into tied.seed1.json, the text the one-line error must hold)
DAMAGED = {
    "a list": (b"[1, 2]", "not a ledger record (a JSON object), but [1, 2]"),
    "null": (b"null", "not a ledger record (a JSON object), but null"),
    "empty": (b"", ":1: not valid JSON"),
    "cut short": (b'{"row": "tied", "seed": 1, "tab', ":1: not valid JSON"),
    "latin-1": ('{"row": "tied", "description": "caf\xe9"}'.encode("latin-1"), ":1: not valid UTF-8"),
    "binary": (bytes(range(256)), "not valid UTF-8"),
    "deep": (b"[" * 100000 + b"]" * 100000, "tied.seed1.json"),
    "seed one": (_set("seed", value="one"), "field 'seed' is \"one\", expected an integer"),
    "seed true": (_set("seed", value=True), "field 'seed' is true, expected an integer"),
    "string score": (_set("test", "test2016", "sacrebleu", value="31.0"),
                     "field 'test.test2016.sacrebleu' is \"31.0\", expected a finite number"),
    "NaN score": (_set("test", "test2016", "sacrebleu", value=float("nan")),
                  "field 'test.test2016.sacrebleu' is NaN, expected a finite number"),
    "infinite tokenised": (_set("test", "test2016", "tokenized_bleu", value=float("inf")),
                           "field 'test.test2016.tokenized_bleu' is Infinity, expected a finite number"),
    "NaN in the curve": (_set("curve", value=[{"epoch": 1, "loss": float("nan")}]),
                         "field 'curve' is [{\"epoch\": 1, \"loss\": NaN}], expected a list of objects"),
    "NaN elsewhere": (_set("machine_load", value=float("nan")), "field 'machine_load' is not a number"),
    "no test": (_set("test", value={}), "field 'test' holds no test set"),
    "test not an object": (_set("test", "test2016", value=[]), "field 'test.test2016' is [], expected an object"),
    "missing params": (lambda r: r.pop("params"), "field 'params' is missing"),
    "params as text": (_set("params", "trained", value="8"), "field 'params.trained' is \"8\""),
    "options not a list": (_set("options", value="data --seed 1"), "field 'options' is \"data --seed 1\""),
    "hypotheses outside": (_set("test", "test2016", "hypotheses", value="../../etc/passwd"),
                           "field 'test.test2016.hypotheses' is \"../../etc/passwd\", expected a file name inside"),
    "metric": (_set("validation", "metric", value="accuracy"), "field 'validation.metric' is \"accuracy\""),
    "another row": (_set("row", value="softmax"),
                    "the record is of row 'softmax' seed 1 but its file name says row 'tied' seed 1"),
    "another seed": (_set("seed", value=2), "the record is of row 'tied' seed 2 but its file name says row 'tied'"),
}


def _damage(ledger, how):
    path = _record_file(ledger)
    if callable(how):
        _edit(path, how)
    else:
        with open(path, "wb") as f:
            f.write(how)
    return path


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_a_damaged_record_is_one_line_naming_the_file_and_field_in_render_and_compare(tmp_path, capsys, case):
    ledger = two_row_ledger(tmp_path)
    how, expected = DAMAGED[case]
    path = _damage(ledger, how)
    with pytest.raises(OutlayersConfigError) as e:
        records.load_record(path)
    assert str(e.value).startswith(path) and expected in str(e.value) and "\n" not in str(e.value)
    capsys.readouterr()
    for argv in (["render", "--ledger", ledger, "--out", "-"], ["compare", "tied", "softmax", "--ledger", ledger]):
        assert ledger_main(argv) == 2
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"ledger: error: {path}") and expected in line


@pytest.mark.parametrize("case", ["latin-1", "seed one", "another row", "NaN score"])
def test_a_damaged_record_is_shown_by_status_and_stops_run_before_training(tmp_path, monkeypatch, capsys, case):
    rows, ledger, argv, started = one_row_table(tmp_path, monkeypatch, "20-tied", "--data-bin data --output-layer x")
    (tmp_path / "data").mkdir()
    fake_record(ledger, "tied", 1, 31.0, HYP_B)
    how, expected = DAMAGED[case]
    path = _damage(ledger, how)
    capsys.readouterr()
    assert ledger_main(["status", "--rows", str(rows / "*.args"), "--seeds", "1", "2", "--ledger", ledger,
                        "--work", str(tmp_path / "work")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith(f"  tied seed 1: unreadable record: {path}") and expected in out[1]
    assert out[2] == "  tied seed 2: not started" and out[-1] == "1 not started, 1 unreadable"
    monkeypatch.chdir(tmp_path)
    assert ledger_main(argv + ["1", "2"]) == 2 and started == []
    assert expected in one_line(capsys.readouterr().err)


def test_an_unreadable_options_file_of_a_partial_run_is_shown_and_refused(tmp_path, capsys):
    from harness import partial_ledger_run

    from fairseq_outlayers.lab.ledger.runner import Settings, run
    from fairseq_outlayers.lab.ledger.status import run_state

    row, work = partial_ledger_run(tmp_path)
    (work / "options.json").write_bytes(b"\xff\xfe[")
    state = run_state(row, 1, str(tmp_path / "runs"), str(work.parent), 5, 50, 5)
    assert state["state"] == "unreadable" and f"remove {work} to start that run afresh" in state["text"]
    with pytest.raises(OutlayersConfigError, match="options.json is damaged"):
        run(row, 1, Settings(ledger=str(tmp_path / "runs"), work=str(work.parent), test_ref="ref"))


# ----------------------------------------------------------------------------------------------------------
# hypothesis and reference files of the ledger

HYP_DAMAGE = {
    "short": (lambda data: b"".join(data.splitlines(keepends=True)[:-1]), "has 7 lines but its reference"),
    "long": (lambda data: data + b"one more\n", "has 9 lines but its reference"),
    "latin-1": (lambda data: data.replace(b"a man", "\xe9".encode("latin-1"), 1), ":1: not valid UTF-8"),
    "empty": (lambda data: b"", "has 0 lines but its reference"),
}


@pytest.mark.parametrize("case", sorted(HYP_DAMAGE))
def test_a_damaged_hypothesis_file_is_one_line_naming_it(tmp_path, capsys, case):
    ledger = two_row_ledger(tmp_path)
    hyp = os.path.join(ledger, "tied.seed1.test2016.hyp")
    damage, expected = HYP_DAMAGE[case]
    with open(hyp, "rb") as f:
        data = f.read()
    with open(hyp, "wb") as f:
        f.write(damage(data))
    for argv in (["render", "--ledger", ledger, "--out", "-"], ["compare", "tied", "softmax", "--ledger", ledger]):
        assert ledger_main(argv) == 2
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"ledger: error: {hyp}") and expected in line


def test_a_damaged_gzipped_hypothesis_file_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(records, "GZIP_ABOVE", 10)
    ledger = two_row_ledger(tmp_path)
    hyp = os.path.join(ledger, "tied.seed1.test2016.hyp.gz")
    data = open(hyp, "rb").read()
    for broken, expected in ((data[: len(data) // 2], "not a complete gzip file"),
                             (b"not gzip at all", "not a complete gzip file"),
                             (gzip.compress(b"caf\xe9\n", mtime=0), ":1: not valid UTF-8")):
        open(hyp, "wb").write(broken)
        assert ledger_main(["compare", "tied", "softmax", "--ledger", ledger]) == 2
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"ledger: error: {hyp}") and expected in line


# ----------------------------------------------------------------------------------------------------------
# fuzz: random values in random fields of a valid record, random bytes in its hypotheses

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)


def _paths(value, prefix=()):
    """Every key path of a JSON value (objects and lists), the value itself first."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


@pytest.fixture(scope="module")
def fuzz_ledger(tmp_path_factory):
    ledger = str(tmp_path_factory.mktemp("fuzz") / "runs")
    fake_record(ledger, "softmax", 1, 30.0, HYP_A)
    rec = fake_record(ledger, "tied", 1, 31.0, HYP_B, baseline="softmax")
    rec.update(curve=[{"epoch": 1, "num_updates": 10, "loss": 5.0, "bleu": 20.0}], file_digests={},
               after={"step": ["fit-output-bias"], "trained_in": "tied.seed1", "as_trained": {}})
    records.write_record(ledger, rec, {"test2016": HYP_B}, {"test2016": REFS})
    with open(_record_file(ledger), encoding="utf-8") as f:
        return ledger, f.read()


@FUZZ
@given(data=st.data(), value=JSON_VALUES)
def test_fuzz_a_record_field_set_to_any_json_value(fuzz_ledger, data, value):
    """Whatever value any field (or the whole record) takes, the record is refused in one line naming the file,
    or it is accepted and renders, compares and reports its status without an error of any other kind."""
    ledger, original = fuzz_ledger
    record = json.loads(original)
    path = data.draw(st.sampled_from(list(_paths(record))))
    if path:
        target = record
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = value
    else:
        record = value
    file = _record_file(ledger)
    try:
        with open(file, "w", encoding="utf-8") as f:
            f.write(json.dumps(record, allow_nan=True))
        try:
            records.load_record(file)
        except OutlayersConfigError as e:
            assert str(e).startswith(file) and "\n" not in str(e)
            with pytest.raises(OutlayersConfigError):
                render(os.path.dirname(file))
            return
        try:  # accepted: it renders (or a file it names is refused in one line)
            render(ledger)
            compare_line(ledger, "softmax", "tied")
        except OutlayersConfigError as e:
            assert "\n" not in str(e) and ledger in str(e)
    finally:
        with open(file, "w", encoding="utf-8") as f:
            f.write(original)


@FUZZ
@given(st.binary(max_size=300) | st.sampled_from([b"", b"\n", b"\n" * 8, "\xe9\n".encode("latin-1") * 8]))
def test_fuzz_any_bytes_as_a_hypothesis_file(fuzz_ledger, data):
    ledger, _ = fuzz_ledger
    hyp = os.path.join(ledger, "tied.seed1.test2016.hyp")
    original = open(hyp, "rb").read()
    try:
        open(hyp, "wb").write(data)
        try:
            compare_line(ledger, "tied", "softmax")
        except OutlayersConfigError as e:
            assert str(e).startswith(hyp) and "\n" not in str(e)
    finally:
        open(hyp, "wb").write(original)


# ----------------------------------------------------------------------------------------------------------
# row files

ROW_DAMAGE = {
    "latin-1": ("# caf\xe9\n--data-bin data --output-layer x\n".encode("latin-1"), "20-tied.args:1: not valid UTF-8"),
    "NUL": (b"# a\n--data-bin data \x00--output-layer x\n", "20-tied.args:2: a NUL byte"),
    "unclosed quote": (b"# a\n--data-bin data --eval-bleu-args '{\n", "cannot be split as the shell would"),
    "empty": (b"", "the row names no --data-bin"),
    "binary": (bytes(range(256)) * 4, "not valid UTF-8"),
}


@pytest.mark.parametrize("case", sorted(ROW_DAMAGE))
def test_a_damaged_row_file_is_one_line_in_status_and_run(tmp_path, monkeypatch, capsys, case):
    rows, ledger, argv, started = one_row_table(tmp_path, monkeypatch, "20-tied", "--data-bin data --output-layer x")
    data, expected = ROW_DAMAGE[case]
    (rows / "20-tied.args").write_bytes(data)
    for command in (argv + ["1"], ["status", "--rows", str(rows / "*.args"), "--ledger", ledger]):
        assert ledger_main(command) == 2 and started == []
        assert expected in one_line(capsys.readouterr().err)


def test_a_row_name_that_cannot_name_a_record_is_refused(tmp_path, monkeypatch, capsys):
    rows, ledger, argv, started = one_row_table(tmp_path, monkeypatch, "20-a.seed2", "--data-bin data --output-layer x")
    assert ledger_main(argv + ["1"]) == 2 and started == []
    assert "the row name 'a.seed2'" in one_line(capsys.readouterr().err)


# ----------------------------------------------------------------------------------------------------------
# identical systems


def test_identical_systems_are_reported_as_identical_with_p_1(tmp_path, capsys):
    """The same translations on both sides: every resampled difference is exactly 0, where sacreBLEU's formula
    (differences strictly above the observed one, plus one, over resamples plus one) reads p = 1/1001 = 0.001."""
    same = {1: sentence_stats(HYP_A, REFS, False), 2: sentence_stats(HYP_B, REFS, False)}
    test = paired_bootstrap_test(same, dict(same))
    assert test == {"diff": 0.0, "p": 1.0, "seeds": [1, 2], "interval": (0.0, 0.0), "identical": True}
    other = paired_bootstrap_test(same, {1: same[2], 2: same[1]}, n_samples=50)
    assert other["identical"] is False and other["p"] < 1.0
    ledger = two_row_ledger(tmp_path)
    fake_record(ledger, "copy", 1, 31.0, HYP_B, baseline="tied")
    assert ledger_main(["compare", "tied", "tied", "--ledger", ledger]) == 0
    assert capsys.readouterr().out == ("t, test2016: tied 31.00 (seed 1) vs tied 31.00 (seed 1): identical (the same "
                                       "row: every test sentence translated the same over seeds 1): Δ 0.00, p = 1 "
                                       "(no difference to test)\n")
    assert "identical (identical translations: " in compare_line(ledger, "copy", "tied")
    line = next(x for x in render(ledger).splitlines() if x.startswith("| copy |"))
    assert "| +0.00 [+0.00, +0.00] (identical translations) | 1.000 (identical) |" in line
    with pytest.raises(ValueError, match="at least 1"):
        paired_bootstrap_test(same, same, n_samples=0)


# ----------------------------------------------------------------------------------------------------------
# render --out and run's output directories


def test_render_out_never_writes_over_a_user_file_or_a_ledger_file(tmp_path, capsys):
    ledger = two_row_ledger(tmp_path)
    record = _record_file(ledger)
    before = open(record, "rb").read()
    for extra in ([], ["--force"]):  # a ledger file: refused even with --force
        assert ledger_main(["render", "--ledger", ledger, "--out", record, *extra]) == 2
        assert "is also an input of this command (a file of" in one_line(capsys.readouterr().err)
    assert open(record, "rb").read() == before
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    assert ledger_main(["render", "--ledger", ledger, "--out", str(notes)]) == 2
    assert "exists; choose another path or pass --force" in one_line(capsys.readouterr().err)
    assert notes.read_text() == "my notes\n"
    out = tmp_path / "ledger.md"
    assert ledger_main(["render", "--ledger", ledger, "--out", str(out)]) == 0
    first = out.read_text()
    svgs = sorted(p.name for p in tmp_path.glob("*.svg"))
    assert svgs == ["ledger-t-scores.svg"]
    fake_record(ledger, "joint", 1, 32.0, HYP_A, baseline="softmax")
    assert ledger_main(["render", "--ledger", ledger, "--out", str(out)]) == 0  # its own earlier render: replaced
    assert out.read_text() != first and "| joint |" in out.read_text()
    (tmp_path / "ledger-t-scores.svg").write_text("<svg>a drawing of mine</svg>\n")
    capsys.readouterr()
    assert ledger_main(["render", "--ledger", ledger, "--out", str(out)]) == 2
    assert "ledger-t-scores.svg' exists" in one_line(capsys.readouterr().err)
    assert (tmp_path / "ledger-t-scores.svg").read_text() == "<svg>a drawing of mine</svg>\n"
    assert ledger_main(["render", "--ledger", ledger, "--out", str(out), "--force"]) == 0
    assert ledger_main(["render", "--ledger", ledger, "--out", str(notes), "--force"]) == 0


def test_run_checks_its_output_directories_before_training(tmp_path, monkeypatch, capsys):
    rows, ledger, argv, started = one_row_table(tmp_path, monkeypatch, "20-tied", "--data-bin data --output-layer x")
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    argv = [a if a != ledger else str(blocker / "runs") for a in argv]
    assert ledger_main(argv + ["1"]) == 2 and started == []
    assert "--ledger '" in (err := one_line(capsys.readouterr().err)) and "cannot create it" in err
    argv = [a if a != str(blocker / "runs") else ledger for a in argv]
    assert ledger_main(argv + ["1", "--work", str(blocker)]) == 2 and started == []
    assert "--work '" in one_line(capsys.readouterr().err)

    import tempfile

    real = tempfile.mkstemp

    def read_only(*a, **kw):  # as a read-only directory answers (root ignores the mode bits, so it is faked)
        if os.path.abspath(kw.get("dir", "")) == os.path.abspath(ledger):
            raise PermissionError(13, "Permission denied")
        return real(*a, **kw)

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    assert ledger_main(argv + ["1", "--work", str(tmp_path / "work")]) == 2 and started == []
    assert f"--ledger '{ledger}" in (err := one_line(capsys.readouterr().err)) and "Permission denied" in err
    monkeypatch.setattr(tempfile, "mkstemp", real)
    assert ledger_main(argv + ["1", "--work", str(tmp_path / "work")]) == 0 and started == [1]


def test_an_empty_reference_is_one_line_naming_it(tmp_path, capsys):
    ledger = two_row_ledger(tmp_path)
    ref = os.path.join(ledger, records.load_record(_record_file(ledger))["test"]["test2016"]["reference"])
    open(ref, "w").close()
    open(os.path.join(ledger, "tied.seed1.test2016.hyp"), "w").close()
    assert ledger_main(["compare", "tied", "softmax", "--ledger", ledger]) == 2
    assert one_line(capsys.readouterr().err).startswith(f"ledger: error: {ref} is empty")


@pytest.mark.parametrize("option, value", [("--lenpen", "nan"), ("--lenpen", "inf"), ("--batch-size", "0")])
def test_run_options_are_refused_before_anything(tmp_path, capsys, option, value):
    with pytest.raises(SystemExit) as e:
        ledger_main(["run", "--rows", str(tmp_path / "*.args"), option, value])
    assert e.value.code == 2 and f"argument {option}: must be" in capsys.readouterr().err


ROW_TEXT = (b"# tied softmax on the tiny Transformer\n# baseline: softmax\n# beam: 5\n# validate: loss -- a reason\n"
            b"--data-bin data --arch outlayers_transformer --eval-bleu-args '{\"beam\": 5}' --output-layer tied\n")


@FUZZ
@given(st.data())
def test_fuzz_a_row_file_corrupted_at_random(tmp_path_factory, data):
    """A row file truncated, with bytes replaced, lines dropped or repeated, Latin-1 bytes, tokens inserted (the
    corruptions of test_readers_hypothesis) or any bytes: a LedgerRow or one line naming the file."""
    _, content = data.draw(corrupted(ROW_TEXT) | st.tuples(st.just("any"), st.binary(max_size=200)))
    path = tmp_path_factory.mktemp("rowfuzz") / "20-tied.args"
    path.write_bytes(content)
    try:
        row = read_ledger_row(str(path), default_data="data")
    except OutlayersConfigError as e:
        assert str(path) in str(e) and "\n" not in str(e)
        return
    assert row.name == "tied" and isinstance(row.train_args, list) and row.data_bin


@pytest.mark.parametrize("keys,value,shown", [
    (("test",), {"\n": None}, "'test.\\n' is null"),
    (("test",), {"\n": {}}, "'test.\\n.sacrebleu' is missing"),
    (("after", "as_trained"), {'a"\tb': None}, "'after.as_trained.a\\\"\\tb' is null"),
    (("params",), {"x\ny": float("nan")}, None),  # a NaN under a key with a newline: its place on one line
])
def test_a_key_with_a_newline_or_quote_is_shown_escaped_on_one_line(fuzz_ledger, keys, value, shown):
    """A record key is shown as JSON writes it (found by the fuzz test above: a key '\\n' split the message)."""
    ledger, original = fuzz_ledger
    file = _record_file(ledger)
    record = json.loads(original)
    target = record
    for k in keys[:-1]:
        target = target[k]
    target[keys[-1]] = dict(target[keys[-1]], **value) if keys == ("params",) else value
    try:
        with open(file, "w", encoding="utf-8") as f:
            f.write(json.dumps(record, allow_nan=True))
        with pytest.raises(OutlayersConfigError) as e:
            records.load_record(file)
        message = str(e.value)
        assert "\n" not in message and message.startswith(file)
        assert (shown or "'params.x\\ny' is not a number") in message
    finally:
        with open(file, "w", encoding="utf-8") as f:
            f.write(original)
