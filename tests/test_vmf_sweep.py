"""scripts/vmf_sweep.py: the table from run records (means over finished seeds, missing seeds shown, scaled
decodes as their own columns) and its option parsing."""
import argparse

import pytest

from harness import load_script



@pytest.fixture(scope="module")
def sweep():
    return load_script("vmf_sweep.py")


def _meta(bleu, norm, speed):
    return {"bleu": bleu, "valid": {"norm": norm, "cos": 0.5, "nn_acc": 60.0}, "speed": speed}


def test_table_means_missing_seeds_and_scaled_columns(sweep):
    rows = [{"name": "a"}, {"name": "b"}]
    metas = {("a", 1): _meta({"1": 20.0, "5": 21.0, "5@40": 22.0}, 10.0, 100.0),
             ("a", 2): _meta({"1": 22.0, "5": 23.0, "5@40": 25.0}, 14.0, 300.0),
             ("b", 1): _meta({"1": 30.0, "5": 31.0}, 20.0, 50.0)}
    metas[("a", 1)]["valid_bleu"] = {"1": 30.0}
    metas[("a", 2)]["valid_bleu"] = {"1": 31.0}
    lines = sweep.table(rows, metas, [1, 2], [1, 5], [(5, 40.0)]).splitlines()
    assert lines[0].split(" | ")[1:4] == ["BLEU beam 1 (mean)", "BLEU beam 5 (mean)", "BLEU beam 5, scale 40 (mean)"]
    # the validation BLEU that rows are chosen by comes first; a run recorded without it is a dash
    with_valid = sweep.table(rows, metas, [1, 2], [1, 5], [(5, 40.0)], valid_beams=[1]).splitlines()
    assert with_valid[0].split(" | ")[1:3] == ["valid BLEU beam 1 (mean)", "BLEU beam 1 (mean)"]
    assert [c.strip() for c in with_valid[2].strip("|").split("|")][1] == "30.50"
    assert [c.strip() for c in with_valid[3].strip("|").split("|")][1] == "—"
    a = [c.strip() for c in lines[2].strip("|").split("|")]
    assert a[:7] == ["a", "21.00", "22.00", "23.50", "20.00 / 22.00", "21.00 / 23.00", "22.00 / 25.00"]
    assert a[7] == "12.0" and a[-1] == "200"
    b = [c.strip() for c in lines[3].strip("|").split("|")]
    # seed 2 of b is missing: shown, never averaged in; a decode a run lacks is a dash
    assert b[1:7] == ["30.00", "31.00", "—", "30.00 / missing", "31.00 / missing", "— / missing"]


def test_decodes_directive():
    from fairseq_outlayers.lab.ledger.rows import decode_key, parse_decodes

    assert parse_decodes("5 5@40") == [(5, None), (5, 40.0)] and parse_decodes("") == []
    assert decode_key(5, 40.0) == "5@40" and decode_key(5, 12.5) == "5@12.5" and decode_key(1, None) == "1"
    for bad in ("x", "5@x", "5@", "@40", "0", "0@40", "5@0", "5@-1", "5@inf"):
        with pytest.raises(ValueError):
            parse_decodes(bad)


def _record(beam=1):
    return {"row": "a", "seed": 1, "decoding": {"beam": beam}, "tokens_per_second": 250.0,
            "test": {"test2016": {"sacrebleu": 28.0}}, "decodes": {"test2016": {"5": 27.5, "5@40": 29.0}},
            "validation": {"metric": "budget", "budget": 800, "bleu": 27.9},
            "curve": [{"epoch": 1, "cos": 0.1}, {"epoch": 7, "loss": -3.0, "cos": 0.52, "norm": 11.0, "nn_acc": 61.0}]}


def test_a_ledger_record_reads_as_a_sweep_run(sweep):
    """The table's figures of a run made by the ledger's runner: the row's beam and its decodes, the validation
    BLEU at the row's beam, the last validation's κ/cos/nn_acc."""
    got = sweep.sweep_figures(_record())
    assert got["bleu"] == {"1": 28.0, "5": 27.5, "5@40": 29.0} and got["valid_bleu"] == {"1": 27.9}
    assert got["valid"] == {"loss": -3.0, "cos": 0.52, "norm": 11.0, "nn_acc": 61.0} and got["speed"] == 250.0
    rows = [{"name": "a"}]
    line = sweep.table(rows, {("a", 1): got}, [1], [1, 5], [(5, 40.0)], [1]).splitlines()[2]
    assert [c.strip() for c in line.strip("|").split("|")][:5] == ["a", "27.90", "28.00", "27.50", "29.00"]


def test_the_sweeps_first_records_are_read_and_never_rerun(sweep, tmp_path):
    """A record of the sweep's first format counts as the run when its options are the row file's own (the
    directives added since are comments); other options stop the sweep with the file named."""
    import json

    from fairseq_outlayers.lab.ledger.rows import LedgerRow

    path = tmp_path / "10-released.args"
    path.write_text("# vMF\n# budget: 800\n--output-layer continuous --criterion vmf_nll\n")
    row = LedgerRow("released", str(path), "d", ["--output-layer", "continuous", "--criterion", "vmf_nll"],
                    budget=800)
    assert sweep.legacy_record(str(tmp_path), row, 1) is None
    meta = {"row": "released", "seed": 1, "args": "--output-layer continuous --criterion vmf_nll", "bleu": {"1": 28.4}}
    (tmp_path / "released.seed1.json").write_text(json.dumps(meta))
    assert sweep.legacy_record(str(tmp_path), row, 1) == meta
    row.budget = 400  # the first records are 800-update runs: another budget is another experiment
    assert sweep.legacy_record(str(tmp_path), row, 1) is None
    row.budget = 800
    (tmp_path / "released.seed1.json").write_text(json.dumps(dict(meta, args="--output-layer tied")))
    with pytest.raises(SystemExit, match="released.seed1.json was run with other options"):
        sweep.legacy_record(str(tmp_path), row, 1)
    (tmp_path / "released.seed1.json").write_bytes(b'{"row": "rele')
    with pytest.raises(SystemExit, match="released.seed1.json cannot be read as a sweep record"):
        sweep.legacy_record(str(tmp_path), row, 1)


def test_each_sweep_run_takes_one_gpu_slot_and_gives_it_back(sweep, monkeypatch):
    """With --jobs 3 on GPUs "5,7" a run's fairseq processes see one GPU (fairseq would otherwise train it
    data-parallel over both), the slot coming back when the run ends, also when it fails."""
    from fairseq_outlayers.lab import gpus
    from fairseq_outlayers.lab.ledger import runner

    seen = []

    def fake(row, seed, settings):
        seen.append(settings.env)
        if seed == 2:
            raise RuntimeError("failed run")
        return _record(), False

    monkeypatch.setattr(runner, "run", fake)
    settings = runner.Settings(ledger="l", work="w", test_ref="ref")
    free = gpus.slots(3, ["5", "7"])
    assert sweep.run_one(None, 1, settings, free)["bleu"]["1"] == 28.0
    with pytest.raises(RuntimeError):
        sweep.run_one(None, 2, settings, free)
    assert seen == [{"CUDA_VISIBLE_DEVICES": "5"}, {"CUDA_VISIBLE_DEVICES": "7"}]
    assert sorted(free.get() for _ in range(3)) == ["5", "5", "7"] and free.empty()
    sweep.run_one(None, 3, settings, None)
    assert seen[-1] == {}
