"""Continuous outputs against a teacher's vectors, inside the ledger: the mixed table of ``outlayers-vectors``, the
``# teacher:`` / ``# test-beam:`` / ``# scales:`` directives, and end to end on a tiny word-level corpus a teacher
cut off and resumed, then its student exported, trained and decoded at beam 5 with the scale chosen on validation;
a changed teacher refused by the vectors' digest."""
import hashlib
import json
import os
import shutil

import pytest
import torch

from harness import TINY_TRANSFORMER, run, tokenised_corpus, tool

from fairseq_outlayers.errors import OutlayersConfigError
from fairseq_outlayers.lab.ledger import records
from fairseq_outlayers.lab.ledger.__main__ import main as ledger_main
from fairseq_outlayers.lab.ledger.rows import read_ledger_row, row_options, with_vectors
from fairseq_outlayers.methods.continuous.target_vectors import random_unit_vectors
from fairseq_outlayers.tools.vectors import main as vectors_main


def _sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _read_vec(path):
    lines = open(path, encoding="utf-8").read().splitlines()
    n, dim = map(int, lines[0].split())
    rows = {w: torch.tensor([float(x) for x in v]) for w, *v in (line.split() for line in lines[1:])}
    assert len(rows) == n and all(len(v) == dim for v in rows.values())
    return rows


def test_the_mixed_table_gives_exactly_the_rare_words_random_unit_rows_drawn_by_seed(tmp_path, capsys):
    # the dictionary as fairseq-preprocess writes it: by descending count; w0 .. w19 counted 1 .. 20 times
    d = tmp_path / "dict.en.txt"
    d.write_text("".join(f"w{i} {i + 1}\n" for i in reversed(range(20))), encoding="utf-8")
    vec = tmp_path / "v.vec"
    g = torch.Generator().manual_seed(0)
    table = {f"w{i}": torch.randn(8, generator=g) * 3 + 1 for i in range(20)}
    table["</s>"] = torch.randn(8, generator=g)
    vec.write_text(f"{len(table)} 8\n" + "".join(w + " " + " ".join(f"{x:.6f}" for x in v.tolist()) + "\n"
                                                 for w, v in table.items()), encoding="utf-8")
    out = {k: str(tmp_path / f"{k}.vec") for k in ("a", "b", "c")}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        assert vectors_main(["mix", str(d), str(vec), out[name], "--random-below", "6", "--seed", str(seed)]) == 0
    assert "(5 random)" in capsys.readouterr().out  # w0 .. w4: counted 1-5 times, fewer than 6
    assert _sha(out["a"]) == _sha(out["b"]) != _sha(out["c"])
    a, c = _read_vec(out["a"]), _read_vec(out["c"])
    assert len(a) == 20 + 3  # every word and <s> </s> <unk>; not <pad>
    for row in a.values():
        assert abs(row.norm().item() - 1) < 1e-6
    rare = [f"w{i}" for i in (4, 3, 2, 1, 0)]  # in dictionary order
    drawn = random_unit_vectors(5, 8, 3)
    for k, w in enumerate(rare):
        assert torch.allclose(a[w], drawn[k], atol=1e-7)
        assert not torch.allclose(a[w], c[w], atol=1e-3)  # another seed, other random rows
    for i in range(5, 20):  # the frequent words keep their own direction, whatever the seed
        w = f"w{i}"
        assert torch.allclose(a[w], table[w] / table[w].norm(), atol=1e-6) and torch.equal(a[w], c[w])
    assert torch.allclose(a["</s>"], table["</s>"] / table["</s>"].norm(), atol=1e-6)  # a special is never drawn
    # --center: the kept rows centred over the kept words, then unit
    centred = str(tmp_path / "centred.vec")
    assert vectors_main(["mix", str(d), str(vec), centred, "--random-below", "6", "--center"]) == 0
    cen = _read_vec(centred)
    kept = [w for w in cen if w not in rare]
    assert all(abs(cen[w].norm().item() - 1) < 1e-6 for w in cen)
    assert cen["w10"] @ cen["w11"] < a["w10"] @ a["w11"]  # the common direction is gone


def test_teacher_scales_and_test_beam_directives(tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "10-base.args").write_text("# the teacher\n--data-bin d --output-layer softmax\n")
    head = "# the student\n# beam: 1\n# test-beam: 5\n# scales: none 10 20\n"
    (folder / "20-student.args").write_text(head + "# teacher: base --random-below 3 --center\n--data-bin d "
                                            "--output-layer continuous --target-vectors @teacher\n")
    row = read_ledger_row(str(folder / "20-student.args"))
    assert (row.beam, row.test_beam, row.scales) == (1, 5, [None, 10.0, 20.0])
    assert (row.teacher.row, row.teacher.random_below, row.teacher.center) == ("base", 3, True)
    assert row.testing_beam(5) == 5 and row.decoding_beam(5) == 1
    options = row_options(row, 2, 5, 50, 5)
    assert '"beam": 1' in " ".join(options) and "@teacher" in options  # the records keep the placeholder
    assert with_vectors(options, "v.vec")[options.index("@teacher")] == "v.vec"
    for text, why in (("# teacher: base\n--data-bin d --output-layer continuous --target-vectors v.vec\n",
                       "as the value of the option that reads its vectors, once"),
                      ("# x\n--data-bin d --output-layer continuous --target-vectors @teacher\n", "needs '# teacher"),
                      ("# teacher: base --center\n--data-bin d --target-vectors @teacher\n", "mixed table"),
                      ("# teacher: base --matrix both\n--data-bin d --target-vectors @teacher\n", "'output' or"),
                      ("# scales: none none\n--data-bin d\n", "different scales"),
                      ("# scales: 0\n--data-bin d\n", "positive")):
        (folder / "30-bad.args").write_text(text)
        with pytest.raises(OutlayersConfigError, match=why):
            read_ledger_row(str(folder / "30-bad.args"))


@pytest.fixture(scope="module")
def words(tmp_path_factory):
    """A word-level data directory as scripts/prepare-multi30k.sh --word-target makes one, without source BPE:
    tokenised, lowercased, binarised, with .done; the raw text kept."""
    root = tmp_path_factory.mktemp("words")
    raw, tok, prep = tokenised_corpus(root, target_bpe=False)
    data = root / "data"
    run([tool("fairseq-preprocess"), "--source-lang", "de", "--target-lang", "en", "--trainpref", str(tok / "train"),
         "--validpref", str(tok / "valid"), "--testpref", str(tok / "test"), "--destdir", str(data),
         "--workers", "1"])
    (data / ".done").write_text("origin: synthetic\nlowercase: 1\n")
    return {"root": root, "raw": raw, "data": str(data)}


COMMON = TINY_TRANSFORMER + ["--optimizer", "adam", "--lr", "0.003", "--max-tokens", "600", "--cpu",
                             "--num-workers", "0", "--data-buffer-size", "0"]


def _rows(folder, data, teacher_line="# teacher: teacher"):
    folder.mkdir(exist_ok=True)
    common = " ".join(COMMON)
    (folder / "10-teacher.args").write_text(f"# a tiny tied softmax\n--data-bin {data} {common} "
                                            "--output-layer tied\n")
    (folder / "20-student.args").write_text(
        "# continuous outputs against the teacher's output matrix\n# baseline: teacher\n# beam: 1\n# test-beam: 5\n"
        f"# scales: none 10\n# decodes: 1\n{teacher_line}\n--data-bin {data} {common} --output-layer continuous "
        "--criterion vmf_nll --vmf-variant released --target-vectors @teacher --target-vectors-center\n")


def _args(words, ledger, rows, work):
    raw = words["raw"]
    return ["run", "--rows", rows, "--seeds", "1", "--max-epoch", "2", "--patience", "1", "--beam", "2",
            "--test-ref", os.path.join(raw, "test.en"), "--valid-ref", os.path.join(raw, "valid.en"),
            "--ledger", ledger, "--work", work]


in_process = pytest.mark.usefixtures("commands_in_process")  # the ledger's commands: in this process


@pytest.mark.long(28)
@in_process
def test_a_student_after_its_interrupted_teacher_then_a_changed_teacher_refused(words, tmp_path, monkeypatch,
                                                                                 capsys):
    from fairseq_outlayers.lab import fairseq_runs

    rows, ledger, work = tmp_path / "rows", str(tmp_path / "runs"), str(tmp_path / "work")
    _rows(rows, words["data"])
    real, cut = fairseq_runs.run_training, []

    def cut_once(cmd, log_path, run_dir, **kw):  # the first training stops after 3 updates, as a killed run would
        if not cut:
            cut.append(run_dir)
            real(cmd + ["--max-update", "3"], log_path, run_dir, **kw)
            raise RuntimeError("interrupted")
        return real(cmd, log_path, run_dir, **kw)

    monkeypatch.setattr(fairseq_runs, "run_training", cut_once)
    # only the student is asked for: the ledger trains its teacher first (cut off here), and the student fails
    assert ledger_main(_args(words, ledger, str(rows / "20-student.args"), work)) == 1
    assert cut == [os.path.join(work, "teacher.seed1")] and not os.path.exists(os.path.join(ledger, "teacher.seed1.json"))
    assert "student seed 1 FAILED: interrupted" in capsys.readouterr().out
    # again: the teacher resumes from its checkpoint and is recorded, then the student trains against its export
    assert ledger_main(_args(words, ledger, str(rows / "20-student.args"), work)) == 0
    teacher = records.load_record(os.path.join(ledger, "teacher.seed1.json"))
    student = records.load_record(os.path.join(ledger, "student.seed1.json"))
    assert teacher["resumed"] is True and teacher["updates"] > 3
    vectors = os.path.join(work, "teacher.seed1", "vectors.output.vec")
    t = student["teacher"]
    assert (t["row"], t["seed"], t["best_updates"], t["retrained"]) == ("teacher", 1, teacher["best_updates"], False)
    assert t["record_matches"] is True  # the recorded model itself
    assert t["vectors_digest"] == records.file_digest(vectors)
    assert t["checkpoint_digest"] == records.file_digest(os.path.join(work, "teacher.seed1", "checkpoint_best.pt"))
    assert t["export"].startswith("outlayers-vectors export ") and "--matrix output" in t["export"]
    # the record keeps the placeholder (machine-independent options); the command names the file
    assert "@teacher" in student["options"] and vectors in student["command"]
    # the test at beam 5 with the scale chosen on validation, and beam 1 beside it
    assert student["decoding"]["beam"] == 5 and set(student["decoding"]["scale_validation"]) == {"none", "10"}
    best = max(student["decoding"]["scale_validation"].items(), key=lambda kv: kv[1])[0]
    assert student["decoding"]["scale"] == (None if best == "none" else 10.0)
    assert '"beam": 1' in " ".join(student["options"])  # early stopping on greedy decoding
    assert set(student["decodes"]["test2016"]) == {"1"}
    generate = student["test"]["test2016"]["generate"]
    assert "--beam 5" in generate and (("continuous_score_scale" in generate) == (best != "none"))
    # the vectors the student trained against are the teacher's output matrix, unit rows
    ckpt = torch.load(os.path.join(work, "teacher.seed1", "checkpoint_best.pt"), map_location="cpu",
                      weights_only=False)
    weight = ckpt["model"]["decoder.embed_tokens.weight"]
    exported = _read_vec(vectors)
    assert torch.allclose(exported["</s>"], weight[2], atol=1e-4)

    # a rerun: both recorded, nothing trained, the export reused
    before = _sha(vectors)
    assert ledger_main(_args(words, ledger, str(rows / "*.args"), work)) == 0
    assert "recorded already: student seed 1" in capsys.readouterr().out and _sha(vectors) == before

    # the teacher's checkpoint changed (same update, other weights) while the student is to be trained again
    # (its record moved away): the export is made again, with another digest, and the student's run is refused
    ckpt["model"]["decoder.embed_tokens.weight"] = weight + 0.5
    torch.save(ckpt, os.path.join(work, "teacher.seed1", "checkpoint_best.pt"))
    os.rename(os.path.join(ledger, "student.seed1.json"), str(tmp_path / "student.seed1.json"))
    assert ledger_main(_args(words, ledger, str(rows / "20-student.args"), work)) == 2
    err = capsys.readouterr().err
    assert f"with digest {t['vectors_digest']}" in err and records.file_digest(vectors) in err
    assert "student.seed1" in err and "remove" in err


@pytest.mark.long(23)
@in_process
def test_a_mixed_teacher_table_is_exported_with_the_runs_seed(words, tmp_path, capsys):
    """The mixed table of a teacher row: words counted fewer than N times get random unit rows drawn with the
    run's seed, every row a unit vector; the ledger page names the teacher and the scales tried."""
    rows, ledger, work = tmp_path / "rows", str(tmp_path / "runs"), str(tmp_path / "work")
    _rows(rows, words["data"], "# teacher: teacher --random-below 7")
    assert ledger_main(_args(words, ledger, str(rows / "*.args"), work)) == 0
    student = records.load_record(os.path.join(ledger, "student.seed1.json"))
    vectors = os.path.join(work, "teacher.seed1", "vectors.output.random-below7.vec")
    from fairseq_outlayers.methods.shared_private.word_pairs.corpus import load_dictionary

    dictionary = load_dictionary(os.path.join(words["data"], "dict.en.txt"))
    rare = [dictionary[i] for i in range(dictionary.nspecial, len(dictionary))
            if dictionary.count[i] < 7 and not dictionary[i].startswith("madeupword")]  # fillers are not exported
    assert len(rare) == 5  # the synthetic corpus's five words seen 3-6 times
    assert student["teacher"]["random_rows"] == 5 and "--random-below 7 --seed 1" in student["teacher"]["export"]
    table = _read_vec(vectors)
    drawn = random_unit_vectors(len(rare), len(table["</s>"]), 1)
    for k, w in enumerate(rare):
        assert torch.allclose(table[w], drawn[k], atol=1e-7)
    assert all(abs(v.norm().item() - 1) < 1e-6 for v in table.values())
    shutil.rmtree(work)  # the tables come from the records alone
    capsys.readouterr()
    assert ledger_main(["render", "--ledger", ledger, "--out", "-", "--claims", "", "--seeds", "1"]) == 0
    page = capsys.readouterr().out
    assert "Early stopping on validation bleu; beam 5, score scale chosen on validation among none, 10." in page
    assert ("Target vectors: the output matrix of the same seed's `teacher` (`checkpoint_best.pt`), words seen fewer "
            "than 7 times random unit vectors; the digests are in the records.") in page


def test_seeds_of_a_row_decoded_otherwise_are_not_mixed(tmp_path):
    """A row whose recorded seeds were tested at beam 1 cannot gain a seed tested at beam 5 (or with a scale chosen
    on validation): its seeds are averaged."""
    from fairseq_outlayers.lab.ledger.runner import Settings, check_decoding

    folder = tmp_path / "t"
    folder.mkdir()
    path = folder / "20-word-vmf.args"
    path.write_text("# continuous\n# beam: 1\n--data-bin d --output-layer continuous\n")
    s = Settings(ledger=str(tmp_path), work=str(tmp_path), test_ref="r")
    old = [{"row": "word-vmf", "table": "t", "seed": 1, "decoding": {"beam": 1}}]
    check_decoding(old, read_ledger_row(str(path)), s)  # as recorded: fine
    path.write_text("# continuous\n# beam: 1\n# test-beam: 5\n# scales: none 10\n--data-bin d --output-layer "
                    "continuous\n")
    with pytest.raises(OutlayersConfigError, match="seed 1 of row 'word-vmf' was tested at beam 1, the row now asks "
                                                   "for beam 5, scale chosen on validation"):
        check_decoding(old, read_ledger_row(str(path)), s)
    check_decoding([dict(old[0], row="other")], read_ledger_row(str(path)), s)  # another row's records: fine


def test_status_of_a_student_names_its_teacher_and_reads_its_partial_run(tmp_path):
    from fairseq_outlayers.lab.ledger.rows import teacher_vectors
    from fairseq_outlayers.lab.ledger.status import run_state

    data = tmp_path / "data"
    data.mkdir()
    (data / "dict.en.txt").write_text("a 1\n")
    _rows(tmp_path / "rows", str(data))
    row = read_ledger_row(str(tmp_path / "rows" / "20-student.args"))
    work, ledger = str(tmp_path / "work"), str(tmp_path / "runs")
    state = run_state(row, 1, ledger, work, 5, 50, 5)
    assert state["text"] == f"not started: first teacher seed 1 (trained unless its checkpoint is in {work}), exported"
    run_dir = tmp_path / "work" / "student.seed1"
    run_dir.mkdir(parents=True)
    vectors = teacher_vectors(row, 1, work)
    assert vectors == os.path.join(work, "teacher.seed1", "vectors.output.vec")
    (run_dir / "options.json").write_text(json.dumps(with_vectors(row_options(row, 1, 5, 50, 5), vectors)))
    assert run_state(row, 1, ledger, work, 5, 50, 5)["state"] == "partial"  # not "other options"


def test_a_teacher_trained_again_is_trained_once_for_every_student_of_its_seed(tmp_path, monkeypatch):
    """A teacher retrained with other threads is not its recorded model (2026-12-04: best update 4,165 against
    4,879). The students after the first reuse that retrained model; before, each trained it again from its last
    checkpoint, so the levers of one sweep got different teachers. A checkpoint changed since is trained again."""
    import types

    from fairseq_outlayers.lab.ledger import teacher as teacher_mod

    monkeypatch.setattr(records, "recorded", lambda *a, **k: {"best_updates": 99, "validation": {"best": 3.0}})
    monkeypatch.setattr(teacher_mod, "row_options", lambda *a, **k: [])
    row = types.SimpleNamespace(name="teacher", path="10-teacher.args", training_name=lambda: "teacher")
    s = types.SimpleNamespace(work=str(tmp_path), ledger=str(tmp_path / "runs"), patience=5, max_epoch=50, beam=5)
    best = tmp_path / "teacher.seed1" / "checkpoint_best.pt"
    trained = []

    def train(teacher, seed, settings, options, run_dir):
        trained.append(run_dir)
        os.makedirs(run_dir, exist_ok=True)
        torch.save({"optimizer_history": [{"num_updates": 40 + len(trained)}], "extra_state": {"best": 2.0}}, best)

    facts = [teacher_mod._teacher_checkpoint(row, 1, s, None, train)[1] for _ in range(2)]
    assert len(trained) == 1  # the second student reuses it
    assert [(f["best_updates"], f["retrained"], f["record_matches"]) for f in facts] == [(41, True, False)] * 2
    torch.save({"optimizer_history": [{"num_updates": 7}], "extra_state": {"best": 1.0}}, best)  # changed by hand
    assert teacher_mod._teacher_checkpoint(row, 1, s, None, train)[1]["best_updates"] == 42 and len(trained) == 2
