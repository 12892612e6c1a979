"""A ledger run resumed from its checkpoint keeps fairseq's --patience count (fairseq holds it in memory only)."""
import sys
from types import SimpleNamespace

import pytest

from fairseq_outlayers.lab.ledger import patience


def validation(epoch, bleu, loss):
    return (f"2026-11-24 20:{epoch:02d}:00 | INFO | valid | epoch {epoch:03d} | valid on 'valid' subset | loss {loss} "
            f"| nll_loss 2.5 | bleu {bleu} | num_updates {126 * epoch}\n")


def write_log(path, scores):
    path.write_text("".join(validation(e, b, l) for e, (b, l) in enumerate(scores, start=1)))
    return str(path)


def test_early_stopping_state_counts_like_fairseq(tmp_path):
    # a tie with the best does not reset the count (fairseq's is_better is strict); loss is minimised
    log = write_log(tmp_path / "train.log", [(10.0, 5.0), (20.0, 4.0), (19.0, 4.5), (20.0, 3.9), (18.5, 4.2)])
    assert patience.early_stopping_state(log, "bleu") == (20.0, 3)
    assert patience.early_stopping_state(log, "loss") == (3.9, 1)
    assert patience.early_stopping_state(write_log(tmp_path / "empty.log", []), "bleu") is None
    # epoch 5 was validated by a run killed before its checkpoint was saved: the resume from epoch 4 redoes it
    assert patience.early_stopping_state(log, "bleu", upto_epoch=4) == (20.0, 2)


def test_resume_entry_sets_fairseqs_own_count_and_hands_over_the_arguments(monkeypatch):
    from fairseq_cli import train

    seen = {}
    monkeypatch.setattr(train, "cli_main", lambda: seen.update(argv=list(sys.argv)))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    patience.main(["20.0", "3", "--", "data", "--patience", "5", "--seed", "2"])
    assert seen["argv"] == ["fairseq-train", "data", "--patience", "5", "--seed", "2"]
    # fairseq's own should_stop_early now stops after two more validations without a strictly better score,
    # as an uninterrupted run with best 20.0 three validations ago would
    cfg = SimpleNamespace(checkpoint=SimpleNamespace(patience=5, maximize_best_checkpoint_metric=True))
    assert train.should_stop_early(cfg, 19.9) is False
    assert train.should_stop_early(cfg, 20.0) is True
    train.should_stop_early.best = 20.5  # a better score resets it, as it does in fairseq
    assert train.should_stop_early(cfg, 21.0) is False and train.should_stop_early.num_runs == 0
    del train.should_stop_early.best, train.should_stop_early.num_runs
    with pytest.raises(SystemExit, match="usage"):
        patience.main(["20.0", "3", "data"])


def test_command_keeps_the_fairseq_train_arguments():
    cmd = patience.command(["/x/fairseq-train", "data", "--seed", "1"], (39.15, 2))
    assert cmd == [sys.executable, "-m", "fairseq_outlayers.lab.ledger.patience", "39.15", "2", "--", "data", "--seed", "1"]


def partial_run(tmp_path, scores, patience=None):
    from harness import partial_ledger_run

    row, work = partial_ledger_run(tmp_path, patience=patience)
    (work / "checkpoint_last.pt").write_bytes(b"")
    write_log(work / "train.log", scores)
    return row


class Stop(Exception):
    pass


@pytest.mark.parametrize("scores, done, trains, patience", [
    ([(30.0, 5.0), (35.0, 4.0), (34.0, 4.1), (34.5, 4.0)], 4, (35.0, 2), None),  # 2 of 5 used: resume with the count
    ([(35.0, 4.0)] + [(34.0, 4.1)] * 5, 6, None, None),  # the protocol had stopped it: no more training
    ([(35.0, 4.0)] + [(34.0, 4.1)] * 5, 6, (35.0, 5), 8),  # ... but not a row registered with '# patience: 8'
    ([(35.0, 4.0)] + [(34.0, 4.1)] * 8, 9, None, 8),  # ... until its eighth validation without a better score
    # epoch 7 was validated by a run killed before it saved its checkpoint (epoch 6): not counted, still stopped
    ([(35.0, 4.0)] + [(34.0, 4.1)] * 5 + [(36.0, 3.9)], 6, None, None),
    ([(35.0, 4.0)] + [(34.0, 4.1)] * 4 + [(34.0, 4.1)], 5, (35.0, 4), None),  # ... and one to go
])
def test_runner_resumes_with_the_count_or_not_at_all(tmp_path, monkeypatch, scores, done, trains, patience):
    from fairseq_outlayers.lab.ledger import runner

    row = partial_run(tmp_path, scores, patience)
    calls, loaded = [], []

    def fake_training(cmd, *args, **kwargs):
        calls.append(cmd)
        raise Stop

    def fake_state(path):  # first the checkpoint resumed from, then (after training, or instead of it) stop here
        loaded.append(path)
        if len(loaded) > 1:
            raise Stop
        return {"epoch": done}

    monkeypatch.setattr(runner.fairseq_runs, "run_training", fake_training)
    monkeypatch.setattr(runner, "checkpoint_state", fake_state)
    with pytest.raises(Stop):
        runner.run(row, 1, runner.Settings(ledger=str(tmp_path / "runs"), work=str(tmp_path / "work"),
                                           test_ref="ref"))
    assert loaded[0].endswith("checkpoint_last.pt")
    if trains is None:
        assert calls == [] and len(loaded) == 2
    else:
        assert calls[0][:6] == [sys.executable, "-m", "fairseq_outlayers.lab.ledger.patience", repr(trains[0]),
                                str(trains[1]), "--"]
        assert calls[0][6] == str(tmp_path / "data")
        assert calls[0][calls[0].index("--patience") + 1] == str(patience or 5)


@pytest.mark.parametrize("saved_updates, trains", [(252, False), (200, True)])
def test_a_training_its_record_says_is_finished_is_not_resumed(tmp_path, monkeypatch, saved_updates, trains):
    """A step row's parent was recorded at 252 updates: a checkpoint_last.pt that far is finished whatever the log
    says (a log rewritten by an older runner may show patience left); one short of it resumes as before."""
    from fairseq_outlayers.lab.ledger import runner
    from fairseq_outlayers.lab.ledger.rows import row_options

    row = partial_run(tmp_path, [(30.0, 5.0), (35.0, 4.0), (34.0, 4.1)])  # 2 of 5 used: would resume
    calls = []
    monkeypatch.setattr(runner.fairseq_runs, "run_training", lambda cmd, *a, **k: calls.append(cmd) or 1.0)
    monkeypatch.setattr(runner, "checkpoint_state", lambda path: {"epoch": 3, "updates": saved_updates})
    settings = runner.Settings(ledger=str(tmp_path / "runs"), work=str(tmp_path / "work"), test_ref="ref")
    out = runner.train(row, 1, settings, row_options(row, 1, 5, 50, 5), str(tmp_path / "work" / "tied.seed1"),
                       finished_updates=252)
    assert bool(calls) == trains and out["seconds"] == (1.0 if trains else 0.0) and out["resumed"]


def test_a_real_resume_keeps_the_count_where_fairseq_train_alone_forgets_it(tiny_bin, tmp_path):
    """A run validated every 2 updates with --patience 2 resumes from update 2 with one validation since its best
    (carried from its log): fairseq-train alone would train on to --max-update, the resume entry stops at the
    next validation that does not beat the best, as an uninterrupted run would."""
    import torch
    from harness import run, tool, train, train_args

    extra = ["--output-layer", "tied", "--validate-interval-updates", "2", "--patience", "2"]
    first = str(tmp_path / "first")
    train(tiny_bin, first, extra=extra, max_update=2)
    for name, entry in (("plain", None), ("carried", (0.0, 1))):
        save = tmp_path / name
        save.mkdir()
        (save / "checkpoint_last.pt").write_bytes((tmp_path / "first" / "checkpoint_last.pt").read_bytes())
        cmd = [tool("fairseq-train")] + train_args(tiny_bin, str(save), extra=extra, max_update=8)
        proc = run(cmd if entry is None else patience.command(cmd, entry))
        updates = torch.load(str(save / "checkpoint_last.pt"), map_location="cpu",
                             weights_only=False)["optimizer_history"][-1]["num_updates"]
        stopped = "early stop since valid performance hasn't improved for last 2 runs" in proc.stdout + proc.stderr
        # a validation loss of 0.0 is never beaten: carried over, the first validation after the resume ends it
        assert (updates, stopped) == ((8, False) if entry is None else (4, True)), (name, updates)
