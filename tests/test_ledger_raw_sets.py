"""End to end on a tiny model: the ledger runner trains a row under the converged protocol (validation BLEU,
patience, max epochs), records it with an extra raw test set prepared with the data's own tokeniser, case and
BPE, skips it on a rerun, and the translate command turns raw text into raw text."""
import json
import os
import subprocess

import pytest

from harness import REPO, TINY_TRANSFORMER, run, tokenised_corpus, tool

from fairseq_outlayers.tools.translate import main as translate_main
from fairseq_outlayers.tools.evaluation.scoring import bleu_metric, detokenise, score_subset
from fairseq_outlayers.lab.ledger.__main__ import main as ledger_main
from fairseq_outlayers.lab.ledger import records

pytestmark = pytest.mark.usefixtures("commands_in_process")  # what the runners start: in this process




@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A data directory made the way scripts/prepare-multi30k.sh makes one: tokenised, lowercased, joint BPE
    (fastBPE), binarised, with bpecodes and .done beside the data; the raw (cased) text kept."""
    root = tmp_path_factory.mktemp("prepared")
    raw, tok, prep = tokenised_corpus(root, target_bpe=True)
    codes = root / "codes"
    with open(codes, "w") as f:
        subprocess.run([tool("fast"), "learnbpe", "20", str(tok / "train.de"), str(tok / "train.en")], stdout=f,
                       check=True)
    data = root / "data"
    data.mkdir()
    (data / "bpecodes").write_text(codes.read_text())
    prep.bpe_codes = str(data / "bpecodes")
    bpe = root / "bpe"
    bpe.mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            lines = (tok / f"{split}.{lang}").read_text().splitlines()
            (bpe / f"{split}.{lang}").write_text("".join(x + "\n" for x in prep._bpe(lines)))
    run([tool("fairseq-preprocess"), "--source-lang", "de", "--target-lang", "en", "--trainpref", str(bpe / "train"),
         "--validpref", str(bpe / "valid"), "--testpref", str(bpe / "test"), "--destdir", str(data), "--workers", "1"])
    (data / ".done").write_text("origin: synthetic\nlowercase: 1\nbpe_merges: 20\n")
    return {"root": root, "raw": raw, "data": str(data), "bpe": str(bpe)}


SCORE_KEYS = ("sentences", "sacrebleu", "sacrebleu_signature", "tokenized_bleu", "tokenized_bleu_signature")


def hyps_test2016(record, ledger):
    return records.read_lines(ledger, record["test"]["test2016"]["hypotheses"])


def ledger_args(prepared, ledger, rows):
    raw = prepared["raw"]
    return ["run", "--rows", rows, "--seeds", "1", "--max-epoch", "1", "--patience", "1", "--beam", "2",
            "--test-ref", os.path.join(raw, "test.en"), "--test-set", f"heldout={raw}/valid.de,{raw}/valid.en",
            "--ledger", ledger, "--work", str(prepared["root"] / "work")]


@pytest.mark.long(34)
def test_extra_raw_test_set_is_scored_end_to_end_and_a_recorded_run_is_skipped(prepared, tmp_path, capsys):
    rows = tmp_path / "rows"
    rows.mkdir()
    options = " ".join(TINY_TRANSFORMER + ["--optimizer", "adam", "--lr", "0.003", "--max-tokens", "600", "--cpu",
                                           "--num-workers", "0", "--output-layer", "tied"])
    (rows / "20-tied.args").write_text(f"# tiny tied Transformer\n--data-bin {prepared['data']} {options}\n")
    ledger = str(tmp_path / "runs")
    assert ledger_main(ledger_args(prepared, ledger, str(rows / "*.args"))) == 0

    record = json.load(open(os.path.join(ledger, "tied.seed1.json")))
    assert record["validation"]["metric"] == "bleu" and record["epochs"] == 1 and record["updates"] > 0
    assert "--eval-bleu-remove-bpe" in record["options"] and "--patience" in record["options"]
    assert record["params"]["trained"] > 0 and record["device"] == "cpu"
    assert record["data_digest"] == records.data_digest(prepared["data"])  # the data the run was trained on
    # the learning curve: one validation per epoch, the last one at the run's last update
    assert [p["epoch"] for p in record["curve"]] == [1] and record["curve"][0]["num_updates"] == record["updates"]
    assert record["curve"][0]["bleu"] == record["validation"]["best"]
    assert set(record["test"]) == {"test2016", "heldout"}
    raw = prepared["raw"]
    for name, ref_file in (("test2016", "test.en"), ("heldout", "valid.en")):
        scores = record["test"][name]
        hyps = records.read_lines(ledger, scores["hypotheses"])
        refs = open(os.path.join(raw, ref_file), encoding="utf-8").read().splitlines()
        assert records.read_lines(ledger, scores["reference"]) == refs and len(hyps) == len(refs) == 24
        # the recorded score is sacreBLEU (case-insensitive: the data is lowercased) of the kept hypotheses
        assert "case:lc" in scores["sacrebleu_signature"]
        assert scores["sacrebleu"] == round(bleu_metric(True).corpus_score(hyps, [refs]).score, 2)
    # the extra set went through the training data's own tokenisation, case and BPE
    prepared_src = open(prepared["root"] / "work" / "tied.seed1" / "eval-heldout" / "data" / "text.de").read()
    assert prepared_src == open(os.path.join(prepared["bpe"], "valid.de")).read()

    # a checkpoint trained with --eval-bleu loads under weights-only with the plugin's allow-list only
    import torch

    from fairseq_outlayers.core.checkpoint_safety import ALLOWED_GLOBALS

    ckpt = str(prepared["root"] / "work" / "tied.seed1" / "checkpoint_best.pt")
    allowed = {f"{c.__module__}.{c.__qualname__}" for c in ALLOWED_GLOBALS} | {"numpy._core.multiarray._reconstruct"}
    assert set(torch.serialization.get_unsafe_globals_in_checkpoint(ckpt)) <= allowed

    # one evaluation path: scripts/evaluate.sh (fairseq-generate's stdout file) and the comparison runner
    # (score_subset, behind make demo / make results) give the ledger's figures for the same checkpoint and decoding
    recorded = {k: record["test"]["test2016"][k] for k in SCORE_KEYS}
    out_dir = tmp_path / "eval"
    run(["bash", os.path.join(REPO, "scripts", "evaluate.sh"), ckpt, prepared["data"], "--beam", "2", "--lowercase",
         "--raw-ref", os.path.join(raw, "test.en"), "--cpu", "--out", str(out_dir),
         "--gen-args", "--max-len-a 1.2 --max-len-b 10"])
    assert {k: json.load(open(out_dir / "scores.json"))[k] for k in SCORE_KEYS} == recorded
    scores = score_subset(prepared["data"], ckpt, str(tmp_path / "compare" / "test.hyp"), os.path.join(raw, "test.en"),
                          beam=2)
    assert {k: scores[k] for k in SCORE_KEYS} == recorded
    assert detokenise(open(tmp_path / "compare" / "test.hyp").read().splitlines(), "en") == hyps_test2016(record,
                                                                                                       ledger)

    # rerun: recorded, so skipped (no training, the record unchanged)
    before = open(os.path.join(ledger, "tied.seed1.json"), "rb").read()
    capsys.readouterr()
    assert ledger_main(ledger_args(prepared, ledger, str(rows / "*.args"))) == 0
    out = capsys.readouterr().out
    assert "recorded already: tied seed 1" in out and "fairseq-train" not in out
    assert open(os.path.join(ledger, "tied.seed1.json"), "rb").read() == before
    # the same row name with other options: one line naming both, nothing run
    (rows / "20-tied.args").write_text(f"# changed\n--data-bin {prepared['data']} {options} --lr 0.001\n")
    assert ledger_main(ledger_args(prepared, ledger, str(rows / "*.args"))) == 2
    err = capsys.readouterr().err
    assert "tied.seed1.json was run with" in err and "20-tied.args now gives" in err

    # translate a user's raw text file: one line out per line in, an empty line kept empty, the text cased
    # differently from the lowercased training data; the test set's own translations come out (all 24 sentences
    # in one batch, as in the test-set run: an untrained model's length limit depends on the batch)
    src = open(os.path.join(raw, "test.de"), encoding="utf-8").read().splitlines()
    text = tmp_path / "in.de"
    text.write_text("".join(x + "\n" for x in [src[0], ""] + [src[1].upper()] + src[2:]))
    out = tmp_path / "out.en"
    assert translate_main(["--checkpoint", ckpt, "--data", prepared["data"], "--input", str(text), "--output",
                           str(out), "--beam", "2"]) == 0
    lines = out.read_text().split("\n")[:-1]
    test_hyps = records.read_lines(ledger, record["test"]["test2016"]["hypotheses"])
    assert len(lines) == 25 and lines[1] == "" and lines[:1] + lines[2:] == test_hyps
    assert translate_main(["--checkpoint", ckpt, "--data", prepared["data"], "--input", str(tmp_path / "no.de"),
                           "--output", str(tmp_path / "o")]) == 2
    assert "translate: error: --input" in capsys.readouterr().err


def test_a_row_of_the_other_direction_is_translated_and_detokenised_in_its_own(prepared, tmp_path):
    """An en-de row on the de-en data directory: fairseq-generate gets the row's direction (else it would read the
    data directory's de-en), the German output is scored against the German reference and detokenised as German
    (an extra raw set is prepared from English)."""
    rows = tmp_path / "rows"
    rows.mkdir()
    options = " ".join(TINY_TRANSFORMER + ["--optimizer", "adam", "--lr", "0.003", "--max-tokens", "600", "--cpu",
                                           "--num-workers", "0", "--source-lang", "en", "--target-lang", "de"])
    (rows / "10-en-de.args").write_text(f"# tiny en-de\n--data-bin {prepared['data']} {options}\n")
    raw, ledger = prepared["raw"], str(tmp_path / "runs")
    assert ledger_main(["run", "--rows", str(rows / "*.args"), "--seeds", "1", "--max-epoch", "1", "--patience", "1",
                        "--beam", "2", "--test-ref", os.path.join(raw, "test.de"), "--test-set",
                        f"heldout={raw}/valid.en,{raw}/valid.de", "--ledger", ledger,
                        "--work", str(tmp_path / "work")]) == 0
    record = json.load(open(os.path.join(ledger, "en-de.seed1.json")))
    assert "--source-lang en --target-lang de" in record["test"]["test2016"]["generate"]
    assert record["preparation"].startswith("sacremoses tokenisation (en)")
    refs = records.read_lines(ledger, record["test"]["test2016"]["reference"])
    assert refs == open(os.path.join(raw, "test.de"), encoding="utf-8").read().splitlines()
    assert set(record["test"]) == {"test2016", "heldout"} and record["test"]["heldout"]["sentences"] > 0


@pytest.mark.long(27)
def test_a_step_row_is_its_parents_model_with_a_fitted_bias(prepared, tmp_path, capsys):
    """'# from: tied' + '# after: fit-output-bias': one training for both rows; the step row's record is the same
    checkpoint before the step (its as-trained score is the tied record's) and after it (a new per-word bias in the
    model fairseq-generate loads, its translations recorded); a rerun skips both, another step is refused."""
    import torch

    rows = tmp_path / "rows"
    rows.mkdir()
    options = " ".join(TINY_TRANSFORMER + ["--optimizer", "adam", "--lr", "0.003", "--max-tokens", "600", "--cpu",
                                           "--num-workers", "0", "--output-layer", "tied"])
    (rows / "20-tied.args").write_text(f"# tiny tied Transformer\n--data-bin {prepared['data']} {options}\n")
    (rows / "25-tied-fitbias.args").write_text("# tied + a fitted bias\n# from: tied\n"
                                               "# after: fit-output-bias --epochs 4 --lr 0.1\n")
    raw, ledger, work = prepared["raw"], str(tmp_path / "runs"), tmp_path / "work"
    argv = ["run", "--rows", str(rows / "*.args"), "--seeds", "1", "--max-epoch", "2", "--patience", "1", "--beam",
            "2", "--test-ref", os.path.join(raw, "test.en"), "--ledger", ledger, "--work", str(work)]
    assert ledger_main(argv) == 0
    tied = json.load(open(os.path.join(ledger, "tied.seed1.json")))
    step = json.load(open(os.path.join(ledger, "tied-fitbias.seed1.json")))
    assert capsys.readouterr().out.count("fairseq-train") == 1  # trained once, in work/tied.seed1
    assert sorted(os.listdir(work)) == ["tied-fitbias.seed1", "tied.seed1"]
    assert step["wall_seconds"] == 0 and step["options"] == tied["options"] and step["curve"] == tied["curve"]
    assert (step["baseline"], step["method"]) == ("tied", "tied")
    after = step["after"]
    assert after["step"] == ["fit-output-bias", "--epochs", "4", "--lr", "0.1"] and after["trained_in"] == "tied.seed1"
    assert after["as_trained"]["test2016"]["sacrebleu"] == tied["test"]["test2016"]["sacrebleu"]
    assert after["parent_record_matches"] is True
    # the before-step translations are kept beside the record: the parent's, since it is the same model
    assert after["as_trained"]["test2016"]["hypotheses"] == "tied-fitbias.seed1.test2016.as-trained.hyp"
    assert after["as_trained"]["test2016"]["reference"] == tied["test"]["test2016"]["reference"]
    assert (open(os.path.join(ledger, "tied-fitbias.seed1.test2016.as-trained.hyp")).read()
            == open(os.path.join(ledger, tied["test"]["test2016"]["hypotheses"])).read())
    figures = after["figures"]
    assert figures["train_nll_bits"]["fitted bias"] < figures["train_nll_bits"]["as trained"]
    assert figures["train_sentences"] is None and figures["valid_tokens"] > 0
    # the bias is in the checkpoint that was tested, with --output-bias switched on for fairseq to build it
    vocab = len(open(os.path.join(prepared["data"], "dict.en.txt")).read().splitlines()) + 4
    assert step["params"]["trained"] == tied["params"]["trained"] + vocab
    state = torch.load(work / "tied-fitbias.seed1" / "checkpoint_after.pt", map_location="cpu", weights_only=False)
    assert state["model"]["decoder.output_projection.bias"].abs().sum() > 0 and state["cfg"]["model"].output_bias
    assert "checkpoint_after.pt" in step["test"]["test2016"]["generate"]
    ckpt = str(work / "tied-fitbias.seed1" / "checkpoint_after.pt")
    scores = score_subset(prepared["data"], ckpt, str(tmp_path / "s" / "test.hyp"), os.path.join(raw, "test.en"),
                          beam=2)
    assert scores["sacrebleu"] == step["test"]["test2016"]["sacrebleu"]
    assert detokenise(open(tmp_path / "s" / "test.hyp").read().splitlines(), "en") == hyps_test2016(step, ledger)
    from fairseq_outlayers.lab.ledger.render import render

    assert ("**tied-fitbias**: tied + a fitted bias.\nNo options beyond the shared ones.\n" in render(ledger)
            and "\nThen `fit-output-bias --epochs 4 --lr 0.1` on each seed's best checkpoint of `tied`.\n"
            in render(ledger))
    # rerun: both recorded, nothing trained or fitted
    assert ledger_main(argv) == 0
    out = capsys.readouterr().out
    assert "recorded already: tied-fitbias seed 1" in out and "fairseq-train" not in out and "fit-output" not in out
    (rows / "25-tied-fitbias.args").write_text("# from: tied\n# after: fit-output-bias --epochs 5\n")
    assert ledger_main(argv) == 2
    assert "made with the step `fit-output-bias --epochs 4 --lr 0.1` after training" in capsys.readouterr().err
    # the parent's checkpoints gone (another machine, a cleaned work directory): the step row trains tied again,
    # the same seed on the same machine gives the same model, and the record says it is the recorded one
    import shutil

    shutil.rmtree(work / "tied.seed1")
    os.remove(os.path.join(ledger, "tied-fitbias.seed1.json"))
    assert ledger_main(argv) == 0
    assert capsys.readouterr().out.count("fairseq-train") == 1
    again = json.load(open(os.path.join(ledger, "tied-fitbias.seed1.json")))
    assert again["after"]["parent_record_matches"] is True and again["wall_seconds"] > 0
    assert again["after"]["as_trained"]["test2016"]["sacrebleu"] == tied["test"]["test2016"]["sacrebleu"]


@pytest.mark.long(53)
def test_one_runner_a_quick_row_through_the_ledger_the_sweep_and_the_demo(prepared, tmp_path, capsys):
    """One row file, one runner: a quick row (``# base:``, ``# budget:``, ``# beam:``, ``# decodes:``) trained by
    ``ledger run`` is recorded with its budget, its validation BLEU and its further decodes; the sweep's table reads
    that record without training again; ``ledger render`` renders it; the demo runs the same row file with the
    same runner at its own budget."""
    from harness import load_script

    from fairseq_outlayers.lab import compare

    raw = prepared["raw"]
    base = tmp_path / "base.args"
    base.write_text("# shared\n" + " ".join(TINY_TRANSFORMER + [
        "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "600", "--cpu", "--num-workers", "0",
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"]) + "\n")
    rows = tmp_path / "rows"
    rows.mkdir()
    row = rows / "20-tied.args"
    row.write_text(f"# tiny tied Transformer, quick\n# base: {base}\n# budget: 6\n# beam: 1\n# decodes: 2 2@40\n"
                   f"--data-bin {prepared['data']} --output-layer tied\n")
    records_dir, work = tmp_path / "sweep-records", tmp_path / "work"
    ledger = str(records_dir / "runs")
    args = ["run", "--rows", str(row), "--seeds", "1", "--test-ref", os.path.join(raw, "test.en"),
            "--valid-ref", os.path.join(raw, "valid.en"), "--ledger", ledger, "--work", str(work)]
    assert ledger_main(args) == 0
    record = records.load_record(os.path.join(ledger, "tied.seed1.json"))
    assert record["updates"] == 6 and record["options"][-4:] == ["--max-update", "6", "--seed", "1"]
    assert "--patience" not in record["options"] and "--eval-bleu" not in record["options"]
    assert record["options"].count("--criterion") == 1 and "--label-smoothing" in record["options"]
    v = record["validation"]
    assert v["metric"] == "budget" and v["budget"] == 6 and isinstance(v["bleu"], float)
    assert record["decoding"]["beam"] == 1 and list(record["decodes"]["test2016"]) == ["2"]  # no scale: not continuous
    assert record["best_epoch"] == record["epochs"]  # the last checkpoint is the model
    capsys.readouterr()
    assert ledger_main(args) == 0
    assert "recorded already: tied seed 1" in capsys.readouterr().out
    # a decode added to the row is added to the recorded run from its checkpoint; without the checkpoint, it is said
    row.write_text(row.read_text().replace("# decodes: 2 2@40", "# decodes: 2 2@40 3"))
    assert ledger_main(args) == 0
    record = records.load_record(os.path.join(ledger, "tied.seed1.json"))
    assert sorted(record["decodes"]["test2016"]) == ["2", "3"] and record["updates"] == 6
    last = work / "tied.seed1" / "checkpoint_last.pt"
    os.rename(last, str(last) + ".away")
    row.write_text(row.read_text().replace("# decodes: 2 2@40 3", "# decodes: 2 2@40 3 4"))
    assert ledger_main(args) == 0
    assert "checkpoint_last.pt is gone; decodes 4 not made" in capsys.readouterr().out
    assert "4" not in records.load_record(os.path.join(ledger, "tied.seed1.json"))["decodes"]["test2016"]
    os.rename(str(last) + ".away", last)

    assert ledger_main(["render", "--ledger", ledger, "--out", "-"]) == 0
    assert "6 updates, last checkpoint; beam 1" in capsys.readouterr().out

    sweep = load_script("vmf_sweep.py")
    sweep.main(["--rows", str(row), "--seeds", "1", "--records", str(records_dir), "--out", str(work),
                "--raw-dir", raw, "--test-prefix", "test", "--valid-prefix", "valid"])
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| tied |")][0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:4] == [f"{v['bleu']:.2f}", f"{record['test']['test2016']['sacrebleu']:.2f}",
                          f"{record['decodes']['test2016']['2']:.2f}"]

    demo = tmp_path / "demo"
    compare.main(["--data-bin", prepared["data"], "--raw-dir", raw, "--test-prefix", "test", "--rows", str(row),
                  "--out", str(demo), "--max-update", "4"])
    quick = records.load_record(os.path.join(demo, "records", "tied.seed1.json"))
    assert quick["updates"] == 4 and quick["validation"]["budget"] == 4 and quick["options"][1:-4] == \
        record["options"][1:-4]
    assert "| tied | 1 |" in capsys.readouterr().out and os.path.isfile(demo / "results.md")
    # the same demo directory at another budget: one line naming the record, before anything trains
    with pytest.raises(SystemExit, match=r"compare: error: .*tied.seed1.json was run with .*--max-update 4"):
        compare.main(["--data-bin", prepared["data"], "--raw-dir", raw, "--test-prefix", "test", "--rows", str(row),
                      "--out", str(demo), "--max-update", "5"])
