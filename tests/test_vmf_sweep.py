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


def test_scaled_decode_option(sweep):
    assert sweep._parse_scaled("5:40") == (5, 40.0) and sweep.scaled_key(5, 40.0) == "5@40"
    assert sweep.scaled_key(5, 12.5) == "5@12.5"
    for bad in ("5", "5:x", "0:40", "5:0", "5:-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            sweep._parse_scaled(bad)


def test_each_sweep_run_takes_one_gpu_slot_and_gives_it_back(sweep, monkeypatch):
    """With --jobs 3 on GPUs "5,7" a run's fairseq processes see one GPU (fairseq would otherwise train it
    data-parallel over both), the slot coming back when the run ends, also when it fails."""
    from fairseq_outlayers.lab import gpus

    seen = []

    def fake(row, seed, args, base_args, ref_path, lock, env):
        seen.append(env)
        if seed == 2:
            raise RuntimeError("failed run")
        return {"seed": seed}

    monkeypatch.setattr(sweep, "_run_one", fake)
    free = gpus.slots(3, ["5", "7"])
    assert sweep.run_one({}, 1, None, [], "ref", None, free) == {"seed": 1}
    with pytest.raises(RuntimeError):
        sweep.run_one({}, 2, None, [], "ref", None, free)
    assert seen == [{"CUDA_VISIBLE_DEVICES": "5"}, {"CUDA_VISIBLE_DEVICES": "7"}]
    assert sorted(free.get() for _ in range(3)) == ["5", "5", "7"] and free.empty()
    sweep.run_one({}, 3, None, [], "ref", None, None)
    assert seen[-1] == {}
